//! The command over TLS: `--tls-ca`, `--tls-cert`, `--tls-key` (and the config file's `tls_*`
//! keys) against a real redis-server with `--tls-port` and a real etcd with certificates, both
//! generated at test time.

mod common;

use std::process::Output;

use common::{fencelock, with_nodes};
use fencelock_testkit::{Pki, TlsEtcd, TlsRedisNode, TlsServer};

fn output(cmd: &mut std::process::Command) -> Output {
    cmd.output().expect("cannot run fencelock")
}

fn tls_flags(pki: &Pki) -> Vec<String> {
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    vec![
        "--tls-ca".into(),
        path(pki.ca()),
        "--tls-cert".into(),
        path(&pki.client().cert),
        "--tls-key".into(),
        path(&pki.client().key),
    ]
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
fn run_and_inspect_over_rediss_with_the_flags() {
    let home = tempfile::tempdir().unwrap();
    let pki = Pki::generate().unwrap();
    let node = TlsRedisNode::start(&pki, TlsServer::new()).unwrap();
    let urls = [node.url()];
    let out = output(
        with_nodes(home.path(), &urls)
            .args(tls_flags(&pki))
            .args(["run", "tls-job", "--", "true"]),
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = output(
        with_nodes(home.path(), &urls)
            .args(tls_flags(&pki))
            .args(["--json", "inspect", "tls-job"]),
    );
    assert!(out.status.success(), "{}", text(&out));
    // The node answered over TLS.
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains("\"reachable\":true"), "{}", text(&out));
}

#[test]
fn a_missing_ca_is_refused_naming_the_node_and_never_the_key() {
    let home = tempfile::tempdir().unwrap();
    let pki = Pki::generate().unwrap();
    let node = TlsRedisNode::start(&pki, TlsServer::new()).unwrap();
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let out = output(
        with_nodes(home.path(), &[node.url()])
            .args(["--tls-cert", &path(&pki.client().cert)])
            .args(["--tls-key", &path(&pki.client().key)])
            .args(["acquire", "tls-job"]),
    );
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains(&node.url()) && all.contains("TLS handshake failed"),
        "{all}"
    );
    assert!(!all.contains(&path(&pki.client().key)), "{all}");
}

#[test]
fn the_config_file_takes_the_tls_paths_and_connect_timeout() {
    let home = tempfile::tempdir().unwrap();
    let pki = Pki::generate().unwrap();
    let node = TlsRedisNode::start(&pki, TlsServer::new()).unwrap();
    let file = home.path().join("fencelock.toml");
    std::fs::write(
        &file,
        format!(
            "nodes = [{:?}]\nnode_timeout = \"250ms\"\nconnect_timeout = \"5s\"\nquarantine = false\ntls_ca = {:?}\ntls_cert = {:?}\ntls_key = {:?}\n",
            node.url(),
            pki.ca(),
            pki.client().cert,
            pki.client().key
        ),
    )
    .unwrap();
    let out = output(
        fencelock(home.path())
            .arg("--config")
            .arg(&file)
            .args(["run", "tls-job", "--", "true"]),
    );
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn run_over_etcds_with_the_flags() {
    let home = tempfile::tempdir().unwrap();
    let pki = Pki::generate().unwrap();
    let member = TlsEtcd::start(&pki, TlsServer::new()).unwrap();
    let out = output(
        with_nodes(home.path(), &[member.url()])
            .args(tls_flags(&pki))
            .args(["run", "tls-job", "--", "true"]),
    );
    assert!(out.status.success(), "{}", text(&out));
    // Without the client certificate the member refuses, and the error says so.
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let out = output(
        with_nodes(home.path(), &[member.url()])
            .args(["--tls-ca", &path(pki.ca())])
            .args(["acquire", "tls-job"]),
    );
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains(&member.url()) && all.contains("client certificate"),
        "{all}"
    );
}
