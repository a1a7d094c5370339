//! `fencelock run --shared`: shared commands run together, and never beside `fencelock run` of
//! the same resource (exclusive), as flock(1)'s -s and -x; with --fencing a shared command
//! learns the last exclusive holder's token; a SIGKILLed shared holder stops counting after
//! its TTL.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{wait_status, with_nodes};
use fencelock_testkit::RedisNodes;

/// Each command adds its entry (`$1.$$`, `$1` being `s` for shared and `x` for exclusive) to
/// the directory `$0`, lists the directory after a while (every entry is a holder: added after
/// the lock was taken, removed before it is released) into `$0.log`, and removes its entry.
const LIST: &str = "touch \"$0/$1.$$\"; sleep 0.4; echo \"$1 $(ls \"$0\" | tr '\\n' ' ')\" >> \"$0.log\"; sleep 0.1; rm \"$0/$1.$$\"";

#[test]
fn shared_runs_share_and_exclude_exclusive_runs() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("inside");
    std::fs::create_dir(&dir).unwrap();
    let mut children = Vec::new();
    for k in 0..7 {
        let kind = if k % 3 == 1 { "x" } else { "s" };
        let mut cmd = with_nodes(home.path(), &nodes.urls());
        cmd.args(["--ttl", "10s", "run", "--wait", "60s"]);
        if kind == "s" {
            cmd.arg("--shared");
        }
        children.push(
            cmd.args(["cli:rw", "--", "sh", "-c", LIST])
                .arg(&dir)
                .arg(kind)
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        std::thread::sleep(Duration::from_millis(60));
    }
    for mut child in children {
        let status = wait_status(&mut child, Duration::from_secs(90));
        assert!(status.success(), "{status:?}");
    }
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    let mut most_shared = 0;
    for line in log.lines() {
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap();
        let inside: Vec<&str> = words.collect();
        let exclusive = inside.iter().filter(|e| e.starts_with("x.")).count();
        let shared = inside.iter().filter(|e| e.starts_with("s.")).count();
        match kind {
            "x" => assert!(
                exclusive == 1 && shared == 0,
                "an exclusive run with others: {line}"
            ),
            _ => assert_eq!(exclusive, 0, "a shared run beside an exclusive one: {line}"),
        }
        most_shared = most_shared.max(shared);
    }
    assert_eq!(log.lines().count(), 7, "{log}");
    assert!(most_shared >= 2, "shared runs never ran together:\n{log}");
}

#[test]
fn a_shared_fenced_run_learns_the_last_exclusive_token() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    let run = |shared: bool| {
        let mut cmd = with_nodes(home.path(), &nodes.urls());
        cmd.args(["run", "--fencing"]);
        if shared {
            cmd.arg("--shared");
        }
        let out = cmd
            .args([
                "cli:last",
                "--",
                "sh",
                "-c",
                "echo \"${FENCELOCK_TOKEN:-none} ${FENCELOCK_LAST_WRITER_TOKEN:-none}\"",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    assert_eq!(run(true), "none 0", "no exclusive run yet");
    let exclusive = run(false);
    let (token, last) = exclusive.split_once(' ').unwrap();
    assert_eq!(last, "none", "{exclusive}");
    assert_eq!(run(true), format!("none {token}"));
}

#[test]
fn a_killed_shared_holder_stops_counting_after_its_ttl() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut holder = with_nodes(home.path(), &nodes.urls())
        .args([
            "--ttl",
            "2s",
            "run",
            "--shared",
            "cli:killed",
            "--",
            "sleep",
            "60",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let held = with_nodes(home.path(), &nodes.urls())
        .args(["run", "--no-wait", "cli:killed", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(held.status.code(), Some(75), "{held:?}");
    // SIGKILL: no release; the entry lives until its TTL.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let started = Instant::now();
    let out = with_nodes(home.path(), &nodes.urls())
        .args(["run", "--wait", "30s", "cli:killed", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}
