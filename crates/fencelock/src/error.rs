//! The one public error type.

use std::fmt;

use crate::vote::Votes;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure an [`Error`] is, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Another client holds the lock on too many nodes.
    Contention,
    /// Too many nodes failed or timed out for a quorum.
    Unavailable,
    /// A quorum granted, but acquisition took so long that no validity was left.
    TooSlow,
    /// The lock was lost or had expired (extend, release, or the lost signal).
    Lost,
    /// The configuration or an argument is invalid.
    InvalidConfig,
    /// A fenced write carried a token older than the one the storage already accepted.
    StaleToken,
    /// The fenced storage failed (I/O, SQL error).
    Storage,
    /// Waiting for the lock ran past its deadline or retry count.
    Timeout,
}

/// The error of every fallible fencelock call.
///
/// Each lock error carries the per-node [`Votes`] that explain it. Node addresses in messages
/// and votes are redacted: passwords never appear.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Another owner holds the key on so many nodes that no quorum is possible.
    Contention {
        /// The resource.
        resource: String,
        /// Per-node answers.
        votes: Votes,
    },
    /// Too many nodes failed, timed out or are excluded for a quorum.
    Unavailable {
        /// The resource.
        resource: String,
        /// Per-node answers.
        votes: Votes,
    },
    /// A quorum granted, but the time it took left no validity (ttl - elapsed - drift <= 0).
    TooSlow {
        /// The resource.
        resource: String,
        /// Per-node answers.
        votes: Votes,
    },
    /// The lock is no longer ours: it expired, or another owner took it, or an extension did not
    /// reach a quorum within the remaining validity.
    Lost {
        /// The resource.
        resource: String,
        /// Per-node answers of the round that found out (empty if found by the local deadline).
        votes: Votes,
    },
    /// `acquire` gave up: its deadline or retry count ran out. `last` is the last attempt's error.
    Timeout {
        /// The resource.
        resource: String,
        /// How many attempts were made.
        attempts: u32,
        /// The last attempt's error.
        last: Box<Error>,
    },
    /// An invalid configuration or argument, found before any I/O.
    InvalidConfig {
        /// Which setting or argument.
        what: String,
        /// What is wrong and what to try.
        message: String,
    },
    /// A fenced write was refused: its token is older than the one the storage accepted last.
    StaleToken {
        /// The fenced resource.
        resource: String,
        /// The token the write carried.
        presented: u64,
        /// The newest token the storage has accepted for the resource.
        current: u64,
    },
    /// The fenced storage failed.
    Storage {
        /// What was being done.
        context: String,
        /// The storage's own error.
        source: BoxError,
    },
}

impl Error {
    /// The kind of failure, for matching without destructuring.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Contention { .. } => ErrorKind::Contention,
            Error::Unavailable { .. } => ErrorKind::Unavailable,
            Error::TooSlow { .. } => ErrorKind::TooSlow,
            Error::Lost { .. } => ErrorKind::Lost,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::InvalidConfig { .. } => ErrorKind::InvalidConfig,
            Error::StaleToken { .. } => ErrorKind::StaleToken,
            Error::Storage { .. } => ErrorKind::Storage,
        }
    }

    /// Whether trying again later may succeed (contention, unavailability, slowness).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Contention | ErrorKind::Unavailable | ErrorKind::TooSlow
        )
    }

    /// The per-node answers behind this error, if it came from a round of requests.
    pub fn votes(&self) -> Option<&Votes> {
        match self {
            Error::Contention { votes, .. }
            | Error::Unavailable { votes, .. }
            | Error::TooSlow { votes, .. }
            | Error::Lost { votes, .. } => Some(votes),
            Error::Timeout { last, .. } => last.votes(),
            _ => None,
        }
    }

    pub(crate) fn config(what: impl Into<String>, message: impl Into<String>) -> Error {
        Error::InvalidConfig {
            what: what.into(),
            message: message.into(),
        }
    }

    #[allow(dead_code)] // used by the storage adapters, which are behind features
    pub(crate) fn storage(context: impl Into<String>, source: impl Into<BoxError>) -> Error {
        Error::Storage {
            context: context.into(),
            source: source.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Contention { resource, votes } => write!(
                f,
                "lock {resource:?} is held by another client on {} node(s), so no quorum is possible ({votes}); wait for it to be released, or retry later",
                votes.held_by_other()
            ),
            Error::Unavailable { resource, votes } => {
                let excluded = votes
                    .iter()
                    .filter(|v| matches!(v.outcome, crate::vote::VoteOutcome::Excluded(_)))
                    .count();
                let hint = if excluded > 0 {
                    "a node in restart quarantine counts again once the longest TTL in use has passed since its restart (each says when); fresh nodes that never held a lock can be counted at once with with_quarantine(false)"
                } else {
                    "check that the nodes are up and reachable, or raise the per-node timeout"
                };
                write!(
                    f,
                    "lock {resource:?}: {} of {} node(s) failed, timed out or are excluded, too many for a quorum ({votes}); {hint}",
                    votes.failed(),
                    votes.0.len()
                )
            }
            Error::TooSlow { resource, votes } => write!(
                f,
                "lock {resource:?}: a quorum granted but acquisition took longer than the TTL allows, so no validity was left ({votes}); raise the TTL or lower the per-node timeout"
            ),
            Error::Lost { resource, votes } if votes.0.is_empty() => write!(
                f,
                "lock {resource:?} was lost: its validity ran out before an extension succeeded"
            ),
            Error::Lost { resource, votes } => write!(
                f,
                "lock {resource:?} was lost: it expired or another owner holds it ({votes})"
            ),
            Error::Timeout {
                resource,
                attempts,
                last,
            } => write!(
                f,
                "gave up waiting for lock {resource:?} after {attempts} attempt(s); last attempt: {last}"
            ),
            Error::InvalidConfig { what, message } => write!(f, "invalid {what}: {message}"),
            Error::StaleToken {
                resource,
                presented,
                current,
            } => write!(
                f,
                "stale write on {resource:?} refused: it carries fencing token {presented}, but the storage already accepted token {current}; the lock was lost, do not retry this write"
            ),
            Error::Storage { context, source } => write!(f, "storage error while {context}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Storage { source, .. } => Some(source.as_ref()),
            Error::Timeout { last, .. } => Some(last.as_ref()),
            _ => None,
        }
    }
}

/// `Result` with fencelock's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
