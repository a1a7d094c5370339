//! `fencelock elect`: a leader killed with SIGKILL is succeeded after its TTL by a candidate
//! with a larger term, which its command sees as FENCELOCK_TOKEN, and `elect --observe --json`
//! prints both changes in order; on Redis nodes and on etcd.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use common::{wait_status, with_nodes};
use fencelock_testkit::{Etcd, RedisNodes};

fn next_line(lines: &mpsc::Receiver<String>) -> serde_json::Value {
    let line = lines
        .recv_timeout(Duration::from_secs(60))
        .expect("the observer prints a line per new leader");
    serde_json::from_str(&line).unwrap()
}

#[test]
fn a_killed_leader_is_succeeded_after_the_ttl_and_observers_see_both() {
    let nodes = RedisNodes::start(3).unwrap();
    killed_leader_is_succeeded(&nodes.urls());
}

#[test]
fn on_etcd_a_killed_leader_is_succeeded_after_the_ttl_and_observers_see_both() {
    let etcd = Etcd::start().unwrap();
    killed_leader_is_succeeded(&[etcd.endpoint().replacen("http://", "etcd://", 1)]);
}

fn killed_leader_is_succeeded(urls: &[String]) {
    let home = tempfile::tempdir().unwrap();
    let mut observer = with_nodes(home.path(), urls)
        .args(["--json", "elect", "--observe", "cli:e"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let out = observer.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let mut first = with_nodes(home.path(), urls)
        .args([
            "--ttl", "2s", "elect", "--value", "first", "cli:e", "--", "sleep", "60",
        ])
        .spawn()
        .unwrap();
    let seen = next_line(&lines);
    assert_eq!(seen["election"], "cli:e");
    assert_eq!(seen["value"], "first");
    let first_term = seen["term"].as_u64().unwrap();

    let second = with_nodes(home.path(), urls)
        .args([
            "--ttl",
            "2s",
            "elect",
            "--value",
            "second",
            "cli:e",
            "--",
            "sh",
            "-c",
            "echo $FENCELOCK_TOKEN",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // SIGKILL: no resignation, no release; the lock ends with its TTL.
    first.kill().unwrap();
    let _ = first.wait();
    let out = second.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let token: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(token > first_term, "{token} after {first_term}");
    let seen = next_line(&lines);
    assert_eq!(seen["value"], "second");
    assert_eq!(seen["term"].as_u64(), Some(token));

    let _ = observer.kill();
    let _ = wait_status(&mut observer, Duration::from_secs(10));
}
