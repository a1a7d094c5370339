//! `fencelock run --permits N`: at most N commands at once across processes (on Redis nodes
//! and on etcd), and a clear "all N permits are held" when --no-wait finds them taken.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{wait_status, with_nodes};
use fencelock_testkit::{Etcd, RedisNodes};

/// Each command adds its entry to `dir`, counts the entries (every one is a holder: added after
/// the permit was taken, removed before it is released), and removes its entry.
const COUNT: &str =
    "touch \"$0/$$\"; sleep 0.3; ls \"$0\" | grep -v log | wc -l >> \"$0.log\"; rm \"$0/$$\"";

#[test]
fn at_most_n_commands_run_at_once() {
    let nodes = RedisNodes::start(3).unwrap();
    at_most_n_at_once(&nodes.urls());
}

#[test]
fn on_etcd_at_most_n_commands_run_at_once() {
    let etcd = Etcd::start().unwrap();
    at_most_n_at_once(&[etcd.endpoint().replacen("http://", "etcd://", 1)]);
}

fn at_most_n_at_once(urls: &[String]) {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("inside");
    std::fs::create_dir(&dir).unwrap();
    let children: Vec<_> = (0..8)
        .map(|_| {
            with_nodes(home.path(), urls)
                .args([
                    "--ttl",
                    "10s",
                    "run",
                    "--permits",
                    "2",
                    "--wait",
                    "50s",
                    "cli:sem",
                    "--",
                    "sh",
                    "-c",
                    COUNT,
                ])
                .arg(&dir)
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        let status = wait_status(&mut child, Duration::from_secs(90));
        assert!(status.success(), "{status:?}");
    }
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    let counts: Vec<usize> = log.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(counts.len(), 8, "{log}");
    let most = *counts.iter().max().unwrap();
    assert!(
        most <= 2,
        "{most} commands at once with 2 permits: {counts:?}"
    );
}

#[test]
fn no_wait_with_every_permit_held_says_so() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    let holders: Vec<_> = (0..2)
        .map(|_| {
            with_nodes(home.path(), &nodes.urls())
                .args(["run", "--permits", "2", "cli:full", "--", "sleep", "5"])
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let out = with_nodes(home.path(), &nodes.urls())
        .args([
            "run",
            "--permits",
            "2",
            "--no-wait",
            "cli:full",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert!(err.contains("all 2 permits of \"cli:full\""), "{err}");
    for mut h in holders {
        assert!(wait_status(&mut h, Duration::from_secs(60)).success());
    }
    let out = with_nodes(home.path(), &nodes.urls())
        .args(["run", "--permits", "0", "cli:full", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("permits"));
}
