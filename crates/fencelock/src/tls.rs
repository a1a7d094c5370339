//! TLS settings for `rediss://` and `etcds://` nodes: which CA to trust and which certificate
//! to present. A plain value; the files are read when a [`Client`](crate::Client) is built.

use std::fmt;
use std::path::PathBuf;

use crate::error::Error;
use crate::node::{NodeAddr, Scheme};
use crate::pure::node_error::{FailureCause, NodeError};

/// Where a PEM document comes from.
#[derive(Clone, PartialEq, Eq)]
enum Pem {
    File(PathBuf),
    Bytes(Vec<u8>),
}

/// The TLS settings of a node set (`rediss://` or `etcds://` URLs), given to
/// [`Config::with_tls`](crate::Config::with_tls).
///
/// - A CA ([`with_ca_file`](Self::with_ca_file) or [`with_ca_pem`](Self::with_ca_pem)): the
///   nodes' certificates must chain to it (instead of the public roots, which are trusted when
///   no CA is given).
/// - A client certificate and its key, for nodes that require one (`tls-auth-clients yes` on
///   Redis, `--client-cert-auth` on etcd).
///
/// The server name checked is the host of each node URL: connect by the name (or IP address)
/// that the node's certificate carries.
///
/// The key's path and contents never appear in `Debug`, logs or errors.
///
/// ```
/// use fencelock::{Config, TlsConfig};
///
/// let tls = TlsConfig::new()
///     .with_ca_file("/etc/fencelock/ca.pem")
///     .with_client_cert_file("/etc/fencelock/client.pem")
///     .with_client_key_file("/etc/fencelock/client.key");
/// let config = Config::new(["rediss://cache.internal:6380/0"]).with_tls(tls);
/// assert!(!format!("{config:?}").contains("client.key"));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    ca: Option<Pem>,
    client_cert: Option<Pem>,
    client_key: Option<Pem>,
}

/// The settings, read and checked: what the drivers take.
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
#[derive(Clone)]
pub(crate) struct TlsMaterial {
    /// The CA certificates (PEM), if the public roots are not to be used.
    pub(crate) ca: Option<Vec<u8>>,
    /// The client certificate chain and its key (PEM).
    pub(crate) identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca", &self.ca.is_some())
            .field("identity", &self.identity.is_some())
            .finish()
    }
}

impl TlsConfig {
    /// No CA (the public roots) and no client certificate.
    pub fn new() -> TlsConfig {
        TlsConfig::default()
    }

    /// Trusts the CA certificate(s) in this PEM file, and only them.
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> TlsConfig {
        self.ca = Some(Pem::File(path.into()));
        self
    }

    /// Trusts the CA certificate(s) in this PEM text, and only them.
    pub fn with_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> TlsConfig {
        self.ca = Some(Pem::Bytes(pem.into()));
        self
    }

    /// Presents the certificate (chain) in this PEM file; needs a key as well.
    pub fn with_client_cert_file(mut self, path: impl Into<PathBuf>) -> TlsConfig {
        self.client_cert = Some(Pem::File(path.into()));
        self
    }

    /// Presents the certificate (chain) in this PEM text; needs a key as well.
    pub fn with_client_cert_pem(mut self, pem: impl Into<Vec<u8>>) -> TlsConfig {
        self.client_cert = Some(Pem::Bytes(pem.into()));
        self
    }

    /// The client certificate's private key, from this PEM file (its path is never shown).
    pub fn with_client_key_file(mut self, path: impl Into<PathBuf>) -> TlsConfig {
        self.client_key = Some(Pem::File(path.into()));
        self
    }

    /// The client certificate's private key, as PEM text.
    pub fn with_client_key_pem(mut self, pem: impl Into<Vec<u8>>) -> TlsConfig {
        self.client_key = Some(Pem::Bytes(pem.into()));
        self
    }

