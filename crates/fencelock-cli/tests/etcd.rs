//! The command on an etcd node set as on Redis: `inspect` shows the waiting line (holder with
//! its label, waiters, revisions, leases), `doctor` checks the members, `release --owner`
//! releases the lock another process took. Real etcd processes from the test kit.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use fencelock_testkit::{Etcd, EtcdCluster};

mod common;
use common::{fencelock, wait_status};

fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn etcd_urls(endpoints: &[String]) -> String {
    endpoints
        .iter()
        .map(|e| e.replacen("http://", "etcd://", 1))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn inspect_shows_the_line_and_release_by_token_frees_it() {
    let etcd = Etcd::start().unwrap();
    let home = tempfile::tempdir().unwrap();
    let nodes = etcd_urls(&etcd.endpoints());
    let cmd = || {
        let mut c = fencelock(home.path());
        c.arg("--nodes").arg(&nodes);
        c
    };
    let out = output(cmd().args(["--label", "etcd job", "acquire", "etcd-res"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let token = text(&out.stdout).trim().to_string();
    assert!(token.starts_with("fencelock/etcd-res/"), "{token}");
    // The lock key, as `inspect` shows it: the token less the TTL it carries for `extend`.
    let key = token
        .split_once(".ttl")
        .map_or(token.as_str(), |(key, _)| key)
        .to_owned();
    // A second process waits in line behind it.
    let mut waiter = cmd()
        .args([
            "--label", "second", "run", "etcd-res", "--wait", "30s", "--", "true",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut shown = String::new();
    for _ in 0..100 {
        let out = output(cmd().args(["inspect", "etcd-res"]));
        shown = text(&out.stdout);
        if shown.contains("1 waiting") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(shown.contains(&format!("held by key {key} ")), "{shown}");
    assert!(shown.contains("= fencing token"), "{shown}");
    assert!(shown.contains("holder: \"etcd job\" (process "), "{shown}");
    assert!(
        shown.contains("1 waiting, in order:") && shown.contains("\"second\""),
        "{shown}"
    );
    let out = output(cmd().args(["--json", "inspect", "etcd-res"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["holder"]["key"], key.as_str(), "{json}");
    assert!(
        json["holder"]["lease_ttl_s"].as_i64().unwrap() > 0,
        "{json}"
    );
    assert_eq!(json["waiters"].as_array().unwrap().len(), 1, "{json}");

    let out = output(cmd().args(["release", "etcd-res", "--owner", &token]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The waiter gets the lock, runs `true` and releases.
    let status = wait_status(&mut waiter, Duration::from_secs(20));
    assert!(status.success());
    let out = output(cmd().args(["inspect", "etcd-res"]));
    assert!(
        text(&out.stdout).contains("not held, nobody waits"),
        "{}",
        text(&out.stdout)
    );
    // The same token again: gone, nothing changed (exit 76, as on Redis).
    let out = output(cmd().args(["release", "etcd-res", "--owner", &token]));
    assert_eq!(out.status.code(), Some(76), "{}", text(&out.stderr));
}

#[test]
fn doctor_checks_the_members_of_a_cluster() {
    let cluster = EtcdCluster::start(3).unwrap();
    cluster.wait_for_leader(Duration::from_secs(20)).unwrap();
    let home = tempfile::tempdir().unwrap();
    let nodes = etcd_urls(&cluster.endpoints());
    let out = output(
        fencelock(home.path()).args(["--nodes", &nodes, "--ttl", "10s", "--json", "doctor"]),
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(json["ok"], true, "{json}");
    let checks = json["checks"].as_array().unwrap();
    let named = |name: &str| checks.iter().filter(|c| c["check"] == name).count();
    assert_eq!(named("latency"), 3, "{json}");
    for name in ["quorum", "leader", "lease ttl", "clock skew"] {
        assert!(named(name) >= 1, "{name}: {json}");
    }
    // One member down: still a quorum (warn), exit 0; the member is named.
    cluster.member(2).stop().unwrap();
    let out = output(fencelock(home.path()).args(["--nodes", &nodes, "doctor"]));
    let shown = text(&out.stdout);
    assert!(shown.contains("cannot reach the member"), "{shown}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "an unreachable member fails its check: {shown}"
    );
    assert!(shown.contains("a quorum needs 2"), "{shown}");
}
