//! `fencelock inspect` (issue 29, item 7): it says when it cannot know (no quorum of nodes
//! answered) and exits non-zero; it shows a semaphore's permits, a read-write lock's readers and
//! an election's leader, read where the library keeps them; its counter column says it is the
//! node's. On real redis-server nodes, with real holders (`run --permits`, `run --shared`,
//! `elect`).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use common::{outcome as text, with_nodes};
use fencelock_testkit::RedisNodes;

/// A holder whose command says "in" once it runs, then sleeps: returned once it holds.
fn holding(home: &std::path::Path, urls: &[String], args: &[&str]) -> Child {
    let mut child = with_nodes(home, urls)
        .args(args)
        .args(["--", "sh", "-c", "echo in; sleep 60"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "in", "{args:?} did not start its command");
    child
}

#[test]
fn no_node_reachable_is_an_error_not_not_held() {
    let home = tempfile::tempdir().unwrap();
    let dead: Vec<String> = (0..3)
        .map(|_| {
            let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
            format!("redis://127.0.0.1:{}/0", l.local_addr().unwrap().port())
        })
        .collect();
    let out = with_nodes(home.path(), &dead)
        .args(["inspect", "job"])
        .output()
        .unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(69), "{all}");
    assert!(
        all.contains("0 of 3 node(s) reachable, a quorum needs 2: whether it is held is unknown"),
        "{all}"
    );
    assert!(!all.contains("not held"), "{all}");
}

