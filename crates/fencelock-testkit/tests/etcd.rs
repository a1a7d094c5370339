//! The kit's etcd handling, against real processes.

use std::path::Path;
use std::time::{Duration, Instant};

use fencelock_testkit::{Etcd, EtcdCluster};

fn pid_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn put(endpoint_port: u16, key: &str, value: &str) {
    etcdctl(endpoint_port, &["put", key, value]);
}

fn etcdctl(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints=http://127.0.0.1:{port}"))
        .arg("--command-timeout=10s")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn single_member_starts_keeps_data_and_drops_cleanly() {
    let started = Instant::now();
    let etcd = Etcd::start().unwrap();
    eprintln!("etcd started in {:?}", started.elapsed());
    assert_eq!(etcd.endpoint(), format!("http://127.0.0.1:{}", etcd.port()));
    assert_eq!(etcd.endpoints(), vec![etcd.endpoint()]);
    assert_eq!(etcd.cluster().leader_index().unwrap(), Some(0));
    put(etcd.port(), "k", "v");
    etcd.kill().unwrap();
    assert!(!etcd.is_running());
    etcd.restart().unwrap();
    assert_eq!(
        etcdctl(etcd.port(), &["get", "k", "--print-value-only"]),
        "v"
    );
    let pid = etcd.pid().unwrap();
    drop(etcd);
    assert!(!pid_exists(pid));
}

#[test]
fn three_member_cluster_elects_and_replaces_a_leader() {
    let started = Instant::now();
    let cluster = EtcdCluster::start(3).unwrap();
    eprintln!("3-member etcd cluster started in {:?}", started.elapsed());
    assert_eq!(cluster.len(), 3);
    assert_eq!(cluster.endpoints().len(), 3);
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).unwrap();
    put(cluster.member((leader + 1) % 3).client_port(), "k", "v");

    // A paused leader is replaced by another member.
    cluster.member(leader).pause().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let new_leader = loop {
        match cluster.leader_index().unwrap() {
            Some(i) if i != leader => break i,
            _ => assert!(Instant::now() < deadline, "no new leader"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    cluster.member(leader).resume().unwrap();

    // A killed member comes back with its data.
    cluster.member(new_leader).kill().unwrap();
    cluster.member(new_leader).restart().unwrap();
    assert_eq!(
        etcdctl(
            cluster.member(new_leader).client_port(),
            &["get", "k", "--print-value-only"]
        ),
        "v"
    );

    // Losing the quorum: no leader; restart_all brings it back.
    let survivor = (new_leader + 1) % 3;
    for i in 0..3 {
        if i != survivor {
            cluster.member(i).kill().unwrap();
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(cluster.leader_index().unwrap(), None);
    cluster.restart_all().unwrap();
    cluster.wait_for_leader(Duration::from_secs(30)).unwrap();

    let pids: Vec<u32> = cluster.iter().map(|m| m.pid().unwrap()).collect();
    drop(cluster);
    for pid in pids {
        assert!(!pid_exists(pid));
    }
}