    /// Whether nothing is set (the public roots, no client certificate).
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.client_cert.is_none() && self.client_key.is_none()
    }

    /// Whether a CA is set.
    pub fn has_ca(&self) -> bool {
        self.ca.is_some()
    }

    /// Whether a client certificate is set.
    pub fn has_client_cert(&self) -> bool {
        self.client_cert.is_some()
    }

    /// Refuses settings that would be ignored: TLS files for plain `redis://` or `etcd://`
    /// nodes, or a certificate without its key.
    pub(crate) fn check(&self, nodes: &[NodeAddr]) -> Result<(), Error> {
        if self.is_empty() {
            return Ok(());
        }
        if let Some(zk) = nodes.iter().find(|n| n.scheme().is_zookeeper()) {
            return Err(Error::config(
                "tls",
                format!("TLS settings are given but node {zk} is a ZooKeeper ensemble, which fencelock reaches without TLS so far"),
            ));
        }
        if let Some(plain) = nodes
            .iter()
            .find(|n| matches!(n.scheme(), Scheme::Redis | Scheme::Etcd | Scheme::Postgres))
        {
            if plain.scheme().is_postgres() {
                return Err(Error::config(
                    "tls",
                    format!("TLS settings are given but node {plain} is a PostgreSQL database, which fencelock reaches without TLS so far"),
                ));
            }
            let tls = if plain.scheme().is_redis() {
                "rediss://"
            } else {
                "etcds://"
            };
            return Err(Error::config(
                "tls",
                format!(
                    "TLS settings are given but node {plain} is not a TLS URL; write it as {tls}"
                ),
            ));
        }
        match (&self.client_cert, &self.client_key) {
            (Some(_), None) => Err(Error::config(
                "tls",
                "a client certificate is given without its key; give the key too (with_client_key_file, --tls-key)",
            )),
            (None, Some(_)) => Err(Error::config(
                "tls",
                "a client key is given without its certificate; give the certificate too (with_client_cert_file, --tls-cert)",
            )),
            _ => Ok(()),
        }
    }

    /// Reads the files and checks that each holds what it should.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the setting (and the file, except the key's) that cannot
    /// be read or holds no PEM certificate or key.
    pub(crate) fn load(&self) -> Result<TlsMaterial, Error> {
        let ca = self
            .ca
            .as_ref()
            .map(|p| read(p, "TLS CA", true))
            .transpose()?;
        if let Some(ca) = &ca {
            check_certs(ca, "TLS CA", self.ca.as_ref())?;
        }
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(c), Some(k)) => {
                let cert = read(c, "TLS client certificate", true)?;
                check_certs(&cert, "TLS client certificate", Some(c))?;
                let key = read(k, "TLS client key", false)?;
                check_key(&key)?;
                Some((cert, key))
            }
            _ => None,
        };
        Ok(TlsMaterial { ca, identity })
    }
}

/// `what` and, when it may be shown, the file: "TLS CA file /etc/ca.pem".
fn setting(what: &str, pem: Option<&Pem>, show_path: bool) -> String {
    match pem {
        Some(Pem::File(path)) if show_path => format!("{what} file {}", path.display()),
        Some(Pem::File(_)) => format!("{what} file"),
        _ => what.to_string(),
    }
}

fn read(pem: &Pem, what: &str, show_path: bool) -> Result<Vec<u8>, Error> {
    match pem {
        Pem::Bytes(b) => Ok(b.clone()),
        Pem::File(path) => std::fs::read(path).map_err(|e| {
            Error::config(
                setting(what, Some(pem), show_path),
                // The kind, not the message: the OS message is harmless, but a key's error must
                // not differ from the others in what it reveals.
                format!(
                    "cannot read it ({:?}); check the path and its permissions",
                    e.kind()
                ),
            )
        }),
    }
}

