//! A redis-server that also listens with TLS.

use std::io;

use crate::ports::free_port;
use crate::{Pki, RedisNode, RedisOptions, TlsServer};

/// Start attempts with a fresh TLS port when another process took the first.
const START_TRIES: usize = 5;

/// A [`RedisNode`] that also serves TLS on a second port, with certificates from a [`Pki`].
///
/// The plain port stays open on loopback for the test's own set-up ([`RedisNode::cli`]); the
/// client under test uses [`url`](Self::url) (`rediss://`). Dropping it stops the server.
#[derive(Debug)]
pub struct TlsRedisNode {
    node: RedisNode,
    tls_port: u16,
}

impl TlsRedisNode {
    /// Starts redis-server with `--tls-port` and the PKI's files.
    ///
    /// # Errors
    ///
    /// As [`RedisNode::start`]; also when this redis-server was built without TLS.
    pub fn start(pki: &Pki, tls: TlsServer) -> io::Result<TlsRedisNode> {
        let mut last = None;
        for _ in 0..START_TRIES {
            let tls_port = free_port()?;
            let identity = tls.identity(pki);
            let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
            let args = vec![
                "--tls-port".into(),
                tls_port.to_string(),
                "--tls-cert-file".into(),
                path(&identity.cert),
                "--tls-key-file".into(),
                path(&identity.key),
                "--tls-ca-cert-file".into(),
                path(pki.ca()),
                "--tls-auth-clients".into(),
                if tls.require_client_cert { "yes" } else { "no" }.into(),
            ];
            match RedisNode::start_with(RedisOptions::new().extra_args(args)) {
                Ok(node) => return Ok(TlsRedisNode { node, tls_port }),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no start attempt was made")))
    }

    /// `rediss://127.0.0.1:<tls port>/0`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/0", self.tls_port)
    }

    /// The TLS port.
    pub fn tls_port(&self) -> u16 {
        self.tls_port
    }

    /// The server, for everything else (its plain port, `cli`, `pause`, logs).
    pub fn node(&self) -> &RedisNode {
        &self.node
    }
}
