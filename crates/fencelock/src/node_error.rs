//! Why one node failed a request, in words a person can act on: the one description of a
//! node's error that votes, errors and the CLI all print.

use std::fmt;

use crate::vote::{VoteOutcome, Votes};

/// The cause of a [`NodeError`], for callers (and summaries) that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureCause {
    /// Nothing listens on the node's port: the connection was refused.
    Refused,
    /// The node refused the credentials: a wrong or missing password or user in the URL
    /// (`WRONGPASS`, `NOAUTH`).
    Auth,
    /// The node's ACL does not allow the URL's user a command or key that fencelock needs
    /// (`NOPERM`).
    NoPermission,
    /// The node is a read-only replica (`READONLY`): Redlock needs primaries.
    ReadOnly,
    /// The node is out of memory and refuses writes (`OOM`: `maxmemory` reached and nothing its
    /// policy may evict, as under `noeviction`).
    OutOfMemory,
    /// The node is still loading its dataset into memory (`LOADING`); it answers once loaded.
    Loading,
    /// The TLS handshake failed: the node's certificate is not trusted or does not name the
    /// host of its URL, or the node refused this client's certificate (or its absence).
    Tls,
    /// Anything else: a lost connection, an I/O error, an unexpected reply.
    Other,
}

/// One node's failure: its [`FailureCause`] and a one-line description that never holds a
/// secret.
///
/// ```
/// use fencelock::{FailureCause, NodeError};
///
/// let err = NodeError::from("connection lost");
/// assert_eq!(err.cause(), FailureCause::Other);
/// assert_eq!(err.to_string(), "connection lost");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeError {
    cause: FailureCause,
    /// The server's own words where they help (the ACL's refusal names the command), or the
    /// whole description for [`FailureCause::Other`].
    detail: String,
}

impl NodeError {
    pub(crate) fn new(cause: FailureCause, detail: impl Into<String>) -> NodeError {
        NodeError {
            cause,
            detail: detail.into(),
        }
    }

    /// A failure of no particular cause, described by `text`.
    pub(crate) fn other(text: impl Into<String>) -> NodeError {
        NodeError::new(FailureCause::Other, text)
    }

    /// The cause.
    pub fn cause(&self) -> FailureCause {
        self.cause
    }

    /// Whether only a change of configuration fixes it (the password, the ACL user): retrying
    /// cannot help.
    pub fn needs_config_change(&self) -> bool {
        matches!(
            self.cause,
            FailureCause::Auth | FailureCause::NoPermission | FailureCause::Tls
        )
    }

