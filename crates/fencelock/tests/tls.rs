//! TLS against real servers: redis-server with `--tls-port` and etcd with `--cert-file`, both
//! with certificates generated at test time (`fencelock_testkit::Pki`). A good certificate
//! connects and locks; a wrong CA, a missing or foreign client certificate and a server name
//! that does not match are each refused with an error that names the node and never shows the
//! key's path.

use std::time::Duration;

use fencelock::{Client, Config, Error, ErrorKind, TlsConfig};
use fencelock_testkit::{Pki, TlsRedisNode, TlsServer};

/// Loose enough for a loaded 2-core machine: these tests are not about slowness.
const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// The CA and the client certificate signed by it.
fn good(pki: &Pki) -> TlsConfig {
    TlsConfig::new()
        .with_ca_file(pki.ca())
        .with_client_cert_file(&pki.client().cert)
        .with_client_key_file(&pki.client().key)
}

fn client(url: String, tls: TlsConfig) -> Client {
    Client::new(
        Config::new([url])
            .with_quarantine(false)
            .with_node_timeout(NODE_TIMEOUT)
            .with_connect_timeout(Duration::from_secs(5))
            .with_tls(tls),
    )
    .unwrap()
}

async fn locks(client: &Client) {
    let lock = client.try_acquire("tls-job").await.unwrap();
    lock.release().await.unwrap();
}

/// The refusal of one attempt, checked for what every TLS refusal must say.
async fn refused(client: &Client, node: &str, pki: &Pki) -> String {
    let err: Error = client.try_acquire("tls-job").await.unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{text}");
    assert!(
        text.contains(node),
        "the error does not name {node}: {text}"
    );
    assert!(
        !text.contains(&*pki.client().key.to_string_lossy()),
        "the key's path leaked: {text}"
    );
    text
}

fn redis(pki: &Pki, server: TlsServer) -> TlsRedisNode {
    TlsRedisNode::start(pki, server).unwrap()
}

#[tokio::test]
async fn redis_a_good_certificate_connects_and_locks() {
    let pki = Pki::generate().unwrap();
    let node = redis(&pki, TlsServer::new());
    locks(&client(node.url(), good(&pki))).await;
    // The server name is checked against the URL's host: the certificate names `localhost` too.
    let by_name = format!("rediss://localhost:{}/0", node.tls_port());
    locks(&client(by_name, good(&pki))).await;
    // The same material as PEM text instead of paths.
    let pem = |p: &std::path::Path| std::fs::read(p).unwrap();
    let tls = TlsConfig::new()
        .with_ca_pem(pem(pki.ca()))
        .with_client_cert_pem(pem(&pki.client().cert))
        .with_client_key_pem(pem(&pki.client().key));
    locks(&client(node.url(), tls)).await;
}

#[tokio::test]
async fn redis_a_wrong_ca_is_refused() {
    let pki = Pki::generate().unwrap();
    let node = redis(&pki, TlsServer::new());
    let wrong = good(&pki).with_ca_file(pki.other_ca());
    let text = refused(&client(node.url(), wrong), &node.url(), &pki).await;
    assert!(
        text.contains("TLS") && text.contains("UnknownIssuer"),
        "{text}"
    );
    // No CA at all means the public roots, which do not know a private CA either.
    let public = TlsConfig::new()
        .with_client_cert_file(&pki.client().cert)
        .with_client_key_file(&pki.client().key);
    let text = refused(&client(node.url(), public), &node.url(), &pki).await;
    assert!(text.contains("UnknownIssuer"), "{text}");
}

#[tokio::test]
async fn redis_no_client_certificate_is_refused_where_one_is_required() {
    let pki = Pki::generate().unwrap();
    let node = redis(&pki, TlsServer::new());
    let anonymous = TlsConfig::new().with_ca_file(pki.ca());
    let text = refused(&client(node.url(), anonymous.clone()), &node.url(), &pki).await;
    assert!(
        text.contains("TLS handshake failed") && text.contains("client certificate"),
        "{text}"
    );
    // A certificate from another CA is refused too.
    let stranger = anonymous
        .clone()
        .with_client_cert_file(&pki.other_client().cert)
        .with_client_key_file(&pki.other_client().key);
    refused(&client(node.url(), stranger), &node.url(), &pki).await;
    // Where the server does not ask for one, the CA alone is enough.
    let open = redis(&pki, TlsServer::new().require_client_cert(false));
    locks(&client(open.url(), anonymous)).await;
}

#[tokio::test]
async fn redis_a_server_name_that_does_not_match_is_refused() {
    let pki = Pki::generate().unwrap();
    let node = redis(&pki, TlsServer::new().misnamed(true));
    let text = refused(&client(node.url(), good(&pki)), &node.url(), &pki).await;
    assert!(text.contains("not valid for name"), "{text}");
}

