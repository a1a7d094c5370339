//! How a TLS test server presents itself: which certificate, and whether it demands one back.

/// TLS settings of [`TlsRedisNode`](crate::TlsRedisNode) and [`TlsEtcd`](crate::TlsEtcd).
///
/// By default the server presents the [`Pki`](crate::Pki)'s certificate for `127.0.0.1`
/// and `localhost` and requires a client certificate signed by the CA.
#[derive(Debug, Clone, Copy)]
pub struct TlsServer {
    pub(crate) require_client_cert: bool,
    pub(crate) misnamed: bool,
}

impl Default for TlsServer {
    fn default() -> Self {
        TlsServer {
            require_client_cert: true,
            misnamed: false,
        }
    }
}

impl TlsServer {
    /// Same as [`Default::default`].
    pub fn new() -> TlsServer {
        TlsServer::default()
    }

    /// Whether clients must present a certificate signed by the CA (default: yes).
    pub fn require_client_cert(mut self, require: bool) -> TlsServer {
        self.require_client_cert = require;
        self
    }

    /// Presents [`Pki::misnamed_server`](crate::Pki::misnamed_server) (a certificate for
    /// `elsewhere.invalid` only) instead of the one for `127.0.0.1`.
    pub fn misnamed(mut self, misnamed: bool) -> TlsServer {
        self.misnamed = misnamed;
        self
    }

    pub(crate) fn identity<'a>(&self, pki: &'a crate::Pki) -> &'a crate::CertFiles {
        if self.misnamed {
            pki.misnamed_server()
        } else {
            pki.server()
        }
    }
}