    /// What to try, in a few words.
    pub fn hint(&self) -> &'static str {
        match self.cause {
            FailureCause::Auth => {
                "put the node's password in its URL: redis://:PASSWORD@host:port, or redis://USER:PASSWORD@host:port for an ACL user"
            }
            FailureCause::NoPermission => {
                "let the URL's user run fencelock's scripts and the commands they call on the lock keys, e.g. ACL SETUSER NAME +@scripting +@read +@write +info +time +@pubsub ~LOCK-KEY-PATTERN ~fencelock:* &fencelock:*"
            }
            FailureCause::ReadOnly => {
                "list primaries, not replicas: Redlock needs independent primaries (`fencelock doctor` names replicas)"
            }
            FailureCause::OutOfMemory => {
                "free memory on the node or raise its maxmemory (an evicting policy is no fix: it can drop lock keys)"
            }
            FailureCause::Loading => "retry once the node has loaded its data",
            FailureCause::Tls => {
                "check the TLS settings: the CA that signed the node's certificate (TlsConfig::with_ca_file, --tls-ca), a URL host that the certificate names, and a client certificate where the node requires one (--tls-cert, --tls-key)"
            }
            FailureCause::Refused | FailureCause::Other => {
                "check that the nodes are up and reachable, or raise the per-node timeout"
            }
        }
    }

    /// Describes an error of a node's driver in the words fencelock's votes use: for a
    /// `redis::RedisError` (of the `redis` version fencelock depends on), its cause; for any
    /// other error, its text.
    ///
    /// For tools that talk to the nodes directly (the `fencelock` CLI's `doctor`) and should
    /// say what the lock calls say.
    pub fn from_driver_error(err: &(dyn std::error::Error + 'static)) -> NodeError {
        match err.downcast_ref::<::redis::RedisError>() {
            Some(e) => crate::redis::describe(e),
            None => NodeError::other(err.to_string()),
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cause {
            FailureCause::Refused => f.write_str("connection refused (is the node running?)"),
            FailureCause::Auth => f.write_str("authentication failed (wrong or missing password)"),
            FailureCause::NoPermission => {
                write!(f, "refused by the node's ACL (NOPERM {})", self.detail)
            }
            FailureCause::ReadOnly => f.write_str("the node is a read-only replica (READONLY)"),
            FailureCause::OutOfMemory => f.write_str(
                "the node is out of memory and refuses writes (OOM: used memory above maxmemory and nothing it may evict)",
            ),
            FailureCause::Loading => {
                f.write_str("the node is still loading its dataset into memory (LOADING)")
            }
            FailureCause::Tls => write!(f, "TLS handshake failed: {}", self.detail),
            FailureCause::Other => f.write_str(&self.detail),
        }
    }
}

impl From<String> for NodeError {
    fn from(text: String) -> NodeError {
        NodeError::other(text)
    }
}

impl From<&str> for NodeError {
    fn from(text: &str) -> NodeError {
        NodeError::other(text)
    }
}

/// The failure every node of the round reported, if they all reported the same one.
pub(crate) fn all_same(votes: &Votes) -> Option<&NodeError> {
    let mut errors = votes.iter().map(|v| match &v.outcome {
        VoteOutcome::Failed(e) => Some(e),
        _ => None,
    });
    let first = errors.next()??;
    errors.all(|e| e == Some(first)).then_some(first)
}

/// How many nodes of the round failed for a reason only a configuration change fixes.
pub(crate) fn misconfigured(votes: &Votes) -> usize {
    votes
        .iter()
        .filter(|v| matches!(&v.outcome, VoteOutcome::Failed(e) if e.needs_config_change()))
        .count()
}

/// What to try for a round that failed: the hint of each cause seen, most specific first, or
/// the general one.
pub(crate) fn advice(votes: &Votes) -> String {
    let mut hints: Vec<&'static str> = Vec::new();
    if votes
        .iter()
        .any(|v| matches!(v.outcome, VoteOutcome::Excluded(_)))
    {
        hints.push("a node in restart quarantine counts again once the longest TTL in use has passed since its restart (each says when); fresh nodes that never held a lock can be counted at once with with_quarantine(false)");
    }
    for vote in votes.iter() {
        if let VoteOutcome::Failed(e) = &vote.outcome {
            if e.cause != FailureCause::Other
                && e.cause != FailureCause::Refused
                && !hints.contains(&e.hint())
            {
                hints.push(e.hint());
            }
        }
    }
    if hints.is_empty() || votes.iter().any(|v| general(&v.outcome)) {
        hints.push(NodeError::other("").hint());
    }
    hints.join("; ")
}

/// Whether an outcome calls for the general advice (the node is down, slow or unreachable).
fn general(outcome: &VoteOutcome) -> bool {
    match outcome {
        VoteOutcome::TimedOut => true,
        VoteOutcome::Failed(e) => matches!(e.cause, FailureCause::Other | FailureCause::Refused),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::vote::NodeVote;

    fn votes(outcomes: &[VoteOutcome]) -> Votes {
        Votes(
            outcomes
                .iter()
                .enumerate()
                .map(|(i, outcome)| NodeVote {
                    node: Arc::from(format!("redis://:***@127.0.0.1:{}/0", 7000 + i)),
                    outcome: outcome.clone(),
                    latency: Duration::from_millis(1),
                })
                .collect(),
        )
    }

    fn failed(cause: FailureCause) -> VoteOutcome {
        VoteOutcome::Failed(NodeError::new(cause, "x"))
    }

    #[test]
    fn the_same_failure_everywhere_is_found() {
        let auth = failed(FailureCause::Auth);
        assert!(all_same(&votes(&[auth.clone(), auth.clone(), auth.clone()])).is_some());
        assert!(all_same(&votes(&[auth.clone(), auth.clone(), VoteOutcome::TimedOut])).is_none());
        assert!(all_same(&votes(&[auth.clone(), failed(FailureCause::Loading)])).is_none());
        assert!(all_same(&votes(&[])).is_none());
    }

    #[test]
    fn advice_follows_the_causes_seen() {
        let auth = failed(FailureCause::Auth);
        let advice_for = |o: &[VoteOutcome]| advice(&votes(o));
        let alone = advice_for(std::slice::from_ref(&auth));
        assert!(alone.starts_with("put the node's password"), "{alone}");
        assert!(!alone.contains("reachable"), "{alone}");
        let mixed = advice_for(&[auth, VoteOutcome::TimedOut]);
        assert!(
            mixed.contains("password") && mixed.contains("reachable"),
            "{mixed}"
        );
        assert!(advice_for(&[VoteOutcome::TimedOut]).contains("reachable"));
    }

    #[test]
    fn only_auth_and_acl_need_a_config_change() {
        let needs = |c| NodeError::new(c, "").needs_config_change();
        assert!(needs(FailureCause::Auth) && needs(FailureCause::NoPermission));
        assert!(needs(FailureCause::Tls));
        assert!(!needs(FailureCause::Loading) && !needs(FailureCause::ReadOnly));
        assert_eq!(
            misconfigured(&votes(&[
                failed(FailureCause::Auth),
                failed(FailureCause::NoPermission),
                VoteOutcome::TimedOut
            ])),
            2
        );
    }
}