#[test]
fn tls_settings_for_plain_urls_or_unreadable_files_are_refused_up_front() {
    let pki = Pki::generate().unwrap();
    let e = Client::new(Config::new(["redis://127.0.0.1:1/0"]).with_tls(good(&pki)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("rediss://"), "{e}");
    let missing = pki.dir().join("missing.key");
    let e = Client::new(
        Config::new(["rediss://127.0.0.1:1/0"]).with_tls(good(&pki).with_client_key_file(&missing)),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("TLS client key") && e.contains("NotFound"),
        "{e}"
    );
    assert!(!e.contains("missing.key"), "{e}");
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use fencelock_testkit::TlsEtcd;

    fn etcd(pki: &Pki, server: TlsServer) -> TlsEtcd {
        TlsEtcd::start(pki, server).unwrap()
    }

    #[tokio::test]
    async fn etcd_a_good_certificate_connects_and_locks() {
        let pki = Pki::generate().unwrap();
        let member = etcd(&pki, TlsServer::new());
        locks(&client(member.url(), good(&pki))).await;
        let by_name = format!("etcds://localhost:{}", member.tls_port());
        locks(&client(by_name, good(&pki))).await;
    }

    #[tokio::test]
    async fn etcd_a_wrong_ca_is_refused() {
        let pki = Pki::generate().unwrap();
        let member = etcd(&pki, TlsServer::new());
        let wrong = good(&pki).with_ca_file(pki.other_ca());
        let text = refused(&client(member.url(), wrong), &member.url(), &pki).await;
        assert!(text.contains("UnknownIssuer"), "{text}");
    }

    #[tokio::test]
    async fn etcd_no_client_certificate_is_refused_where_one_is_required() {
        let pki = Pki::generate().unwrap();
        let member = etcd(&pki, TlsServer::new());
        let anonymous = TlsConfig::new().with_ca_file(pki.ca());
        let text = refused(&client(member.url(), anonymous), &member.url(), &pki).await;
        // Either the alert or the closed connection, each with the way out.
        assert!(text.contains("client certificate"), "{text}");
    }

    #[tokio::test]
    async fn etcd_a_server_name_that_does_not_match_is_refused() {
        let pki = Pki::generate().unwrap();
        let member = etcd(&pki, TlsServer::new().misnamed(true));
        let text = refused(&client(member.url(), good(&pki)), &member.url(), &pki).await;
        assert!(text.contains("not valid for name"), "{text}");
    }
}

/// An X.509 v1 certificate (no extensions) and its key, self-signed by `openssl x509 -req`
/// without `-extfile`: what an old script or CA still issues.
fn v1_certificate(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (key, csr, cert) = (dir.join("v1.key"), dir.join("v1.csr"), dir.join("v1.pem"));
    let run = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(out.status.success(), "{out:?}");
    };
    run(&[
        "req".as_ref(),
        "-new".as_ref(),
        "-newkey".as_ref(),
        "rsa:2048".as_ref(),
        "-nodes".as_ref(),
        "-subj".as_ref(),
        "/CN=v1-client".as_ref(),
        "-keyout".as_ref(),
        key.as_os_str(),
        "-out".as_ref(),
        csr.as_os_str(),
    ]);
    run(&[
        "x509".as_ref(),
        "-req".as_ref(),
        "-days".as_ref(),
        "2".as_ref(),
        "-in".as_ref(),
        csr.as_os_str(),
        "-signkey".as_ref(),
        key.as_os_str(),
        "-out".as_ref(),
        cert.as_os_str(),
    ]);
    (cert, key)
}

#[tokio::test]
async fn a_client_certificate_its_own_tls_library_refuses_is_named_as_the_clients() {
    let pki = Pki::generate().unwrap();
    let node = TlsRedisNode::start(&pki, TlsServer::new()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = v1_certificate(dir.path());
    let tls = TlsConfig::new()
        .with_ca_file(pki.ca())
        .with_client_cert_file(&cert)
        .with_client_key_file(&key);
    let err = client(node.url(), tls)
        .try_acquire("tls-job")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(err.needs_config_change() && !err.is_retryable(), "{text}");
    assert!(
        text.contains("UnsupportedCertVersion")
            && text.contains("this client's own certificate")
            && text.contains("X.509 v1"),
        "{text}"
    );
    assert!(!text.contains("reachable"), "{text}");
}

#[tokio::test]
async fn rediss_to_a_plaintext_node_says_so() {
    let plain = fencelock_testkit::RedisNode::start().unwrap();
    let pki = Pki::generate().unwrap();
    let url = format!("rediss://127.0.0.1:{}/0", plain.port());
    let client = client(url, TlsConfig::new().with_ca_file(pki.ca()));
    let votes = client.connect().await;
    let err = client.try_acquire("tls-job").await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("the node answers in plain text, not TLS: use redis://"),
        "{text} (connect: {votes})"
    );
    assert!(err.needs_config_change(), "{text}");
}