fn check_certs(pem: &[u8], what: &str, source: Option<&Pem>) -> Result<(), Error> {
    if count_certs(pem) == 0 {
        return Err(Error::config(
            setting(what, source, true),
            "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(())
}

fn check_key(pem: &[u8]) -> Result<(), Error> {
    if !has_key(pem) {
        return Err(Error::config(
            "TLS client key",
            "it holds no PEM private key (-----BEGIN PRIVATE KEY-----, RSA or EC)",
        ));
    }
    Ok(())
}

#[cfg(feature = "tls")]
fn count_certs(pem: &[u8]) -> usize {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    CertificateDer::pem_slice_iter(pem)
        .take_while(Result::is_ok)
        .count()
}

#[cfg(not(feature = "tls"))]
fn count_certs(pem: &[u8]) -> usize {
    String::from_utf8_lossy(pem)
        .matches("-----BEGIN CERTIFICATE-----")
        .count()
}

#[cfg(feature = "tls")]
fn has_key(pem: &[u8]) -> bool {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    PrivateKeyDer::from_pem_slice(pem).is_ok()
}

#[cfg(not(feature = "tls"))]
fn has_key(pem: &[u8]) -> bool {
    String::from_utf8_lossy(pem).contains("PRIVATE KEY-----")
}

/// Installs ring as the process's rustls crypto provider unless one is installed already. The
/// Redis driver asks rustls for the process default; when the caller's build enables a second
/// provider (aws-lc-rs), rustls cannot choose one by itself and would panic.
#[cfg(feature = "tls")]
pub(crate) fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What a `rediss://` connection to a node that answered in plain text fails with: the words
/// `describe` recognizes and the vote shows.
pub(crate) const PLAINTEXT_NODE: &str = "the node answers in plain text, not TLS: use redis:// for it, or enable TLS on the node (tls-port)";

/// The client's own TLS library refused its settings (the driver's `InvalidClientConfig`), before
/// any byte reached the node: rustls's words and what they mean.
pub(crate) fn client_config_failure(text: &str) -> NodeError {
    let said = text
        .find("invalid peer certificate: ")
        .map_or(text, |at| &text[at..]);
    let meaning = if said.contains("UnsupportedCertVersion") {
        "this client's own certificate (--tls-cert, TlsConfig::with_client_cert_file) is an X.509 v1 certificate, which the client's TLS library does not accept: reissue it as v3 (with extensions, e.g. `openssl x509 -req ... -extfile` with basicConstraints=CA:FALSE)"
    } else {
        "the client's own TLS library refused its certificate or key (--tls-cert, --tls-key, TlsConfig::with_client_cert_file): check that they are a v3 certificate and its private key"
    };
    NodeError::new(FailureCause::Tls, format!("{said} ({meaning})"))
}

/// A TLS handshake failure in a driver's error text (rustls's words, as the Redis driver and
/// the etcd client pass them on), described with what it means; `None` for any other error.
pub(crate) fn handshake_failure(text: &str) -> Option<NodeError> {
    const MARKS: [&str; 2] = ["invalid peer certificate: ", "received fatal alert: "];
    // The etcd client's text quotes rustls's message inside a Debug string.
    let text = text.replace("\\\"", "\"");
    let (at, mark) = MARKS
        .iter()
        .filter_map(|m| text.find(m).map(|at| (at, *m)))
        .min()?;
    // rustls's words, up to where the quoting text resumes.
    let rest = &text[at..];
    let end = ["\", ", "\" }"]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
        .unwrap_or(rest.len());
    let said = &rest[..end];
    let meaning = if mark.starts_with("received") {
        "the node refused this client's certificate or its absence"
    } else if said.contains("UnknownIssuer") {
        "the node's certificate is not signed by a CA this client trusts"
    } else if said.contains("not valid for name") || said.contains("NotValidForName") {
        "the node's certificate does not name the host of its URL"
    } else {
        "the node's certificate was not accepted"
    };
    Some(NodeError::new(
        FailureCause::Tls,
        format!("{said} ({meaning})"),
    ))
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |p: &Option<Pem>| match p {
            None => "none".to_string(),
            Some(Pem::File(path)) => format!("file {}", path.display()),
            Some(Pem::Bytes(_)) => "PEM".to_string(),
        };
        let key = if self.client_key.is_some() {
            "<redacted>"
        } else {
            "none"
        };
        f.debug_struct("TlsConfig")
            .field("ca", &shown(&self.ca))
            .field("client_cert", &shown(&self.client_cert))
            .field("client_key", &key)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(urls: &[&str]) -> Vec<NodeAddr> {
        urls.iter().map(|u| NodeAddr::parse(u).unwrap()).collect()
    }

    #[test]
    fn settings_that_would_be_ignored_are_refused() {
        let tls = TlsConfig::new().with_ca_pem("x");
        let e = tls
            .check(&nodes(&["redis://h:1/0"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("redis://h:1/0") && e.contains("rediss://"),
            "{e}"
        );
        let e = tls.check(&nodes(&["etcd://h:1"])).unwrap_err().to_string();
        assert!(e.contains("etcds://"), "{e}");
        assert!(tls.check(&nodes(&["rediss://h:1/0"])).is_ok());
        let e = TlsConfig::new()
            .with_client_cert_pem("x")
            .check(&nodes(&["rediss://h:1/0"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("without its key"), "{e}");
        assert!(TlsConfig::new().check(&nodes(&["redis://h:1/0"])).is_ok());
    }

    #[test]
    fn the_key_path_is_never_shown() {
        let tls = TlsConfig::new()
            .with_client_cert_file("/nowhere/client.pem")
            .with_client_key_file("/secret-place/client.key");
        assert!(!format!("{tls:?}").contains("secret-place"));
        let e = tls.load().unwrap_err().to_string();
        // The certificate is read first and its path may be shown.
        assert!(e.contains("/nowhere/client.pem"), "{e}");
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let tls = tls.with_client_cert_pem(cert);
        let e = tls.load().unwrap_err().to_string();
        assert!(
            e.contains("TLS client key") && !e.contains("secret-place"),
            "{e}"
        );
    }

    #[test]
    fn handshake_failures_are_told_apart() {
        // The texts as the drivers pass them on (seen in tests/tls.rs against real servers).
        let redis = "invalid peer certificate: UnknownIssuer";
        let e = handshake_failure(redis).unwrap();
        assert_eq!(e.cause(), FailureCause::Tls);
        assert_eq!(
            e.to_string(),
            "TLS handshake failed: invalid peer certificate: UnknownIssuer (the node's certificate is not signed by a CA this client trusts)"
        );
        let etcd = r#"grpc request error: code: 'Unknown error', message: "transport error", source: tonic::transport::Error(Transport, hyper::Error(Io, Custom { kind: InvalidData, error: "received fatal alert: BadCertificate" }))"#;
        let e = handshake_failure(etcd).unwrap().to_string();
        assert!(
            e.starts_with(
                "TLS handshake failed: received fatal alert: BadCertificate (the node refused"
            ),
            "{e}"
        );
        let name = r#"message: "invalid peer certificate: certificate not valid for name \"127.0.0.1\"; certificate is only valid for DnsName(\"elsewhere.invalid\")", source"#;
        let e = handshake_failure(name).unwrap().to_string();
        assert_eq!(e, "TLS handshake failed: invalid peer certificate: certificate not valid for name \"127.0.0.1\"; certificate is only valid for DnsName(\"elsewhere.invalid\") (the node's certificate does not name the host of its URL)");
        assert!(handshake_failure("connection refused").is_none());
    }

    #[test]
    fn a_file_without_a_certificate_is_refused() {
        let e = TlsConfig::new()
            .with_ca_pem("not a certificate")
            .load()
            .unwrap_err()
            .to_string();
        assert!(e.contains("no PEM certificate"), "{e}");
    }
}
