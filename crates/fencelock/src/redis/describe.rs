//! A Redis driver error in words a person can act on: the one description of a node's error,
//! used by the votes of every round and by the CLI's direct connections.

use redis::{ErrorKind, RedisError};

use crate::pure::node_error::{FailureCause, NodeError};

/// Describes `e` without anything secret (the driver never echoes passwords in command errors,
/// but connection errors may quote the address: only kinds, codes and server details are kept).
pub(crate) fn describe(e: &RedisError) -> NodeError {
    if e.is_connection_refusal() {
        return NodeError::new(FailureCause::Refused, "");
    }
    if e.kind() == ErrorKind::AuthenticationFailed {
        // AUTH refused at connection set-up: the driver keeps no detail.
        return NodeError::new(FailureCause::Auth, "");
    }
    if let Some((code, detail)) = server_error(e) {
        if code == "TRYAGAIN" {
            // A cluster's slot half moved: the server's words ("Multiple keys request during
            // rehashing of slot") do not say what to do.
            return NodeError::other(
                "TRYAGAIN: the cluster is moving the tag's slot to another primary, and this \
                 request names keys that are split between the two (a fenced or waiting \
                 acquisition; an extension or a release after its retries); it works again once \
                 the move ends, and a lock left unreleased meanwhile expires with its TTL",
            );
        }
        let cause = match code.as_str() {
            // NOAUTH: the URL has no password for a node that needs one.
            "NOAUTH" | "WRONGPASS" => FailureCause::Auth,
            "NOPERM" => FailureCause::NoPermission,
            "READONLY" => FailureCause::ReadOnly,
            "OOM" => FailureCause::OutOfMemory,
            "LOADING" => FailureCause::Loading,
            "WRONGTYPE" => FailureCause::WrongType,
            "NOSCRIPT" => FailureCause::NoScript,
            "MISCONF" => FailureCause::WritesStopped,
            // The connection's SELECT of the URL's database (`redis://host/99`).
            "ERR" if detail.as_deref().is_some_and(|d| d.contains("DB index")) => {
                FailureCause::NoDatabase
            }
            _ => FailureCause::Other,
        };
        return match (cause, detail) {
            (FailureCause::Other, Some(detail)) => NodeError::other(format!("{code} {detail}")),
            (FailureCause::Other, None) => NodeError::other(code),
            // The server's words of these add nothing to the cause (the script's SHA, a path).
            (
                FailureCause::WrongType
                | FailureCause::NoScript
                | FailureCause::WritesStopped
                | FailureCause::NoDatabase,
                _,
            ) => NodeError::new(cause, ""),
            (cause, detail) => NodeError::new(cause, detail.unwrap_or_default()),
        };
    }
    if e.kind() == ErrorKind::Client && e.to_string().starts_with(crate::pure::nodeset::CONFLICT) {
        // Another node set's record: the detail names both sets and the way out.
        return NodeError::other(e.detail().unwrap_or_default());
    }
    if e.kind() == ErrorKind::Client && e.to_string().starts_with(super::version::UNSUPPORTED) {
        // A node too old for the scripts: the detail says which version, where, and what to do.
        return NodeError::other(e.detail().unwrap_or_default());
    }
    if e.kind() == ErrorKind::Client && e.to_string().starts_with(super::sentinel::SENTINEL_ERR) {
        // The Sentinels of a `redis+sentinel://` node: which answered what, and what to try.
        return NodeError::other(e.detail().unwrap_or_default());
    }
    if e.kind() == ErrorKind::Client && e.to_string().starts_with(super::cluster::CLUSTER_ERR) {
        // The seeds of a `redis+cluster://` node: which answered what, and what to try.
        return NodeError::other(e.detail().unwrap_or_default());
    }
    if e.kind() == ErrorKind::InvalidClientConfig {
        // The client's own TLS library refused its TLS settings before any handshake: not the
        // node's fault, and no retry helps.
        return crate::tls::client_config_failure(&e.to_string());
    }
    if e.is_io_error() && e.to_string().contains(crate::tls::PLAINTEXT_NODE) {
        return NodeError::new(FailureCause::Tls, crate::tls::PLAINTEXT_NODE);
    }
    if e.is_timeout() {
        // Requests have no driver timeout (the round's deadline bounds them), so this is the
        // connection set-up running out of its connect timeout.
        return NodeError::other(
            "no answer while connecting, within the connect timeout (is the node hung or \
             overloaded? if it is only slow, raise the connect timeout)",
        );
    }
    if e.is_connection_dropped() {
        return NodeError::other("connection lost");
    }
    if e.is_io_error() {
        let text = e.to_string();
        if let Some(tls) = crate::tls::handshake_failure(&text) {
            return tls;
        }
        return NodeError::other(format!("I/O error: {text}"));
    }
    NodeError::other(match e.detail() {
        Some(detail) => format!("{} ({:?}): {detail}", e.category(), e.kind()),
        None => format!("{} ({:?})", e.category(), e.kind()),
    })
}

/// The code and detail of the server's error reply behind `e`: of the reply itself, or of the
/// first failed command of a pipeline (the connection set-up sends one).
fn server_error(e: &RedisError) -> Option<(String, Option<String>)> {
    if let Some(errors) = e.clone().into_server_errors() {
        if let Some((_, first)) = errors.first() {
            return Some((first.code().to_owned(), first.details().map(str::to_owned)));
        }
    }
    e.code()
        .map(|code| (code.to_owned(), e.detail().map(str::to_owned)))
}

// The driver's error is the Redis backend's business: the conversion lives beside `describe`,
// so that `NodeError` itself (in `pure/`) knows nothing of the driver.
impl NodeError {
    /// Describes an error of a node's driver in the words fencelock's votes use: for a
    /// `redis::RedisError` (of the `redis` version fencelock depends on), its cause; for any
    /// other error, its text.
    ///
    /// For tools that talk to the nodes directly (the `fencelock` CLI's `doctor`) and should
    /// say what the lock calls say.
    pub fn from_driver_error(err: &(dyn std::error::Error + 'static)) -> NodeError {
        match err.downcast_ref::<::redis::RedisError>() {
            Some(e) => describe(e),
            None => NodeError::other(err.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The driver's error values stand in for a server here only to pin the mapping of codes;
    // tests/node_errors.rs provokes each cause on a real redis-server.
    #[test]
    fn server_codes_map_to_causes() {
        let reply = |code: &str, detail: &str| {
            redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
        };
        assert_eq!(
            describe(&reply("NOAUTH", "Authentication required.")).cause(),
            FailureCause::Auth
        );
        assert_eq!(
            describe(&reply("OOM", "command not allowed")).cause(),
            FailureCause::OutOfMemory
        );
        let moving = describe(&reply(
            "TRYAGAIN",
            "Multiple keys request during rehashing of slot",
        ));
        assert!(
            moving
                .to_string()
                .starts_with("TRYAGAIN: the cluster is moving"),
            "{moving}"
        );
        let other = describe(&reply("WEIRD", "something"));
        assert_eq!(other.cause(), FailureCause::Other);
        assert_eq!(other.to_string(), "WEIRD something");
        let auth = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert_eq!(
            describe(&auth).to_string(),
            "authentication failed (wrong or missing password)"
        );
    }
}
