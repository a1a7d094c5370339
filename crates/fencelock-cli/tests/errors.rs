//! Errors that name the fault (issue 29, item 6): a node's refusal is told as what it is, with
//! its cure, and the exit code says whether retrying can help. Each case on a real redis-server.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{with_nodes, HUNG};
use fencelock_testkit::{Pki, RedisNode, TlsRedisNode, TlsServer};

fn output(cmd: &mut Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fencelock");
    let started = Instant::now();
    let out = child.wait_with_output().expect("wait for fencelock");
    assert!(started.elapsed() < HUNG, "fencelock hung");
    out
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn an_http_url_is_refused_instead_of_taken_for_etcd() {
    let home = tempfile::tempdir().unwrap();
    let node = RedisNode::start().unwrap();
    let url = format!("http://127.0.0.1:{}", node.port());
    let out = output(with_nodes(home.path(), &[url]).args(["acquire", "job"]));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains(
            "for an etcd member write etcd://host:port, for a Redis node redis://host:port"
        ),
        "{all}"
    );
    assert!(!all.contains("grpc"), "{all}");
}

#[test]
fn a_database_the_node_lacks_is_a_configuration_error_at_once() {
    let home = tempfile::tempdir().unwrap();
    let node = RedisNode::start().unwrap();
    let url = format!("redis://127.0.0.1:{}/99", node.port());
    let started = Instant::now();
    let out = output(
        with_nodes(home.path(), std::slice::from_ref(&url)).args(["run", "job", "--", "true"]),
    );
    let all = text(&out);
    assert_eq!(out.status.code(), Some(78), "{all}");
    // `run` waits for a lock without end: a refusal no retry can fix must not wait at all.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}: {all}",
        started.elapsed()
    );
    assert!(
        all.contains("the URL's database does not exist on the node")
            && all.contains("redis://host:port/0"),
        "{all}"
    );
    let out = output(with_nodes(home.path(), &[url]).arg("doctor"));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(78), "{all}");
    assert!(
        all.contains("the node refuses this client: the URL's database does not exist"),
        "{all}"
    );
    assert!(!all.contains("start the node"), "{all}");
}

/// An X.509 v1 client certificate: `openssl x509 -req` without extensions.
fn v1_certificate(dir: &std::path::Path) -> (String, String) {
    let key = dir.join("v1.key").to_string_lossy().into_owned();
    let csr = dir.join("v1.csr").to_string_lossy().into_owned();
    let cert = dir.join("v1.pem").to_string_lossy().into_owned();
    for args in [
        vec![
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=v1", "-keyout", &key,
            "-out", &csr,
        ],
        vec![
            "x509", "-req", "-days", "2", "-in", &csr, "-signkey", &key, "-out", &cert,
        ],
    ] {
        let out = Command::new("openssl")
            .args(&args)
            .output()
            .expect("openssl");
        assert!(out.status.success(), "{out:?}");
    }
    (cert, key)
}

#[test]
fn a_client_certificate_refused_by_the_clients_own_tls_library_is_named_by_run_and_doctor() {
    let home = tempfile::tempdir().unwrap();
    let pki = Pki::generate().unwrap();
    let node = TlsRedisNode::start(&pki, TlsServer::new()).unwrap();
    let (cert, key) = v1_certificate(home.path());
    let ca = pki.ca().to_string_lossy().into_owned();
    let flags = ["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];
    for command in [&["run", "job", "--", "true"][..], &["doctor"]] {
        let out = output(
            with_nodes(home.path(), &[node.url()])
                .args(flags)
                .args(command),
        );
        let all = text(&out);
        assert_eq!(out.status.code(), Some(78), "{command:?}: {all}");
        assert!(
            all.contains("UnsupportedCertVersion") && all.contains("this client's own certificate"),
            "{command:?}: {all}"
        );
        assert!(
            !all.contains("start the node") && !all.contains("reachable, or"),
            "{all}"
        );
    }
}

#[test]
fn rediss_to_a_plaintext_node_says_so() {
    let home = tempfile::tempdir().unwrap();
    let node = RedisNode::start().unwrap();
    let url = format!("rediss://127.0.0.1:{}/0", node.port());
    let out = output(with_nodes(home.path(), &[url]).args(["acquire", "job"]));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(78), "{all}");
    assert!(
        all.contains("the node answers in plain text, not TLS: use redis://"),
        "{all}"
    );
}

#[test]
fn a_refusing_node_warns_with_its_cure_not_check_that_it_runs() {
    let home = tempfile::tempdir().unwrap();
    let full = RedisNode::start().unwrap();
    // A first client leaves the node's marker, so that later connections only read: the node
    // answers them, then refuses the lock's write, and the warning says so.
    let first = output(with_nodes(home.path(), &[full.url()]).args(["acquire", "first"]));
    assert!(first.status.success(), "{}", text(&first));
    full.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .unwrap();
    full.cli(&["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    let out = output(with_nodes(home.path(), &[full.url()]).args(["acquire", "job"]));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(69), "{all}");
    assert!(
        all.contains("refused the request (the node is out of memory")
            && all.contains("free memory on the node or raise its maxmemory"),
        "{all}"
    );
    assert!(!all.contains("check that the node runs"), "{all}");
}
