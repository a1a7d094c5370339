//! Why one node failed a request, in words a person can act on: the one description of a
//! node's error that votes, errors and the CLI all print.

use std::fmt;

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
    /// host of its URL, or the node refused this client's certificate (or its absence); or this
    /// client's own TLS library refused its certificate (an X.509 v1 certificate), or a
    /// `rediss://` URL names a node that speaks plain text.
    Tls,
    /// The key holds data of another type (`WRONGTYPE`): the resource's name is used by data
    /// that is not a lock.
    WrongType,
    /// The node does not have fencelock's script (`NOSCRIPT`): its script cache was flushed
    /// (`SCRIPT FLUSH`) or it restarted.
    NoScript,
    /// The node refuses writes because its last snapshot failed (`MISCONF`:
    /// `stop-writes-on-bgsave-error`).
    WritesStopped,
    /// The URL's database does not exist on the node (`redis://host/99` on a node with 16).
    NoDatabase,
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
            FailureCause::Auth
                | FailureCause::NoPermission
                | FailureCause::Tls
                | FailureCause::NoDatabase
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
            FailureCause::WrongType => {
                "the resource's name is used by other data on the node: choose another resource name, or delete that key if it is stale"
            }
            FailureCause::NoScript => {
                "fencelock loads its scripts again on its own; if this repeats, find what runs SCRIPT FLUSH (or restarts the node) and stop it"
            }
            FailureCause::WritesStopped => {
                "fix the node's snapshots (the disk, its `dir`; see the node's log), then run BGSAVE; or CONFIG SET stop-writes-on-bgsave-error no"
            }
            FailureCause::NoDatabase => {
                "use a database that the node has (below its `databases` setting, 16 by default): redis://host:port/0"
            }
            FailureCause::Tls => {
                "check the TLS settings: the CA that signed the node's certificate (TlsConfig::with_ca_file, --tls-ca), a URL host that the certificate names, and a client certificate where the node requires one (--tls-cert, --tls-key)"
            }
            FailureCause::Refused | FailureCause::Other => {
                "check that the nodes are up and reachable, or raise the per-node timeout"
            }
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
            FailureCause::WrongType => f.write_str(
                "the key holds data of another type, not a lock (WRONGTYPE)",
            ),
            FailureCause::NoScript => f.write_str(
                "the node lost fencelock's script (NOSCRIPT: its script cache was flushed, or it restarted)",
            ),
            FailureCause::WritesStopped => f.write_str(
                "the node refuses writes because its last snapshot failed (MISCONF)",
            ),
            FailureCause::NoDatabase => {
                f.write_str("the URL's database does not exist on the node (DB index is out of range)")
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_auth_and_acl_need_a_config_change() {
        let needs = |c| NodeError::new(c, "").needs_config_change();
        assert!(needs(FailureCause::Auth) && needs(FailureCause::NoPermission));
        assert!(needs(FailureCause::Tls) && needs(FailureCause::NoDatabase));
        assert!(!needs(FailureCause::WritesStopped) && !needs(FailureCause::NoScript));
        assert!(!needs(FailureCause::Loading) && !needs(FailureCause::ReadOnly));
    }
}
