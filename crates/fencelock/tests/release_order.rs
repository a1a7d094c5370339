//! A release never overtakes its own acquisition's late request on a node (issue 13, finding 9).
//!
//! An acquisition returns as soon as a quorum granted; the requests to the other nodes finish in
//! the background. If the release reached such a node before the acquisition's `SET`, the
//! release would find nothing to delete, and the late `SET` would then leave our key there for a
//! whole TTL, after we said we released.

use std::time::{Duration, Instant};

use fencelock::protocol::{new_node_marker, NODE_MARKER_KEY};
use fencelock::{Client, Config};
use fencelock_testkit::{RedisNode, RedisNodes};

fn info_field(node: &RedisNode, field: &str) -> String {
    let info = node.cli(&["INFO", "server"]).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap()
        .trim()
        .to_string()
}

/// Node 2 is in restart quarantine, and a client judges it only once the other nodes reported
/// the TTLs in use; node 4 is paused, so that report takes half the node timeout. The
/// acquisition decides on nodes 0, 1 and 3 meanwhile, and the release goes out at once; node 2's
/// `SET` is sent only when the report is in. The release must wait for it on node 2.
#[tokio::test]
async fn a_release_does_not_overtake_a_set_held_back_on_a_node() {
    let ttl = Duration::from_secs(3);
    let nodes = RedisNodes::start(5).unwrap();
    for i in [0, 1, 3, 4] {
        let node = nodes.node(i);
        let clear = new_node_marker(&info_field(node, "run_id"));
        node.cli(&["SET", NODE_MARKER_KEY, &clear]).unwrap();
    }
    // Node 2: seen to lose its data now (the marker of this run with the node's time), its
    // quarantine not yet seen to end. It counts once the longest TTL in use (ours) has passed
    // since then, which it has by the time the client judges it (without the wait node 2 is
    // left out and its `SET` is never sent).
    let node2 = nodes.node(2);
    let time = node2.cli(&["TIME"]).unwrap();
    let mut t = time.lines();
    let node_ms = t.next().unwrap().parse::<u64>().unwrap() * 1000
        + t.next().unwrap().parse::<u64>().unwrap() / 1000;
    let marker = format!("{} {node_ms}", info_field(node2, "run_id"));
    node2.cli(&["SET", NODE_MARKER_KEY, &marker]).unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    nodes.node(4).pause().unwrap();

    let client = Client::new(
        Config::new(nodes.urls())
            .with_ttl(ttl)
            .with_node_timeout(Duration::from_millis(1_000))
            .with_connect_timeout(Duration::from_millis(1_000)),
    )
    .unwrap();
    let acquired = Instant::now();
    let lock = client.try_acquire("late").await.unwrap();
    assert_eq!(lock.votes().granted(), 3, "{}", lock.votes());
    // The outcome does not matter here (node 4 cannot answer); where the key is left does.
    let _ = lock.release().await;

    // Past the acquisition's node timeout, every request it sent has landed or was dropped;
    // well within the TTL, a key left behind is still there.
    let settled = acquired + Duration::from_millis(1_500);
    tokio::time::sleep_until(settled.into()).await;
    let left = node2.cli(&["PTTL", "late"]).unwrap();
    nodes.node(4).resume().unwrap();
    assert!(
        acquired.elapsed() < ttl,
        "the machine is too slow for this check: {:?}",
        acquired.elapsed()
    );
    assert_eq!(
        left, "-2",
        "node 2 holds the released lock's key (PTTL {left}): the release overtook the SET"
    );
}

/// Node 2 is paused before the client first uses it, so both the acquisition's `SET` and the
/// release wait for its connection to open; it resumes before the acquisition's deadline. The
/// acquisition decides on nodes 0 and 1 and the release goes at once; whichever request the
/// runtime wakes first once the connection opens, the `SET` must reach node 2 first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_does_not_overtake_a_set_waiting_for_the_connection() {
    let ttl = Duration::from_secs(5);
    let nodes = RedisNodes::start(3).unwrap();
    let config = Config::new(nodes.urls())
        .with_ttl(ttl)
        .with_node_timeout(Duration::from_millis(1_500))
        .with_connect_timeout(Duration::from_millis(1_500))
        .with_quarantine(false);
    for round in 0..5 {
        let resource = format!("paused-{round}");
        // A new client each round: its first request to node 2 opens the connection.
        let client = Client::new(config.clone()).unwrap();
        nodes.node(2).pause().unwrap();
        let acquired = Instant::now();
        let lock = client.try_acquire(&resource).await.unwrap();
        let release = tokio::spawn(lock.release());
        tokio::time::sleep(Duration::from_millis(300)).await;
        nodes.node(2).resume().unwrap();
        let _ = release.await.unwrap();
        tokio::time::sleep_until((acquired + Duration::from_millis(2_000)).into()).await;
        let left = nodes.node(2).cli(&["PTTL", &resource]).unwrap();
        assert!(
            acquired.elapsed() < ttl,
            "the machine is too slow for this check: {:?}",
            acquired.elapsed()
        );
        assert_eq!(
            left, "-2",
            "round {round}: node 2 holds the released lock's key (PTTL {left})"
        );
        // A fresh connection for the next round: the node drops this one.
        nodes
            .node(2)
            .cli(&["CLIENT", "KILL", "TYPE", "normal"])
            .unwrap();
    }
}

/// A release returns once a quorum deleted, as an acquisition returns once a quorum granted: a
/// paused node's answer is not waited for (its vote is still pending when `release` returns, not
/// timed out), and the request, already in that node's connection queue, lands when it resumes.
/// `Client::close` waits for it.
#[tokio::test]
async fn a_release_returns_at_a_quorum_and_reaches_the_slow_node_later() {
    let nodes = RedisNodes::start(5).unwrap();
    let client = Client::new(
        Config::new(nodes.urls())
            .with_ttl(Duration::from_secs(30))
            .with_node_timeout(Duration::from_secs(5))
            .with_quarantine(false),
    )
    .unwrap();
    let lock = client.try_acquire("slow-release").await.unwrap();
    // The acquisition returned at a quorum; node 4's SET lands in the background.
    let started = Instant::now();
    while nodes.node(4).cli(&["EXISTS", "slow-release"]).unwrap() != "1" {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "node 4 never got the key"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nodes.node(4).pause().unwrap();
    let votes = lock.release().await.unwrap();
    let slow = votes.iter().nth(4).unwrap();
    assert_eq!(
        slow.outcome,
        fencelock::VoteOutcome::Pending,
        "the release waited for the paused node: {votes}"
    );
    assert_eq!(nodes.node(0).cli(&["EXISTS", "slow-release"]).unwrap(), "0");
    nodes.node(4).resume().unwrap();
    client.close().await;
    assert_eq!(
        nodes.node(4).cli(&["EXISTS", "slow-release"]).unwrap(),
        "0",
        "the paused node kept the released key"
    );
}
