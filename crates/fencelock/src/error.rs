//! The one public error type.

use std::fmt;

use crate::pure::vote::Votes;

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
    /// A fenced write of a lock that is still valid carried a token below the storage's last
    /// accepted one: the lock's fence counters were reset (see [`Error::CounterReset`]).
    CounterReset,
    /// The fenced storage failed (I/O, SQL error).
    Storage,
    /// Waiting for the lock ran past its deadline or retry count.
    Timeout,
    /// The calling task already holds the lock through this client (locks are not reentrant).
    AlreadyHeld,
}

/// Why a lock was lost (see [`Error::Lost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostCause {
    /// Its validity deadline (minus the safety margin, under auto-extension) passed before an
    /// extension succeeded: the extensions were too slow, or the work kept the thread that
    /// runs them busy.
    Expired,
    /// On so many nodes that no quorum holds it, the key is gone (expired, deleted by someone
    /// else, lost in a restart) or holds another owner's token.
    NotHeld,
    /// Too many nodes failed or timed out for an extension to reach a quorum within the
    /// validity left.
    Unreachable,
}

impl LostCause {
    /// What to try, for the error message.
    fn hint(self) -> &'static str {
        match self {
            LostCause::Expired => {
                "raise the TTL, or keep the work from blocking its thread (std::thread::sleep, heavy computation) for that long"
            }
            LostCause::NotHeld => {
                "work done since it was last extended was unprotected; if nobody deleted the keys, they expired: extend sooner or raise the TTL"
            }
            LostCause::Unreachable => "check that the nodes are up and reachable",
        }
    }
}

impl fmt::Display for LostCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostCause::Expired => "its validity ran out before an extension succeeded",
            LostCause::NotHeld => {
                "its keys are gone (expired, deleted, or lost in a node restart) or held by another owner on too many nodes for a quorum"
            }
            LostCause::Unreachable => {
                "too many nodes failed to answer for an extension to reach a quorum within its validity"
            }
        })
    }
}

