//! The command on a ZooKeeper ensemble (`zk://`) and a PostgreSQL database (`postgres://`) as
//! on Redis and etcd: `run`, `acquire` and `release`, `inspect`, `doctor` with each backend's
//! own checks, `elect` and the family on both, and the clear refusals (`extend` on ZooKeeper,
//! bad URLs). Real servers
//! from the test kit; the two backends' tests run side by side.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use fencelock_testkit::{Postgres, ZooKeeper};

mod common;
use common::{fencelock, output, wait_status};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `fencelock --nodes URL` with a TTL within ZooKeeper's session bounds.
fn on(home: &std::path::Path, url: &str) -> Command {
    let mut cmd = fencelock(home);
    cmd.arg("--nodes").arg(url).env("FENCELOCK_TTL", "10s");
    cmd
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

/// What every backend's lock commands share: `acquire` hands out an owner value that
/// `inspect` shows with the fencing token and `release` takes; a second `run --no-wait` finds
/// the lock held (75); `run --fencing` hands the command its token; `elect` runs the command
/// while leader with its term as the token; `run --permits` and `run --shared` run.
fn lock_commands(url: &str, backend: &str) -> String {
    let home = tempfile::tempdir().unwrap();
    let cmd = || on(home.path(), url);
    let out = output(cmd().args(["--label", "night job", "acquire", "report"]));
    let owner = ok(&out).trim().to_string();
    let stored = owner
        .split_once(".ttl")
        .map_or(owner.as_str(), |(o, _)| o)
        .to_string();
    let shown = ok(&output(cmd().args(["inspect", "report"])));
    assert!(shown.contains(&stored), "{backend}: {shown}");
    assert!(shown.contains("= fencing token"), "{backend}: {shown}");
    let json: serde_json::Value =
        serde_json::from_slice(&output(cmd().args(["--json", "inspect", "report"])).stdout)
            .unwrap();
    assert!(json["holder"].is_object(), "{backend}: {json}");
    // Held: a second command does not run.
    let out = output(cmd().args(["run", "--no-wait", "report", "--", "true"]));
    assert_eq!(code(&out), Some(75), "{backend}: {}", text(&out.stderr));
    let released = ok(&output(
        cmd().args(["release", "report", "--owner", &owner]),
    ));
    assert!(released.contains("released"), "{backend}: {released}");
    let shown = ok(&output(cmd().args(["inspect", "report"])));
    assert!(shown.contains("not held"), "{backend}: {shown}");
    // Free again: run takes it, with the token in the command's environment.
    let out = output(cmd().args([
        "run",
        "--no-wait",
        "--fencing",
        "report",
        "--",
        "sh",
        "-c",
        "echo token=$FENCELOCK_TOKEN",
    ]));
    let said = ok(&out);
    let token: u64 = said
        .trim()
        .strip_prefix("token=")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{backend}: {said}"));
    assert!(token > 0, "{backend}: {said}");
    // Elections: the command runs while leader, its term the token.
    let out = output(cmd().args([
        "elect",
        "--no-wait",
        "boss",
        "--",
        "sh",
        "-c",
        "echo term=$FENCELOCK_TOKEN",
    ]));
    let said = ok(&out);
    assert!(said.starts_with("term="), "{backend}: {said}");
    for how in [&["--permits", "2"][..], &["--shared"]] {
        let out = output(
            cmd()
                .arg("run")
                .args(how)
                .args(["--no-wait", "pool", "--", "true"]),
        );
        ok(&out);
    }
    owner
}

/// The refusal of a bad URL: exit 2, naming the node and how to write it.
fn refused(home: &std::path::Path, urls: &str, says: &[&str]) {
    for command in [&["doctor"][..], &["inspect", "r"], &["acquire", "r"]] {
        let out = output(on(home, urls).args(command));
        let err = text(&out.stderr);
        assert_eq!(code(&out), Some(2), "{urls} {command:?}: {err}");
        for word in says {
            assert!(err.contains(word), "{urls} {command:?}: {err}");
        }
        assert!(!err.contains("hunter2"), "{err}");
    }
}

#[test]
fn zookeeper_takes_inspects_releases_and_checks() {
    let zk = ZooKeeper::start().unwrap();
    let url = format!("{}/apps/cli", zk.url());
    let owner = lock_commands(&url, "zookeeper");
    let home = tempfile::tempdir().unwrap();
    let cmd = || on(home.path(), &url);
    // Released by `lock_commands`: `extend` is refused for what it is, not for a stale value.
    let out = output(cmd().args(["extend", "report", "--owner", &owner]));
    let err = text(&out.stderr);
    assert_eq!(code(&out), Some(2), "{err}");
    assert!(
        err.contains("session") && err.contains("fencelock run"),
        "{err}"
    );
    // A waiter shows behind the holder, with its label, until the holder's release lets it run.
    let holder = ok(&output(cmd().args(["--label", "first", "acquire", "x"])));
    let mut waiter = cmd()
        .args([
            "--label", "second", "run", "x", "--wait", "30s", "--", "true",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut shown = String::new();
    for _ in 0..100 {
        shown = ok(&output(cmd().args(["inspect", "x"])));
        if shown.contains("1 waiting") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        shown.contains("held by node ") && shown.contains("holder: \"first\""),
        "{shown}"
    );
    assert!(
        shown.contains("1 waiting, in order:") && shown.contains("\"second\""),
        "{shown}"
    );
    ok(&output(cmd().args([
        "release",
        "x",
        "--owner",
        holder.trim(),
    ])));
    assert!(wait_status(&mut waiter, Duration::from_secs(30)).success());
    // doctor: a standalone server passes with a warning (exit 0); a missing chroot that can be
    // made passes.
    let out = output(on(home.path(), &format!("{}/apps/new", zk.url())).arg("doctor"));
    let report = ok(&out);
    for line in [
        "pass  mode",
        "standalone",
        "warn  servers",
        "pass  session timeout",
        "/apps/new is missing; the client creates it",
    ] {
        assert!(report.contains(line), "{report}");
    }
    // A listed server that is down fails, and so does the quorum of two; a TTL above the
    // servers' maxSessionTimeout (60 s here) warns.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    let two = format!("{},127.0.0.1:{dead_port}/apps/cli", zk.url());
    let out = output(
        on(home.path(), &two)
            .env("FENCELOCK_TTL", "90s")
            .args(["--json", "doctor"]),
    );
    assert_eq!(code(&out), Some(1), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let status = |name: &str| {
        json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["check"] == name)
            .map(|c| c["status"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(status("reachable"), ["fail"], "{json}");
    assert_eq!(status("quorum"), ["fail"], "{json}");
    assert_eq!(status("session timeout"), ["warn"], "{json}");
    refused(
        home.path(),
        &format!("{},{}", zk.url(), zk.url()),
        &["zk://", "one"],
    );
    refused(
        home.path(),
        "zk://:hunter2@127.0.0.1:2181",
        &["zk://:***@", "authentication needs both"],
    );
}

#[test]
fn postgres_takes_extends_inspects_releases_and_checks() {
    let pg = Postgres::start().unwrap();
    let url = pg.url();
    lock_commands(&url, "postgres");
    let home = tempfile::tempdir().unwrap();
    let cmd = || on(home.path(), &url);
    // acquire, extend, release by owner value across processes, as on Redis.
    let owner = ok(&output(cmd().args(["acquire", "y"])));
    let extended = ok(&output(cmd().args([
        "extend",
        "y",
        "--owner",
        owner.trim(),
    ])));
    assert!(extended.contains("extended"), "{extended}");
    let shown = ok(&output(cmd().args(["inspect", "y"])));
    assert!(shown.contains("left by the database's clock"), "{shown}");
    ok(&output(cmd().args([
        "release",
        "y",
        "--owner",
        owner.trim(),
    ])));
    let out = output(cmd().args(["release", "y", "--owner", owner.trim()]));
    assert_eq!(code(&out), Some(76), "{}", text(&out.stderr));
    // doctor passes on the test kit's server, and fails a session with synchronous_commit off.
    let report = ok(&output(cmd().arg("doctor")));
    for line in [
        "pass  version",
        "PostgreSQL 15",
        "pass  lock table",
        "pass  durability",
        "pass  clock",
    ] {
        assert!(report.contains(line), "{report}");
    }
    let unsafe_url = format!("{url}?options=-c%20synchronous_commit%3Doff");
    let out = output(on(home.path(), &unsafe_url).arg("doctor"));
    let report = text(&out.stdout);
    assert_eq!(code(&out), Some(1), "{report}{}", text(&out.stderr));
    assert!(
        report.contains("fail  durability") && report.contains("synchronous_commit is off"),
        "{report}"
    );
    refused(home.path(), &format!("{url},{url}"), &["postgres://"]);
    refused(
        home.path(),
        "postgres://app:hunter2@127.0.0.1:notaport/db",
        &["postgres://app:***@", "port \"notaport\""],
    );
}
