//! A one-member etcd cluster that also serves clients over TLS.

use std::io;

use crate::{EtcdCluster, EtcdMember, Pki, TlsServer};

/// One etcd member serving clients over TLS (certificates from a [`Pki`]) on a port of its own.
///
/// The plain client port stays open on loopback for the kit's health probes; the client under
/// test uses [`url`](Self::url) (`etcds://`). Dropping it stops the member.
#[derive(Debug)]
pub struct TlsEtcd {
    cluster: EtcdCluster,
    tls_port: u16,
}

impl TlsEtcd {
    /// Starts etcd with `--cert-file`, `--key-file`, `--trusted-ca-file` and, when the
    /// settings ask for client certificates, `--client-cert-auth`.
    ///
    /// # Errors
    ///
    /// As [`EtcdCluster::start`].
    pub fn start(pki: &Pki, tls: TlsServer) -> io::Result<TlsEtcd> {
        let identity = tls.identity(pki);
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let flags = vec![
            "--cert-file".into(),
            path(&identity.cert),
            "--key-file".into(),
            path(&identity.key),
            "--trusted-ca-file".into(),
            path(pki.ca()),
            format!("--client-cert-auth={}", tls.require_client_cert),
        ];
        let (cluster, tls_port) = EtcdCluster::start_tls(flags)?;
        Ok(TlsEtcd { cluster, tls_port })
    }

    /// `etcds://127.0.0.1:<tls port>`.
    pub fn url(&self) -> String {
        format!("etcds://127.0.0.1:{}", self.tls_port)
    }

    /// The TLS port.
    pub fn tls_port(&self) -> u16 {
        self.tls_port
    }

    /// The member, for everything else.
    pub fn member(&self) -> &EtcdMember {
        self.cluster.member(0)
    }
}