#[test]
fn permits_readers_and_the_leader_are_shown() {
    let home = tempfile::tempdir().unwrap();
    let nodes = RedisNodes::start(3).unwrap();
    let urls = nodes.urls();
    let mut children: Vec<Child> = Vec::new();
    for _ in 0..3 {
        children.push(holding(
            home.path(),
            &urls,
            &["run", "--permits", "3", "pool"],
        ));
    }
    for _ in 0..2 {
        children.push(holding(home.path(), &urls, &["run", "--shared", "doc"]));
    }
    children.push(holding(
        home.path(),
        &urls,
        &["elect", "--value", "boss-7", "chief"],
    ));
    let inspect = |resource: &str| {
        let out = with_nodes(home.path(), &urls)
            .args(["inspect", resource])
            .output()
            .unwrap();
        let all = text(&out);
        assert_eq!(out.status.code(), Some(0), "{all}");
        all
    };
    let pool = inspect("pool");
    assert!(
        pool.contains("semaphore \"pool\": 3 permit(s) held"),
        "{pool}"
    );
    for slot in 0..3 {
        assert!(pool.contains(&format!("permit {slot}: owner ")), "{pool}");
    }
    assert!(!pool.contains("not held on any"), "{pool}");
    assert!(pool.contains("NODE COUNTER"), "{pool}");
    assert!(
        pool.contains("one per node and shared by every resource"),
        "{pool}"
    );
    let doc = inspect("doc");
    assert!(
        doc.contains("held by 2 reader(s) (a read-write lock) on 3 of 3 node(s)")
            && doc.contains("read-write lock \"doc\": 2 reader(s), no writer"),
        "{doc}"
    );
    let chief = inspect("chief");
    assert!(
        chief.contains("election \"chief\": leader \"boss-7\", term "),
        "{chief}"
    );
    assert!(!chief.contains("it resigned or died"), "{chief}");
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The same on etcd (issue 29, item 7): a semaphore's permits with their holders, a read-write
/// lock's readers and the writer that waits behind them, an election's leader and its term,
/// read from the keys the library writes (`fencelock::protocol`'s etcd layout).
#[test]
fn on_etcd_permits_readers_the_writer_and_the_leader_are_shown() {
    let home = tempfile::tempdir().unwrap();
    let etcd = fencelock_testkit::Etcd::start().unwrap();
    let urls: Vec<String> = etcd
        .endpoints()
        .iter()
        .map(|e| e.replacen("http://", "etcd://", 1))
        .collect();
    let mut children: Vec<Child> = Vec::new();
    for i in 0..3 {
        let label = format!("worker {i}");
        children.push(holding(
            home.path(),
            &urls,
            &["--label", &label, "run", "--permits", "3", "pool"],
        ));
    }
    for _ in 0..2 {
        children.push(holding(home.path(), &urls, &["run", "--shared", "doc"]));
    }
    // A writer in line behind the readers: it never runs while they hold.
    children.push(
        with_nodes(home.path(), &urls)
            .args(["--label", "the writer", "run", "doc", "--", "sleep", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    children.push(holding(
        home.path(),
        &urls,
        &["elect", "--value", "boss-7", "chief"],
    ));
    let inspect = |resource: &str| {
        let out = with_nodes(home.path(), &urls)
            .args(["inspect", resource])
            .output()
            .unwrap();
        let all = text(&out);
        assert_eq!(out.status.code(), Some(0), "{all}");
        all
    };
    let pool = inspect("pool");
    assert!(
        pool.contains("semaphore \"pool\": 3 permit(s) held"),
        "{pool}"
    );
    for slot in 0..3 {
        assert!(pool.contains(&format!("permit {slot}: token ")), "{pool}");
    }
    for i in 0..3 {
        assert!(
            pool.contains(&format!("\"worker {i}\" (process ")),
            "{pool}"
        );
    }
    assert!(!pool.contains("nobody waits"), "{pool}");
    // The writer joins the line after the readers; give it the time to (wide margin).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let doc = loop {
        let doc = inspect("doc");
        if doc.contains("1 writer(s) waiting") || std::time::Instant::now() > until {
            break doc;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(
        doc.contains("held by 2 reader(s) (a read-write lock)")
            && doc.contains(
                "read-write lock \"doc\": 2 reader(s), no writer holds; 1 writer(s) waiting"
            ),
        "{doc}"
    );
    assert!(doc.contains("\"the writer\" (process "), "{doc}");
    let chief = inspect("chief");
    assert!(
        chief.contains("election \"chief\": leader \"boss-7\", term "),
        "{chief}"
    );
    let out = with_nodes(home.path(), &urls)
        .args(["--json", "inspect", "pool"])
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        value["permits"].as_array().map(Vec::len),
        Some(3),
        "{value}"
    );
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The same on ZooKeeper (issue 32): a semaphore's permit count, its permits with their
/// holders and the waiter not admitted yet, a read-write lock's readers, the writer that waits
/// behind them and the last writer's token, an election's leader and its term, read from the
/// nodes the library writes (`fencelock::protocol`'s ZooKeeper layout), in text and JSON.
#[test]
fn zookeeper_shows_permits_readers_the_writer_and_the_leader() {
    let home = tempfile::tempdir().unwrap();
    let zk = fencelock_testkit::ZooKeeper::start().unwrap();
    let urls = vec![format!("{}/apps/inspect", zk.url())];
    // A writer that came and went: its token is recorded for the readers.
    let out = with_nodes(home.path(), &urls)
        .args(["run", "doc", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let mut children: Vec<Child> = Vec::new();
    for i in 0..3 {
        let label = format!("worker {i}");
        children.push(holding(
            home.path(),
            &urls,
            &["--label", &label, "run", "--permits", "3", "pool"],
        ));
    }
    for _ in 0..2 {
        children.push(holding(home.path(), &urls, &["run", "--shared", "doc"]));
    }
    // A fourth worker and a writer in line: they never run while the others hold.
    for (label, args) in [
        ("worker 3", &["run", "--permits", "3", "pool"][..]),
        ("the writer", &["run", "doc"]),
    ] {
        children.push(
            with_nodes(home.path(), &urls)
                .args(["--label", label])
                .args(args)
                .args(["--", "sleep", "60"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    children.push(holding(
        home.path(),
        &urls,
        &["elect", "--value", "boss-7", "chief"],
    ));
    let inspect = |args: &[&str]| {
        let out = with_nodes(home.path(), &urls)
            .arg("inspect")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The waiters join their lines after the holders; give them the time to (wide margin).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (pool, doc) = loop {
        let (pool, doc) = (inspect(&["pool"]), inspect(&["doc"]));
        let joined = pool.contains("1 waiting, in order") && doc.contains("1 writer(s) waiting");
        if joined || std::time::Instant::now() > until {
            break (pool, doc);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(
        pool.contains("semaphore \"pool\": 3 permit(s) held of 3"),
        "{pool}"
    );
    assert!(
        pool.contains("lock \"pool\": a semaphore: 3 permit(s) held"),
        "{pool}"
    );
    for slot in 0..3 {
        assert!(pool.contains(&format!("permit {slot}: token ")), "{pool}");
    }
    for i in 0..3 {
        assert!(
            pool.contains(&format!("by \"worker {i}\" (process ")),
            "{pool}"
        );
    }
    assert!(
        pool.contains("1 waiting, in order") && pool.contains("\"worker 3\" (process "),
        "{pool}"
    );
    assert!(
        doc.contains("held by 2 reader(s) (a read-write lock)")
            && doc.contains(
                "read-write lock \"doc\": 2 reader(s), no writer holds; 1 writer(s) waiting"
            ),
        "{doc}"
    );
    assert!(
        doc.contains("writer waiting: node ") && doc.contains("\"the writer\" (process "),
        "{doc}"
    );
    assert!(
        doc.contains("read-write lock \"doc\": the last write lock's fencing token was "),
        "{doc}"
    );
    let chief = inspect(&["chief"]);
    assert!(
        chief.contains("election \"chief\": leader \"boss-7\", term "),
        "{chief}"
    );

    // The same in JSON, with the numbers: the permit tokens are the slots' czxids, the leader's
    // term its node's, the recorded token the earlier writer's.
    let json = |resource: &str| -> serde_json::Value {
        let out = with_nodes(home.path(), &urls)
            .args(["--json", "inspect", resource])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let pool = json("pool");
    assert_eq!(pool["permit_count"], 3, "{pool}");
    assert_eq!(pool["permits"].as_array().map(Vec::len), Some(3), "{pool}");
    assert_eq!(
        pool["permits_waiting"].as_array().map(Vec::len),
        Some(1),
        "{pool}"
    );
    assert!(pool["permits"][0]["czxid"].as_i64() > Some(0), "{pool}");
    let doc = json("doc");
    assert_eq!(doc["readers"].as_array().map(Vec::len), Some(2), "{doc}");
    assert_eq!(
        doc["writers_waiting"].as_array().map(Vec::len),
        Some(1),
        "{doc}"
    );
    let recorded: i64 = doc["writer_record"].as_str().unwrap().parse().unwrap();
    assert!(recorded > 0, "{doc}");
    let chief = json("chief");
    assert_eq!(chief["election"]["value"], "boss-7", "{chief}");
    // The election's lock, seen as a lock: its holder's node is the leader's.
    let lock = json("election:chief");
    assert_eq!(
        chief["election"]["term"], lock["holder"]["czxid"],
        "the term is the leader's node's czxid: {chief} {lock}"
    );
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}
