//! Errors that name the fault (issue 29, item 6): a node's refusal is told as what it is, with
//! its cure, and the exit code says whether retrying can help. And the nodes that refuse writes
//! or may evict lock keys (item 5): `doctor` fails them, `acquire` and `run` warn once. Each case
//! on a real redis-server.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{outcome as text, output, with_nodes};
use fencelock_testkit::{Pki, RedisNode, TlsRedisNode, TlsServer};

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

#[test]
fn doctor_fails_a_node_that_refuses_writes_and_warns_near_maxmemory() {
    let home = tempfile::tempdir().unwrap();
    let nodes = [
        RedisNode::start().unwrap(),
        RedisNode::start().unwrap(),
        RedisNode::start().unwrap(),
    ];
    for node in &nodes {
        node.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
            .unwrap();
    }
    // Node 3 answers every read but refuses every write (maxmemory reached, noeviction).
    nodes[2].cli(&["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    // Node 2 has a little room left: above 90 % of its maxmemory (92 % before the doctor's
    // connection adds its buffers).
    let used: u64 = nodes[1]
        .cli(&["INFO", "memory"])
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let near = (used + used / 12).to_string();
    nodes[1]
        .cli(&["CONFIG", "SET", "maxmemory", &near])
        .unwrap();
    let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
    let out = output(with_nodes(home.path(), &urls).arg("doctor"));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    let line = |check: &str, node: &RedisNode| {
        all.lines()
            .find(|l| l.contains(check) && l.contains(&node.url()))
            .unwrap_or_else(|| panic!("no {check} line for {}: {all}", node.url()))
            .to_owned()
    };
    let refused = line("write", &nodes[2]);
    assert!(
        refused.starts_with("fail")
            && refused.contains("refuses writes")
            && refused.contains("out of memory"),
        "{all}"
    );
    assert!(line("write", &nodes[0]).starts_with("pass"), "{all}");
    assert!(line("memory", &nodes[1]).starts_with("warn"), "{all}");
    assert!(line("memory", &nodes[0]).starts_with("pass"), "{all}");
    // The doctor's key is gone from the nodes that took it.
    assert_eq!(
        nodes[0].cli(&["KEYS", "fencelock:doctor:*"]).unwrap(),
        "",
        "{all}"
    );
}

#[test]
fn acquire_and_run_warn_once_about_an_evicting_node() {
    let home = tempfile::tempdir().unwrap();
    let node = RedisNode::start().unwrap();
    node.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
        .unwrap();
    for command in [&["acquire", "job"][..], &["run", "other", "--", "true"]] {
        let out = output(with_nodes(home.path(), &[node.url()]).args(command));
        let all = text(&out);
        assert!(out.status.success(), "{command:?}: {all}");
        assert_eq!(
            all.matches(
                "has maxmemory-policy allkeys-lru: under memory pressure it may evict lock keys"
            )
            .count(),
            1,
            "{command:?}: {all}"
        );
    }
}
