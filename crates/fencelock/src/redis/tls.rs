//! Opening a node's driver client, with the TLS settings for `rediss://` nodes.

use crate::error::Error;
use crate::node::{NodeAddr, Scheme};
use crate::tls::TlsMaterial;

/// The driver's client for `addr`. No I/O.
///
/// # Errors
///
/// [`Error::InvalidConfig`] naming the node (redacted) when the driver refuses the URL or the
/// TLS material, or for `rediss://` in a build without the `tls` feature.
pub(super) fn open(addr: &NodeAddr, tls: Option<&TlsMaterial>) -> Result<redis::Client, Error> {
    let is_tls = addr.scheme() == Scheme::RedisTls;
    let opened = if is_tls {
        open_tls(addr, tls)?
    } else {
        redis::Client::open(addr.secret_url())
    };
    opened.map_err(|e| {
        // The driver's message may quote the URL (with its password); keep only its kind.
        Error::config(
            format!("node URL {addr}"),
            format!(
                "the Redis driver rejected it ({:?}); check the URL",
                e.kind()
            ),
        )
    })
}

#[cfg(feature = "tls")]
fn open_tls(
    addr: &NodeAddr,
    tls: Option<&TlsMaterial>,
) -> Result<redis::RedisResult<redis::Client>, Error> {
    crate::tls::install_crypto_provider();
    let Some(tls) = tls.filter(|t| t.ca.is_some() || t.identity.is_some()) else {
        return Ok(redis::Client::open(addr.secret_url()));
    };
    let certificates = redis::TlsCertificates {
        client_tls: tls
            .identity
            .clone()
            .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                client_cert,
                client_key,
            }),
        root_cert: tls.ca.clone(),
    };
    Ok(redis::Client::build_with_tls(
        addr.secret_url(),
        certificates,
    ))
}

#[cfg(not(feature = "tls"))]
fn open_tls(
    addr: &NodeAddr,
    _tls: Option<&TlsMaterial>,
) -> Result<redis::RedisResult<redis::Client>, Error> {
    Err(Error::config(
        format!("node URL {addr}"),
        "rediss:// needs fencelock's `tls` feature (cargo add fencelock --features tls)",
    ))
}
