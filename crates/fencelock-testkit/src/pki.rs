//! Certificates for TLS tests, generated at test time (pure Rust: no `openssl` binary needed).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;

/// A certificate and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

/// A throw-away public-key infrastructure in a temporary directory:
///
/// - a CA, and a second, unrelated CA (for "wrong CA" cases);
/// - a server certificate signed by the CA for `127.0.0.1` and `localhost`;
/// - a server certificate signed by the CA for `elsewhere.invalid` only (for server-name checks);
/// - a client certificate signed by the CA (for servers that require one).
///
/// Dropping it removes the files.
#[derive(Debug)]
pub struct Pki {
    dir: TempDir,
    ca: PathBuf,
    other_ca: PathBuf,
    server: CertFiles,
    misnamed_server: CertFiles,
    client: CertFiles,
    other_client: CertFiles,
}

impl Pki {
    /// Generates every certificate and writes it to a fresh temporary directory.
    ///
    /// # Errors
    ///
    /// Fails when the directory cannot be written or a certificate cannot be generated.
    pub fn generate() -> io::Result<Pki> {
        let dir = tempfile::Builder::new()
            .prefix("fencelock-pki-")
            .tempdir()?;
        let (ca_pem, ca) = authority("fencelock test CA")?;
        let (other_ca_pem, other) = authority("an unrelated CA")?;
        let write = |name: &str, text: &str| -> io::Result<PathBuf> {
            let path = dir.path().join(name);
            fs::write(&path, text)?;
            Ok(path)
        };
        let ca_path = write("ca.pem", &ca_pem)?;
        let other_ca = write("other-ca.pem", &other_ca_pem)?;
        let files = |name: &str, (cert, key): (String, String)| -> io::Result<CertFiles> {
            Ok(CertFiles {
                cert: write(&format!("{name}.pem"), &cert)?,
                key: write(&format!("{name}.key"), &key)?,
            })
        };
        let server = files(
            "server",
            leaf(
                &ca,
                "fencelock test server",
                &["127.0.0.1", "localhost"],
                true,
            )?,
        )?;
        let misnamed_server = files(
            "misnamed-server",
            leaf(&ca, "elsewhere", &["elsewhere.invalid"], true)?,
        )?;
        let client = files("client", leaf(&ca, "fencelock-client", &[], false)?)?;
        let other_client = files("other-client", leaf(&other, "a stranger", &[], false)?)?;
        Ok(Pki {
            dir,
            ca: ca_path,
            other_ca,
            server,
            misnamed_server,
            client,
            other_client,
        })
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate (PEM) that signed the server and client certificates.
    pub fn ca(&self) -> &Path {
        &self.ca
    }

    /// A CA that signed nothing the servers present.
    pub fn other_ca(&self) -> &Path {
        &self.other_ca
    }

    /// The server certificate for `127.0.0.1` and `localhost`.
    pub fn server(&self) -> &CertFiles {
        &self.server
    }

    /// A server certificate, signed by the CA, for `elsewhere.invalid` only.
    pub fn misnamed_server(&self) -> &CertFiles {
        &self.misnamed_server
    }

    /// A client certificate signed by the CA.
    pub fn client(&self) -> &CertFiles {
        &self.client
    }

    /// A client certificate signed by [`other_ca`](Self::other_ca), which servers refuse.
    pub fn other_client(&self) -> &CertFiles {
        &self.other_client
    }
}

fn failed(what: &str, e: rcgen::Error) -> io::Error {
    io::Error::other(format!("cannot generate the {what}: {e}"))
}

/// A self-signed CA: its PEM and the issuer that signs leaves with it.
fn authority(name: &str) -> io::Result<(String, Issuer<'static, KeyPair>)> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| failed(name, e))?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().map_err(|e| failed(name, e))?;
    let cert = params.self_signed(&key).map_err(|e| failed(name, e))?;
    Ok((cert.pem(), Issuer::new(params, key)))
}

/// A leaf certificate signed by `issuer`, for a server (names in the SAN) or a client.
fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    name: &str,
    names: &[&str],
    server: bool,
) -> io::Result<(String, String)> {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).map_err(|e| failed(name, e))?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    // etcd checks the usage of the certificates it is given; Redis does not. Both purposes, so
    // one certificate serves etcd both as a server and as a client of itself.
    params.extended_key_usages = if server {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    let key = KeyPair::generate().map_err(|e| failed(name, e))?;
    let cert = params
        .signed_by(&key, issuer)
        .map_err(|e| failed(name, e))?;
    Ok((cert.pem(), key.serialize_pem()))
}
