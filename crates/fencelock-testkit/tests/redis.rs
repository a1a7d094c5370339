//! The kit's redis-server handling, against real processes.

use std::io;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use fencelock_testkit::{Persistence, RedisNode, RedisNodes, RedisOptions};

fn pid_exists(pid: u32) -> bool {
    // A zombie would still have /proc/<pid>; the kit reaps, so no entry at all.
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn start_answers_and_drop_leaves_no_process() {
    let node = RedisNode::start().unwrap();
    assert_eq!(node.url(), format!("redis://127.0.0.1:{}/0", node.port()));
    assert_eq!(node.cli(&["PING"]).unwrap(), "PONG");
    assert_eq!(node.cli(&["SET", "k", "v"]).unwrap(), "OK");
    assert_eq!(node.cli(&["GET", "k"]).unwrap(), "v");
    assert_eq!(node.cli(&["GET", "missing"]).unwrap(), "(nil)");
    assert_eq!(node.cli(&["INCR", "n"]).unwrap(), "1");
    assert_eq!(node.cli(&["RPUSH", "l", "a", "b"]).unwrap(), "2");
    assert_eq!(node.cli(&["LRANGE", "l", "0", "-1"]).unwrap(), "a\nb");
    let err = node.cli(&["INCR", "k"]).unwrap_err();
    assert!(err.to_string().contains("redis error"), "{err}");
    let save = node.cli(&["CONFIG", "GET", "save"]).unwrap();
    assert_eq!(save, "save\n");
    assert!(node.log().contains("Ready to accept connections"));
    let pid = node.pid().unwrap();
    let dir = node.dir().to_path_buf();
    assert!(node.is_running());
    drop(node);
    assert!(!pid_exists(pid), "redis-server {pid} survived drop");
    assert!(!dir.exists());
}

#[test]
fn kill_without_persistence_loses_data() {
    let node = RedisNode::start().unwrap();
    let port = node.port();
    node.cli(&["SET", "k", "v"]).unwrap();
    let pid = node.pid().unwrap();
    node.kill().unwrap();
    assert!(!node.is_running());
    assert_eq!(node.pid(), None);
    assert!(!pid_exists(pid));
    assert!(node.cli(&["PING"]).is_err());
    node.restart().unwrap();
    assert_eq!(node.port(), port);
    assert_eq!(node.cli(&["GET", "k"]).unwrap(), "(nil)");
}

#[test]
fn aof_always_keeps_data_across_kill_and_stop() {
    let node =
        RedisNode::start_with(RedisOptions::default().persistence(Persistence::AofAlways)).unwrap();
    assert_eq!(
        node.cli(&["CONFIG", "GET", "appendfsync"]).unwrap(),
        "appendfsync\nalways"
    );
    node.cli(&["SET", "k", "v"]).unwrap();
    node.kill().unwrap();
    node.restart().unwrap();
    assert_eq!(node.cli(&["GET", "k"]).unwrap(), "v");
    node.cli(&["SET", "k2", "v2"]).unwrap();
    node.stop().unwrap();
    assert!(!node.is_running());
    node.restart().unwrap();
    assert_eq!(node.cli(&["GET", "k2"]).unwrap(), "v2");
}

#[test]
fn restart_of_running_node_stops_it_first() {
    let node = RedisNode::start().unwrap();
    let old = node.pid().unwrap();
    node.restart().unwrap();
    let new = node.pid().unwrap();
    assert_ne!(old, new);
    assert!(!pid_exists(old));
    assert_eq!(node.cli(&["PING"]).unwrap(), "PONG");
}

#[test]
fn pause_makes_cli_time_out_and_resume_recovers() {
    let node = RedisNode::start().unwrap();
    node.pause().unwrap();
    assert!(node.is_running());
    let err = node.cli(&["PING"]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    node.resume().unwrap();
    assert_eq!(node.cli(&["PING"]).unwrap(), "PONG");
}

#[test]
fn drop_of_paused_node_kills_it() {
    let node = RedisNode::start().unwrap();
    let pid = node.pid().unwrap();
    node.pause().unwrap();
    drop(node);
    assert!(!pid_exists(pid));
}

#[test]
fn options_reach_the_server() {
    let node = RedisNode::start_with(
        RedisOptions::default()
            .maxmemory(Some(10 << 20))
            .maxmemory_policy(Some("allkeys-lru".into()))
            .extra_args(vec!["--hz".into(), "50".into()]),
    )
    .unwrap();
    assert_eq!(
        node.cli(&["CONFIG", "GET", "maxmemory-policy"]).unwrap(),
        "maxmemory-policy\nallkeys-lru"
    );
    assert_eq!(node.cli(&["CONFIG", "GET", "hz"]).unwrap(), "hz\n50");
}

#[test]
fn replica_follows_primary() {
    let primary = RedisNode::start().unwrap();
    let replica =
        RedisNode::start_with(RedisOptions::default().replica_of(primary.port())).unwrap();
    primary.cli(&["SET", "k", "v"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if replica.cli(&["GET", "k"]).unwrap() == "v" {
            break;
        }
        assert!(Instant::now() < deadline, "replica never synced");
        thread::sleep(Duration::from_millis(50));
    }
    assert!(replica
        .cli(&["INFO", "replication"])
        .unwrap()
        .contains("role:slave"));
}

#[test]
fn clock_shift_expires_keys_and_moves_time() {
    let node = RedisNode::start_with(RedisOptions::default().clock_shift(true)).unwrap();
    let time_before: i64 = node
        .cli(&["TIME"])
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(node.cli(&["SET", "k", "v", "PX", "60000"]).unwrap(), "OK");
    assert_eq!(node.cli(&["GET", "k"]).unwrap(), "v");
    node.set_clock_offset(120_000).unwrap();
    assert_eq!(node.cli(&["GET", "k"]).unwrap(), "(nil)");
    let time_after: i64 = node
        .cli(&["TIME"])
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        time_after - time_before >= 119,
        "{time_before} -> {time_after}"
    );
    // Back to real time: TIME follows.
    node.set_clock_offset(0).unwrap();
    let time_back: i64 = node
        .cli(&["TIME"])
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(time_back < time_after - 60);
    // A node without the shim refuses.
    let plain = RedisNode::start().unwrap();
    assert_eq!(
        plain.set_clock_offset(1).unwrap_err().kind(),
        io::ErrorKind::Unsupported
    );
}

#[test]
fn five_nodes_start_and_drop_cleanly() {
    let started = Instant::now();
    let nodes = RedisNodes::start(5).unwrap();
    eprintln!("5 redis nodes started in {:?}", started.elapsed());
    assert_eq!(nodes.len(), 5);
    let urls = nodes.urls();
    assert_eq!(urls.len(), 5);
    let mut ports = nodes.ports();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 5);
    for node in &nodes {
        assert_eq!(node.cli(&["PING"]).unwrap(), "PONG");
    }
    let pids: Vec<u32> = nodes.iter().map(|n| n.pid().unwrap()).collect();
    nodes.node(2).kill().unwrap();
    assert!(!nodes[2].is_running());
    drop(nodes);
    for pid in pids {
        assert!(!pid_exists(pid));
    }
}
