//! The node set check (issue 27, item 5): clients given overlapping node lists (nodes 1-5 and
//! nodes 4-8, as a rolling node replacement leaves them) must not both hold one lock; clients
//! of one set, however they spell its nodes, and a node restarted empty, go on as before.
//! Real redis-server processes.

use std::time::Duration;

use fencelock::{Client, Config};
use fencelock_testkit::RedisNodes;

fn config(urls: &[String]) -> Config {
    Config::new(urls)
        .with_quarantine(false)
        .with_node_timeout(Duration::from_millis(250))
}

/// The red-first test: on the unfixed code both clients held "r" (A on nodes 1-5, B on 6-8
/// with 4 and 5 refusing it).
#[tokio::test]
async fn clients_given_overlapping_node_lists_do_not_both_hold_a_lock() {
    let nodes = RedisNodes::start(8).unwrap();
    let urls = nodes.urls();
    let a = Client::new(config(&urls[0..5])).unwrap();
    let b = Client::new(config(&urls[3..8])).unwrap();
    let held_a = a.try_acquire("r").await;
    let held_b = b.try_acquire("r").await;
    assert!(
        !(held_a.is_ok() && held_b.is_ok()),
        "two holders of \"r\": a client of nodes 1-5 and a client of nodes 4-8"
    );
    assert!(held_a.is_ok(), "the first set's client: {:?}", held_a.err());
    let err = held_b.unwrap_err().to_string();
    assert!(err.contains("another node set"), "{err}");
    // Each set as the error lists it: host:port, sorted.
    let set = |range: std::ops::Range<usize>| {
        let mut addrs: Vec<String> = range
            .map(|i| format!("127.0.0.1:{}", nodes.node(i).port()))
            .collect();
        addrs.sort();
        addrs
    };
    let (theirs, ours) = (set(0..5), set(3..8));
    assert!(err.contains(&format!("[{}]", theirs.join(", "))), "{err}");
    assert!(err.contains(&format!("[{}]", ours.join(", "))), "{err}");
    // Still refused later: the record stays on the shared nodes.
    let again = Client::new(config(&urls[3..8])).unwrap();
    assert!(again.try_acquire("s").await.is_err());
    // The first set is unaffected.
    let other = Client::new(config(&urls[0..5])).unwrap();
    assert!(other.try_acquire("s").await.is_ok());
}

/// The same set spelled two ways (a host name and an address), and a node that lost its data:
/// one set, no error.
#[tokio::test]
async fn one_set_spelled_two_ways_and_a_node_restarted_empty_are_one_set() {
    let nodes = RedisNodes::start(3).unwrap();
    let urls = nodes.urls();
    let a = Client::new(config(&urls)).unwrap();
    a.acquire("r").await.unwrap().release().await.unwrap();
    let spelled: Vec<String> = (0..3)
        .map(|i| format!("redis://localhost:{}", nodes.node(i).port()))
        .collect();
    let b = Client::new(config(&spelled)).unwrap();
    b.acquire("r").await.unwrap().release().await.unwrap();
    nodes.node(2).kill().unwrap();
    nodes.node(2).restart().unwrap();
    assert_eq!(nodes.node(2).cli(&["DBSIZE"]).unwrap(), "0");
    // `connect` waits for every node: each one counts, none is refused for its record.
    let c = Client::new(config(&urls)).unwrap();
    let votes = c.connect().await;
    assert_eq!(votes.granted(), 3, "{votes:?}");
    c.acquire("r").await.unwrap().release().await.unwrap();
    let d = Client::new(config(&spelled)).unwrap();
    let votes = d.connect().await;
    assert_eq!(votes.granted(), 3, "{votes:?}");
}

/// The first connections wait for each other (up to half the node timeout): a client whose own
/// nodes answer at once does not count them before the shared nodes, slower, show the other
/// set's record.
#[tokio::test]
async fn a_client_counts_no_node_before_the_slow_shared_ones_answer() {
    let nodes = RedisNodes::start(8).unwrap();
    let urls = nodes.urls();
    let a = Client::new(config(&urls[0..5])).unwrap();
    let _held = a.try_acquire("r").await.unwrap();
    // Nodes 4 and 5 (shared) answer B's connections 300 ms after B's own nodes did, well
    // within B's wait (half its node timeout, at most its connect timeout: 2 s).
    nodes.node(3).pause().unwrap();
    nodes.node(4).pause().unwrap();
    let b = Client::new(
        config(&urls[3..8])
            .with_ttl(Duration::from_secs(30))
            .with_node_timeout(Duration::from_secs(4))
            .with_connect_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let resume = std::thread::spawn({
        let pids = [nodes.node(3).pid(), nodes.node(4).pid()];
        move || {
            std::thread::sleep(Duration::from_millis(300));
            for pid in pids.into_iter().flatten() {
                // SAFETY: resumes a redis-server this test started and paused.
                unsafe { libc::kill(i32::try_from(pid).unwrap(), libc::SIGCONT) };
            }
        }
    });
    let first = b.try_acquire("r").await;
    resume.join().unwrap();
    nodes.node(3).resume().unwrap();
    nodes.node(4).resume().unwrap();
    let err = first.expect_err(
        "B counted its own nodes before the shared ones answered: two holders of \"r\"",
    );
    assert!(err.to_string().contains("another node set"), "{err}");
    assert!(b.try_acquire("r").await.is_err());
}
