//! The cells of the guarantee table (README, docs/guarantees.md) that no other test showed: a
//! clock jump on a single node, eviction of a lock key, and a node persisting with
//! `appendfsync always` that restart quarantine leaves in the quorum. Each shows the outcome the
//! table states, on real nodes: the unsafe cells are shown unsafe, so that the table cannot drift
//! from what the code does.

use std::time::Duration;

use fencelock::{Client, Config, ErrorKind, VoteOutcome};
use fencelock_testkit::{Persistence, RedisNodes, RedisOptions};

fn client(nodes: &RedisNodes, ttl: Duration) -> Client {
    Client::new(
        Config::new(nodes.urls())
            .with_ttl(ttl)
            .with_node_timeout(Duration::from_millis(500))
            .with_quarantine(false),
    )
    .unwrap()
}

/// Efficiency lock, clock jump forward: the key expires early on the node, and a second client
/// gets the lock while the first is still within its validity. (Unsafe, as the table says.)
#[tokio::test]
async fn a_clock_jump_on_a_single_node_lets_a_second_client_in_while_the_first_is_valid() {
    let nodes = RedisNodes::start_with(1, RedisOptions::new().clock_shift(true)).unwrap();
    let ttl = Duration::from_secs(30);
    let (a, b) = (client(&nodes, ttl), client(&nodes, ttl));
    let held = a.try_acquire("jump").await.unwrap();
    let err = b.try_acquire("jump").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    // The node's clock jumps a minute ahead: the 30 s key is past its expiry there.
    nodes.node(0).set_clock_offset(60_000).unwrap();
    let second = b.try_acquire("jump").await.unwrap();
    assert!(
        held.is_valid(),
        "the first holder still believes it holds the lock"
    );
    drop(second);
    drop(held);
}

/// Any mode, eviction of a lock key (`maxmemory-policy` other than `noeviction`): the key is
/// gone and a second client gets the lock while the first is within its validity. (Unsafe;
/// `fencelock doctor` fails such a node.) With `noeviction` the same writes are refused and the
/// lock key stays.
#[tokio::test]
async fn an_evicted_lock_key_lets_a_second_client_in_and_noeviction_keeps_it() {
    for (policy, evicts) in [("volatile-lru", true), ("noeviction", false)] {
        let options = RedisOptions::new()
            .maxmemory(Some(4 << 20))
            .maxmemory_policy(Some(policy.to_owned()));
        let nodes = RedisNodes::start_with(1, options).unwrap();
        let ttl = Duration::from_secs(30);
        let (a, b) = (client(&nodes, ttl), client(&nodes, ttl));
        let held = a.try_acquire("evict").await.unwrap();
        let node = nodes.node(0);
        let filler = "x".repeat(16 << 10);
        let mut refused = 0;
        let mut filled = 0;
        for i in 0..2_000 {
            filled = i + 1;
            if node.cli(&["SET", &format!("fill:{i}"), &filler]).is_err() {
                refused += 1;
            }
            if node.cli(&["EXISTS", "evict"]).unwrap() == "0" {
                break;
            }
        }
        let gone = node.cli(&["EXISTS", "evict"]).unwrap() == "0";
        if gone {
            // The node is still at maxmemory with nothing left to evict (the fillers have no
            // TTL), so any write would be refused as out of memory; make room, as the
            // application whose data filled it would, to show what a second client gets.
            for i in 0..filled {
                node.cli(&["DEL", &format!("fill:{i}")]).unwrap();
            }
        }
        let after = b.try_acquire("evict").await;
        if evicts {
            assert!(gone, "never evicted ({refused} writes refused)");
            let second = after.expect("the evicted lock is free");
            assert!(held.is_valid());
            drop(second);
        } else {
            assert!(!gone && refused > 0, "the writes never hit maxmemory");
            let err = after.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
        }
        drop(held);
    }
}

/// Restart quarantine skips a node that persists with `appendfsync always` and kept its marker: its keys survive a
/// kill -9, so it counts at once, while a node without persistence that just started is kept
/// out for a TTL.
#[tokio::test]
async fn quarantine_counts_an_aof_always_node_at_once_and_its_keys_survive_a_kill() {
    let ttl = Duration::from_secs(30);
    let quarantined = |nodes: &RedisNodes| {
        Client::new(
            Config::new(nodes.urls())
                .with_ttl(ttl)
                .with_node_timeout(Duration::from_millis(500)),
        )
        .unwrap()
    };
    let excluded = |votes: &fencelock::Votes| {
        votes
            .iter()
            .filter(|v| matches!(v.outcome, VoteOutcome::Excluded(_)))
            .count()
    };

    // Without persistence, fresh nodes (uptime below the TTL) are excluded.
    let plain = RedisNodes::start(3).unwrap();
    let err = quarantined(&plain).try_acquire("q").await.unwrap_err();
    assert_eq!(excluded(err.votes().unwrap()), 3, "{err}");

    // With appendfsync always, nodes marked new at birth (as `fencelock up` does) count at once,
    // and after a kill -9 and restart too: the marker came back with the data. (Unmarked, a
    // node is suspect whatever its configuration: `tests/quarantine.rs`.)
    let nodes =
        RedisNodes::start_with(3, RedisOptions::new().persistence(Persistence::AofAlways)).unwrap();
    for node in nodes.iter() {
        let marker = fencelock::protocol::new_node_marker(&node.run_id().unwrap());
        node.cli(&["SET", fencelock::protocol::NODE_MARKER_KEY, &marker])
            .unwrap();
    }
    let (a, b) = (quarantined(&nodes), quarantined(&nodes));
    let held = a.try_acquire("q").await.unwrap();
    assert_eq!(excluded(held.votes()), 0);
    let token = held.token().to_string();
    // Let the third node's SET land (the round returns at quorum).
    for _ in 0..100 {
        if nodes.iter().all(|n| n.cli(&["GET", "q"]).unwrap() == token) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nodes.node(0).kill().unwrap();
    nodes.node(0).restart().unwrap();
    assert_eq!(nodes.node(0).cli(&["GET", "q"]).unwrap(), token);
    let err = b.try_acquire("q").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    assert_eq!(excluded(err.votes().unwrap()), 0, "{err}");
    held.release().await.unwrap();
}