/// The error of every fallible fencelock call.
///
/// Each lock error carries the per-node [`Votes`] that explain it. Node addresses in messages
/// and votes are redacted: passwords never appear.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Another owner holds the key on so many nodes that no quorum is possible.
    #[non_exhaustive]
    Contention {
        /// The resource.
        resource: String,
        /// Per-node answers.
        votes: Votes,
    },
    /// Too many nodes failed, timed out or are excluded for a quorum.
    #[non_exhaustive]
    Unavailable {
        /// The resource.
        resource: String,
        /// Per-node answers.
        votes: Votes,
    },
    /// A quorum granted, but the time it took left no validity (ttl - elapsed - drift <= 0).
    #[non_exhaustive]
    TooSlow {
        /// The resource.
        resource: String,
        /// Per-node answers.
        votes: Votes,
    },
    /// The lock is no longer ours; `cause` says how that was found out: its validity ran out,
    /// its keys are gone or held by another owner on a quorum, or too many nodes failed to
    /// answer an extension in time.
    #[non_exhaustive]
    Lost {
        /// The resource.
        resource: String,
        /// Per-node answers of the round that found out (empty if found by the local deadline
        /// or by the batch extender, which keeps counts only).
        votes: Votes,
        /// What happened.
        cause: LostCause,
    },
    /// `acquire` gave up: its deadline or retry count ran out. `last` is the last attempt's error.
    #[non_exhaustive]
    Timeout {
        /// The resource.
        resource: String,
        /// How many attempts were made.
        attempts: u32,
        /// The last attempt's error.
        last: Box<Error>,
    },
    /// The calling task already holds a lock on `resource` through this client: fencelock's
    /// locks are not reentrant (see `reentry.rs` in the crate: why, and what counts as the same
    /// task), so the request is refused at once, before any I/O, instead of waiting on itself.
    #[non_exhaustive]
    AlreadyHeld {
        /// The resource already held.
        resource: String,
    },
    /// An invalid configuration or argument, found before any I/O.
    #[non_exhaustive]
    InvalidConfig {
        /// Which setting or argument.
        what: String,
        /// What is wrong and what to try.
        message: String,
    },
    /// A fenced write was refused: its token is older than the one the storage accepted last.
    #[non_exhaustive]
    StaleToken {
        /// The fenced resource.
        resource: String,
        /// The token the write carried.
        presented: u64,
        /// The newest token the storage has accepted for the resource.
        current: u64,
    },
    /// A fenced write was refused although the lock that issued its token is still valid: its
    /// token is below the storage's last accepted one. A holder whose lock is over gets
    /// [`Error::StaleToken`]; a live holder below the storage's last means the fencing tokens
    /// started again below it: every node lost its fence counter (a redeploy without
    /// persistence) and the new epoch's clock was behind, or a restart the amnesia guard did
    /// not cover. Nothing was written. The way back, on Redis: `fencelock reseed --above
    /// <current>` (or [`Client::reseed_fence`](crate::Client::reseed_fence)), then take the
    /// lock again; retrying the write with this token cannot succeed
    /// ([`is_retryable`](Error::is_retryable) is `false`). Only tokens that know their lock
    /// ([`Lock::fencing_token`](crate::Lock::fencing_token),
    /// [`LockGuard::fencing_token`](crate::LockGuard::fencing_token),
    /// [`FencingToken::with_valid_until`](crate::FencingToken::with_valid_until)) can be told
    /// apart: a bare `u64` below the storage's last is always [`Error::StaleToken`].
    #[non_exhaustive]
    CounterReset {
        /// The fenced resource.
        resource: String,
        /// The token the write carried.
        presented: u64,
        /// The newest token the storage has accepted for the resource: reseed above it.
        current: u64,
        /// The lock that issued the token, as [`FencingToken::issuer`](crate::FencingToken::issuer)
        /// prints it (`redis:...` or `etcd:...`).
        issuer: Option<String>,
    },
    /// The fenced storage failed.
    #[non_exhaustive]
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
            Error::AlreadyHeld { .. } => ErrorKind::AlreadyHeld,
            Error::InvalidConfig { .. } => ErrorKind::InvalidConfig,
            Error::StaleToken { .. } => ErrorKind::StaleToken,
            Error::CounterReset { .. } => ErrorKind::CounterReset,
            Error::Storage { .. } => ErrorKind::Storage,
        }
    }

    /// Whether trying again later may succeed (contention, unavailability, slowness), that is
    /// unless [`needs_config_change`](Error::needs_config_change).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Contention | ErrorKind::Unavailable | ErrorKind::TooSlow
        ) && !self.needs_config_change()
    }

    /// Whether only a change of configuration can fix this: an invalid configuration, or so
    /// many nodes refused this client's credentials or ACL user
    /// ([`NodeError::needs_config_change`](crate::NodeError::needs_config_change)) that no
    /// quorum is possible however often it retries.
    pub fn needs_config_change(&self) -> bool {
        match self {
            Error::InvalidConfig { .. } => true,
            Error::Unavailable { votes, .. } => {
                let n = votes.len();
                n > 0
                    && n - crate::pure::vote::misconfigured(votes) < crate::pure::quorum::quorum(n)
            }
            Error::Timeout { last, .. } => last.needs_config_change(),
            _ => false,
        }
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

    pub(crate) fn lost(resource: impl Into<String>, votes: Votes, cause: LostCause) -> Error {
        Error::Lost {
            resource: resource.into(),
            votes,
            cause,
        }
    }

    pub(crate) fn config(what: impl Into<String>, message: impl Into<String>) -> Error {
        Error::InvalidConfig {
            what: what.into(),
            message: message.into(),
        }
    }

    /// A storage failure: what was being done, and the storage's own error (for code that
    /// wraps its own storage calls in fencelock's error, as the fences do).
    pub fn storage(context: impl Into<String>, source: impl Into<BoxError>) -> Error {
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
                // One line for the same failure on every node, rather than one per node.
                if let Some(same) = crate::pure::vote::all_same(votes) {
                    let hint = same.hint();
                    return match votes.as_slice() {
                        [one] => write!(f, "lock {resource:?}: {same} on {}; {hint}", one.node),
                        all => write!(
                            f,
                            "lock {resource:?}: {same} on all {} nodes; {hint}",
                            all.len()
                        ),
                    };
                }
                write!(
                    f,
                    "lock {resource:?}: {} of {} node(s) failed, timed out or are excluded, too many for a quorum ({votes}); {}",
                    votes.failed(),
                    votes.len(),
                    crate::pure::vote::advice(votes)
                )
            }
            Error::TooSlow { resource, votes }
                if votes
                    .iter()
                    .any(|v| matches!(v.outcome, crate::pure::vote::VoteOutcome::NotHeld)) =>
            {
                write!(
                    f,
                    "lock {resource:?}: a quorum granted, but when the fencing token was written back our key was gone on some nodes ({votes}): it expired, or something deleted or evicted it, or the node lost its data; retry, and if it recurs check the nodes' maxmemory-policy (noeviction) and who deletes keys there"
                )
            }
            Error::TooSlow { resource, votes } => write!(
                f,
                "lock {resource:?}: a quorum granted but acquisition took longer than the TTL allows, so no validity was left ({votes}); raise the TTL or lower the per-node timeout"
            ),
            Error::Lost {
                resource,
                votes,
                cause,
            } if votes.is_empty() => write!(
                f,
                "lock {resource:?} was lost: {cause}; {}",
                cause.hint()
            ),
            Error::Lost {
                resource,
                votes,
                cause,
            } => write!(
                f,
                "lock {resource:?} was lost: {cause} ({votes}); {}",
                cause.hint()
            ),
            Error::Timeout {
                resource,
                attempts,
                last,
            } => write!(
                f,
                "gave up waiting for lock {resource:?} after {attempts} attempt(s); last attempt: {last}"
            ),
            Error::AlreadyHeld { resource } => write!(
                f,
                "lock {resource:?} is already held by this task through this client, and fencelock's locks are not reentrant; pass the held Lock (or its LockContext) to the code that needs it, or release it before asking again"
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
            Error::CounterReset {
                resource,
                presented,
                current,
                issuer,
            } => {
                write!(
                    f,
                    "fenced write on {resource:?} refused although its lock is still valid: its fencing token {presented} is below the storage's last accepted token {current}, so the lock's fencing tokens started again below it (every node lost its fence counter); this is a reset, not a stale holder: "
                )?;
                if issuer.as_deref().is_some_and(|i| i.starts_with("etcd:")) {
                    write!(
                        f,
                        "etcd's revisions restarted, which only a loss of the etcd cluster's data does, and no client can raise them; once no holder from before the loss can write, delete the fence row of {resource:?}"
                    )
                } else {
                    write!(
                        f,
                        "run `fencelock reseed --above {current}` against the lock's nodes, then take the lock again"
                    )
                }
            }
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
