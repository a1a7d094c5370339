//! The cells of the guarantee table (README, docs/guarantees.md) that no other test showed: a
//! clock jump on a single node, eviction of a lock key, and a node persisting with
//! `appendfsync always` that restart quarantine leaves in the quorum. Each shows the outcome the
//! table states, on real nodes: the unsafe cells are shown unsafe, so that the table cannot drift
//! from what the code does. Issue 36 adds the rest of the table's faults in the modes no other
//! test ran them in (fencing on, one node, etcd), and the check that every cell's keys name
//! tests that make the cell's fault in the cell's mode (`guarantees/citations.rs`).

#[path = "guarantees/citations.rs"]
mod citations;

use std::time::Duration;

use fencelock::{Client, Config, ErrorKind, VoteOutcome};
use fencelock_testkit::{DelayProxy, Persistence, RedisNodes, RedisOptions};

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
    let token = held.owner().to_string();
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

/// Cells that fail the citation check for a reason tracked elsewhere (see `citations::Pending`).
const PENDING: &[citations::Pending] = &[
    (
        "guarantees",
        "Redlock + fencing",
        "restart-empty",
        "M-guard",
        "issue 27: every model case of the guard runs with quarantine on",
    ),
    (
        "guarantees",
        "Redlock + fencing",
        "restart-empty",
        "M-total",
        "issue 27: every model case of the guard runs with quarantine on",
    ),
];

fn read_repo_file(path: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(citations::repo_root().join(path)).ok()
}

/// Every key a cell of the guarantee tables cites names tests that make the cell's fault in the
/// cell's mode (fencing on for the fenced rows), read from the tests' source; the count of
/// backed cells is the one docs/guarantees.md states.
#[test]
fn every_cell_cites_tests_that_make_its_fault_in_its_mode() {
    let doc = read_repo_file("docs/guarantees.md".as_ref()).unwrap();
    let readme = read_repo_file("README.md".as_ref());
    let report = citations::check(&doc, readme.as_deref(), &read_repo_file, PENDING);
    assert!(
        report.errors.is_empty(),
        "{} citation(s) wrong:\n{}",
        report.errors.len(),
        citations::describe(&report)
    );
    let counted = [
        report.backed,
        report.cells,
        report.partly,
        report.argued,
        report.not_applicable,
    ];
    assert_eq!(
        citations::stated_count(&doc),
        Some(counted),
        "docs/guarantees.md's **Count** line must say, in this order: {} of the {} cells backed, \
         {} partly (a key pending), {} argued only, {} n/a",
        counted[0],
        counted[1],
        counted[2],
        counted[3],
        counted[4]
    );
}

/// The check can fail: the fenced row's minority cell citing a test whose clients never turn
/// fencing on, a key cited for a fault its test does not make, and a test that is not there.
#[test]
fn the_citation_check_fails_on_a_wrong_citation() {
    let doc = read_repo_file("docs/guarantees.md".as_ref()).unwrap();
    let wrong = [
        // The fenced row's minority cell backed by an unfenced test.
        (
            "T-minority-fenced",
            "T-minority",
            "no test of T-minority makes minority in modes [\"redlock\", \"fenced\"]",
        ),
        // A clock-jump test cited for eviction.
        (
            "M-evict, M-evict-resources (counter); T-evict",
            "T-clock-single; T-evict",
            "claims faults [\"clock\"], not evict",
        ),
    ];
    for (right, bad, want) in wrong {
        assert!(doc.contains(right), "the doc no longer has {right:?}");
        let doc = doc.replacen(right, bad, 1);
        let report = citations::check(&doc, None, &read_repo_file, PENDING);
        let all = citations::describe(&report);
        assert!(all.contains(want), "{bad:?} not caught: {all}");
    }
    // A README key the doc does not define.
    let readme = "| primitive | Redis | etcd | backed by |\n| --- | --- | --- | --- |\n\
                  | semaphore | ... | ... | T-sem-16, T-no-such-key |\n";
    let report = citations::check(&doc, Some(readme), &read_repo_file, &[]);
    assert!(
        citations::describe(&report).contains("README cites T-no-such-key"),
        "{}",
        citations::describe(&report)
    );
    let doc = doc.replacen(
        "redlock::still_acquires_with_one_of_three_nodes_stopped",
        "redlock::no_such_test",
        1,
    );
    let report = citations::check(&doc, None, &read_repo_file, PENDING);
    assert!(
        citations::describe(&report).contains("no function no_such_test"),
        "{}",
        citations::describe(&report)
    );
}

// ---- Issue 36: the faults of the table in the modes no other test ran them in. ----

/// A fenced client (Redis). With `quarantine`, the nodes must be marked new at birth
/// ([`mark_new`]), as `fencelock up` does, or quarantine keeps fresh nodes out for a TTL.
fn fenced(urls: Vec<String>, ttl: Duration, quarantine: bool) -> Client {
    // A connection's set-up is several round trips (scripts, the node's report, the node-set
    // record): behind a delaying proxy they pass the default 1 s connect timeout.
    let config = Config::new(urls)
        .with_ttl(ttl)
        .with_node_timeout(Duration::from_millis(2_000))
        .with_connect_timeout(Duration::from_secs(10))
        .with_fencing(true);
    let config = if quarantine {
        config.with_quarantine(true)
    } else {
        config.with_quarantine(false)
    };
    Client::new(config).unwrap()
}

/// Marks each node new at birth, so restart quarantine counts it at once (and, with
/// `appendfsync always`, again after a kill -9: the marker comes back with the data).
fn mark_new(nodes: &RedisNodes) {
    for node in nodes.iter() {
        let marker = fencelock::protocol::new_node_marker(&node.run_id().unwrap());
        node.cli(&["SET", fencelock::protocol::NODE_MARKER_KEY, &marker])
            .unwrap();
    }
}

/// A fenced storage (SQLite) in a temporary directory.
fn storage() -> (tempfile::TempDir, fencelock::fence::SqliteFence) {
    let dir = tempfile::tempdir().unwrap();
    let fence = fencelock::fence::SqliteFence::open(dir.path().join("fenced.db")).unwrap();
    (dir, fence)
}

/// Writes through the fence with `token`: Ok, or the error's kind.
async fn write(
    fence: &fencelock::fence::SqliteFence,
    resource: &str,
    token: u64,
) -> Result<(), ErrorKind> {
    fence
        .write_async(resource, token, |_| Ok(()))
        .await
        .map_err(|e| e.kind())
}

/// Lets a client whose connections a node's kill broke meet that on a scratch resource (the
/// first request on a broken connection fails with "connection lost"), so that what follows
/// runs on fresh connections.
async fn reconnect(c: &Client) {
    for _ in 0..20 {
        if let Ok(lock) = c.try_acquire("scratch").await {
            lock.release().await.unwrap();
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the client never reached the restarted nodes");
}

/// Fenced Redlock (quarantine off, then on), one node of three killed: still available, each
/// new holder's token above the last, the storage takes each in turn and refuses the oldest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_redlock_with_a_minority_down_stays_available_and_tokens_increase() {
    for quarantine in [false, true] {
        let nodes = RedisNodes::start(3).unwrap();
        if quarantine {
            mark_new(&nodes);
        }
        let ttl = Duration::from_secs(10);
        let (a, b) = (
            fenced(nodes.urls(), ttl, quarantine),
            fenced(nodes.urls(), ttl, quarantine),
        );
        let (_dir, fence) = storage();
        // The first fenced grant of a node set needs every node (it starts the epoch).
        let first = a.try_acquire("m").await.unwrap();
        let first_token = first.fencing_token().unwrap().value();
        write(&fence, "m", first_token).await.unwrap();
        first.release().await.unwrap();

        nodes.node(2).kill().unwrap();
        let mut last = first_token;
        for i in 0..4 {
            let (holder, other) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
            let lock = holder.try_acquire("m").await.unwrap();
            let err = other.try_acquire("m").await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
            let token = lock.fencing_token().unwrap().value();
            assert!(
                token > last,
                "token {token} after {last} (quarantine {quarantine})"
            );
            write(&fence, "m", token).await.unwrap();
            lock.release().await.unwrap();
            last = token;
        }
        assert_eq!(
            write(&fence, "m", first_token).await,
            Err(ErrorKind::StaleToken)
        );
    }
}

/// Fenced Redlock (quarantine off, then on), two nodes of three killed while a lock is held:
/// no client gets the lock or a token (`Unavailable`), the holder cannot extend, and the
/// storage's last token stays the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_redlock_with_a_majority_down_fails_closed() {
    for quarantine in [false, true] {
        let nodes = RedisNodes::start(3).unwrap();
        if quarantine {
            mark_new(&nodes);
        }
        let ttl = Duration::from_secs(10);
        let (a, b) = (
            fenced(nodes.urls(), ttl, quarantine),
            fenced(nodes.urls(), ttl, quarantine),
        );
        let (_dir, fence) = storage();
        let mut held = a.try_acquire("m").await.unwrap();
        let token = held.fencing_token().unwrap().value();
        write(&fence, "m", token).await.unwrap();

        nodes.node(1).kill().unwrap();
        nodes.node(2).kill().unwrap();
        let err = b.try_acquire("m").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        let err = a.try_acquire("another").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        let err = held.extend().await.unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::Unavailable | ErrorKind::Lost),
            "{err}"
        );
        assert_eq!(fence.last_token("m").unwrap(), Some(token));
    }
}

/// Fenced Redlock (quarantine off, then on) with every request to two of three nodes delayed
/// 300 ms by a proxy: the acquisition waits for one of them, and its validity is counted from
/// before the requests went out (at most the TTL less the delay); the other client is refused
/// meanwhile, tokens increase and the storage refuses the older holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_redlock_under_network_delay_counts_validity_from_the_send_and_keeps_order() {
    let delay = Duration::from_millis(300);
    for quarantine in [false, true] {
        let nodes = RedisNodes::start(3).unwrap();
        if quarantine {
            mark_new(&nodes);
        }
        let proxies: Vec<DelayProxy> = nodes
            .iter()
            .map(|n| DelayProxy::start(n.port()).unwrap())
            .collect();
        let urls: Vec<String> = proxies
            .iter()
            .map(|p| format!("redis://127.0.0.1:{}/0", p.port()))
            .collect();
        let ttl = Duration::from_secs(10);
        let (a, b) = (
            fenced(urls.clone(), ttl, quarantine),
            fenced(urls, ttl, quarantine),
        );
        let (_dir, fence) = storage();
        let first = a.try_acquire("d").await.unwrap();
        let first_token = first.fencing_token().unwrap().value();
        write(&fence, "d", first_token).await.unwrap();
        first.release().await.unwrap();

        proxies[0].set_delay(delay);
        proxies[1].set_delay(delay);
        let lock = b.try_acquire("d").await.unwrap();
        let left = lock.remaining();
        assert!(
            left <= ttl - delay,
            "validity {left:?} not shortened by the {delay:?} delay"
        );
        let err = a.try_acquire("d").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
        let token = lock.fencing_token().unwrap().value();
        assert!(token > first_token);
        write(&fence, "d", token).await.unwrap();
        assert_eq!(
            write(&fence, "d", first_token).await,
            Err(ErrorKind::StaleToken)
        );
        lock.release().await.unwrap();
    }
}

/// Fenced Redlock (quarantine off, then on) on nodes with `appendfsync always`, every node
/// killed with SIGKILL and restarted while a lock is held: each node's fence counter comes back
/// exactly, the lock key too (the other client is refused), and the next holder's token is
/// above the first's without a reseed; the storage refuses the first holder after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_redlock_on_aof_always_nodes_keeps_lock_and_counters_across_kill_9() {
    for quarantine in [false, true] {
        let nodes =
            RedisNodes::start_with(3, RedisOptions::new().persistence(Persistence::AofAlways))
                .unwrap();
        if quarantine {
            mark_new(&nodes);
        }
        let ttl = Duration::from_secs(30);
        let (a, b) = (
            fenced(nodes.urls(), ttl, quarantine),
            fenced(nodes.urls(), ttl, quarantine),
        );
        let (_dir, fence) = storage();
        let held = a.try_acquire("k").await.unwrap();
        let token = held.fencing_token().unwrap().value();
        write(&fence, "k", token).await.unwrap();
        let counter = fencelock::protocol::FENCE_COUNTER_KEY;
        // The round returns at a quorum: let the third node's writes land.
        let mut before = Vec::new();
        for _ in 0..100 {
            before = nodes
                .iter()
                .map(|n| {
                    (
                        n.cli(&["GET", counter]).unwrap(),
                        n.cli(&["EXISTS", "k"]).unwrap(),
                    )
                })
                .collect();
            if before.iter().all(|(c, k)| c != "(nil)" && k == "1") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for node in nodes.iter() {
            node.kill().unwrap();
        }
        for node in nodes.iter() {
            node.restart().unwrap();
        }
        let after: Vec<(String, String)> = nodes
            .iter()
            .map(|n| {
                (
                    n.cli(&["GET", counter]).unwrap(),
                    n.cli(&["EXISTS", "k"]).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            after, before,
            "counters and lock keys (quarantine {quarantine})"
        );
        // The clients' connections broke with the kills; a refused attempt may first meet one.
        let mut refused = None;
        for _ in 0..20 {
            match b.try_acquire("k").await {
                Err(e) if e.kind() == ErrorKind::Contention => {
                    refused = Some(e);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                Ok(_) => panic!("a second client got the lock after the restart"),
            }
        }
        assert!(refused.is_some(), "never refused with Contention");
        reconnect(&a).await;
        held.release().await.unwrap();
        let next = b.try_acquire("k").await.unwrap();
        let next_token = next.fencing_token().unwrap().value();
        assert!(next_token > token, "{next_token} after {token}");
        write(&fence, "k", next_token).await.unwrap();
        assert_eq!(write(&fence, "k", token).await, Err(ErrorKind::StaleToken));
        next.release().await.unwrap();
    }
}

/// Efficiency lock on one node, the node killed and restarted without persistence: the lock
/// is gone, and a second client with a lock client takes it while the first still believes
/// it holds it. (Unsafe, as the table says.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_restarted_without_persistence_lets_a_second_client_take_the_lock() {
    let nodes = RedisNodes::start(1).unwrap();
    let ttl = Duration::from_secs(30);
    let (a, b) = (client(&nodes, ttl), client(&nodes, ttl));
    let held = a.try_acquire("r").await.unwrap();
    let err = b.try_acquire("r").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    nodes.node(0).kill().unwrap();
    nodes.node(0).restart().unwrap();
    // The first attempt may meet the connection the kill broke.
    let mut second = None;
    for _ in 0..20 {
        match b.try_acquire("r").await {
            Ok(lock) => {
                second = Some(lock);
                break;
            }
            Err(e) if e.kind() == ErrorKind::Contention => panic!("the lock survived: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(second.is_some(), "the second client never got the lock");
    assert!(
        held.is_valid(),
        "the first holder still believes it holds the lock"
    );
}

/// Efficiency lock on one node with `appendfsync always`, the node killed with SIGKILL and
/// restarted: the lock key and its owner come back, and a second client is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_aof_always_node_keeps_the_lock_across_kill_9() {
    let nodes =
        RedisNodes::start_with(1, RedisOptions::new().persistence(Persistence::AofAlways)).unwrap();
    let ttl = Duration::from_secs(30);
    let (a, b) = (client(&nodes, ttl), client(&nodes, ttl));
    let held = a.try_acquire("r").await.unwrap();
    nodes.node(0).kill().unwrap();
    nodes.node(0).restart().unwrap();
    assert_eq!(nodes.node(0).cli(&["GET", "r"]).unwrap(), held.owner());
    let mut refused = false;
    for _ in 0..20 {
        match b.try_acquire("r").await {
            Err(e) if e.kind() == ErrorKind::Contention => {
                refused = true;
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Ok(_) => panic!("a second client got the lock after the restart"),
        }
    }
    assert!(refused);
    reconnect(&a).await;
    held.release().await.unwrap();
}

/// Efficiency lock, its one node down: nobody gets the lock (`Unavailable`, fails closed) and
/// the holder cannot extend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_down_fails_closed() {
    let nodes = RedisNodes::start(1).unwrap();
    let ttl = Duration::from_secs(10);
    let (a, b) = (client(&nodes, ttl), client(&nodes, ttl));
    let mut held = a.try_acquire("r").await.unwrap();
    nodes.node(0).kill().unwrap();
    let err = b.try_acquire("r").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let err = held.extend().await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Unavailable | ErrorKind::Lost),
        "{err}"
    );
}

/// Efficiency lock, every request to its one node delayed 300 ms by a proxy: the validity is
/// counted from before the request went out (at most the TTL less the delay), and a second
/// client is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_single_node_shortens_the_validity_by_the_delay() {
    let nodes = RedisNodes::start(1).unwrap();
    let proxy = DelayProxy::start(nodes.node(0).port()).unwrap();
    let url = format!("redis://127.0.0.1:{}/0", proxy.port());
    let ttl = Duration::from_secs(10);
    let config = |url: &str| {
        Client::new(
            Config::new([url])
                .with_ttl(ttl)
                .with_node_timeout(Duration::from_millis(2_000))
                .with_connect_timeout(Duration::from_secs(10))
                .with_quarantine(false),
        )
        .unwrap()
    };
    let (a, b) = (config(&url), config(&url));
    b.connect().await;
    let delay = Duration::from_millis(300);
    proxy.set_delay(delay);
    let held = a.try_acquire("r").await.unwrap();
    let left = held.remaining();
    assert!(
        left <= ttl - delay,
        "validity {left:?} not shortened by the {delay:?} delay"
    );
    let err = b.try_acquire("r").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    held.release().await.unwrap();
}

/// Redlock on three nodes (without fencing, then with it), the lock key evicted on two of
/// them (`volatile-lru` at `maxmemory`): a second client gets a quorum while the first is still
/// within its validity (unsafe, as the table says). With fencing the second holder's token is
/// larger and the storage refuses the first holder: the eviction acts like a clock jump.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_lock_key_on_two_of_three_nodes_lets_a_second_client_in() {
    for fencing in [false, true] {
        let options = RedisOptions::new()
            .maxmemory(Some(4 << 20))
            .maxmemory_policy(Some("volatile-lru".to_owned()));
        let nodes = RedisNodes::start_with(3, options).unwrap();
        let ttl = Duration::from_secs(30);
        let make = || {
            let config = Config::new(nodes.urls())
                .with_ttl(ttl)
                .with_node_timeout(Duration::from_millis(2_000))
                .with_quarantine(false);
            let config = if fencing {
                config.with_fencing(true)
            } else {
                config
            };
            Client::new(config).unwrap()
        };
        let (a, b) = (make(), make());
        let (_dir, fence) = storage();
        let held = a.try_acquire("evict").await.unwrap();
        // Once every node holds it: the grant returns at a majority, and the last node's write
        // may still be on its way on a loaded machine (it would land after the eviction below).
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !nodes
            .iter()
            .all(|n| n.cli(&["EXISTS", "evict"]).unwrap() == "1")
        {
            assert!(
                std::time::Instant::now() < until,
                "the lock's key is not on every node"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let filler = "x".repeat(16 << 10);
        for node in nodes.iter().take(2) {
            let mut filled = 0;
            for i in 0..2_000 {
                filled = i + 1;
                let _ = node.cli(&["SET", &format!("fill:{i}"), &filler]);
                if node.cli(&["EXISTS", "evict"]).unwrap() == "0" {
                    break;
                }
            }
            assert_eq!(
                node.cli(&["EXISTS", "evict"]).unwrap(),
                "0",
                "never evicted"
            );
            // Room for the next grant (the fillers have no TTL, so nothing is left to evict).
            for i in 0..filled {
                node.cli(&["DEL", &format!("fill:{i}")]).unwrap();
            }
        }
        let second = b
            .try_acquire("evict")
            .await
            .expect("the evicted lock is free");
        assert!(
            held.is_valid(),
            "the first holder is still within its validity"
        );
        if fencing {
            let (first, next) = (
                held.fencing_token().unwrap().value(),
                second.fencing_token().unwrap().value(),
            );
            assert!(next > first, "{next} after {first}");
            write(&fence, "evict", next).await.unwrap();
            assert_eq!(
                write(&fence, "evict", first).await,
                Err(ErrorKind::StaleToken)
            );
        }
    }
}

/// Fenced Redlock on three nodes, the clocks of two of them jumping forward by a TTL while a
/// holder is within its validity: its keys there expire, and a second client gets a quorum
/// (two holders at once: the lock alone is unsafe). Tokens stay unique: five such rounds, with
/// the clients' roles alternating, never issue a token twice, and the storage refuses each
/// round's first holder after the second wrote. (A jump during the later holder's own
/// acquisition can invert the order: the model's trace, M-clock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_tokens_stay_unique_when_clocks_jump_forward_under_a_holder() {
    let nodes = RedisNodes::start_with(3, RedisOptions::new().clock_shift(true)).unwrap();
    let ttl = Duration::from_secs(30);
    let make = || {
        Client::new(
            Config::new(nodes.urls())
                .with_ttl(ttl)
                .with_node_timeout(Duration::from_millis(2_000))
                .with_fencing(true)
                .with_quarantine(false),
        )
        .unwrap()
    };
    let clients = [make(), make()];
    let (_dir, fence) = storage();
    let mut tokens = Vec::new();
    let mut offset = 0;
    for round in 0..5 {
        let (first, second) = (&clients[round % 2], &clients[1 - round % 2]);
        let held = first.try_acquire("jump").await.unwrap();
        let err = second.try_acquire("jump").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
        offset += 2 * ttl.as_millis() as i64;
        nodes.node(1).set_clock_offset(offset).unwrap();
        nodes.node(2).set_clock_offset(offset).unwrap();
        let next = second.try_acquire("jump").await.unwrap();
        assert!(
            held.is_valid(),
            "the first holder is still within its validity"
        );
        let (a, b) = (
            held.fencing_token().unwrap().value(),
            next.fencing_token().unwrap().value(),
        );
        assert_ne!(a, b, "one token for two holders");
        write(&fence, "jump", b).await.unwrap();
        assert_eq!(write(&fence, "jump", a).await, Err(ErrorKind::StaleToken));
        tokens.extend([a, b]);
        let _ = held.release().await;
        next.release().await.unwrap();
    }
    let issued = tokens.len();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), issued, "a token was issued twice: {tokens:?}");
}

/// The etcd cells, on a 3-member cluster.
#[cfg(feature = "etcd")]
mod on_etcd {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use fencelock::{AutoExtend, Client, Config, ErrorKind, RetryPolicy};
    use fencelock_testkit::{DelayProxy, EtcdCluster};

    use super::{storage, write};

    /// Generous: elections and restarts on a loaded 2-core machine.
    const LONG: Duration = Duration::from_secs(30);

    fn client(endpoints: &[String], ttl: Duration) -> Client {
        let urls: Vec<String> = endpoints
            .iter()
            .map(|e| e.replacen("http://", "etcd://", 1))
            .collect();
        Client::new(
            Config::new(urls)
                .with_ttl(ttl)
                .with_retry(RetryPolicy::new().with_wait(LONG)),
        )
        .unwrap()
    }

    /// Retries an attempt that fails for want of a member (a connection the fault broke) until
    /// it is granted or refused with `Contention`.
    async fn settle(c: &Client, resource: &str) -> Result<fencelock::Lock, fencelock::Error> {
        let deadline = Instant::now() + LONG;
        loop {
            match c.try_acquire(resource).await {
                Err(e) if e.kind() != ErrorKind::Contention && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return other,
            }
        }
    }

    /// A member that lost its data directory: etcd refuses to start it under its old identity
    /// ("has already been bootstrapped"), the other two keep the lock, and the operator's way
    /// back (remove the member, add it again, start it on an empty directory with
    /// `--initial-cluster-state existing`) brings back a member that knows the lock: a client
    /// on it alone is refused, then granted a larger token after the release.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_a_member_restarted_empty_is_refused_until_replaced_and_the_lock_survives() {
        let cluster = EtcdCluster::start(3).unwrap();
        let (follower, eps) = cluster.follower_first(LONG).unwrap();
        let ttl = Duration::from_secs(30);
        let (a, b) = (client(&eps, ttl), client(&eps, ttl));
        let held = a.try_acquire("e").await.unwrap();
        let token = held.fencing_token().unwrap().value();

        let member = cluster.member(follower);
        member.kill_and_wipe().unwrap();
        let log = member.start_expecting_refusal(LONG).unwrap();
        assert!(log.contains("has already been bootstrapped"), "{log}");
        let err = settle(&b, "e").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contention, "{err}");

        cluster.replace_member_empty(follower).unwrap();
        let on_it = client(&[member.endpoint()], ttl);
        let err = settle(&on_it, "e").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
        held.release().await.unwrap();
        let next = settle(&on_it, "e").await.unwrap();
        assert!(next.fencing_token().unwrap().value() > token);
        next.release().await.unwrap();
    }

    /// Two members of a running cluster of three stopped (the leader and a follower) while a
    /// lock is held: no client gets a lock (`Unavailable`, fails closed), the holder cannot
    /// extend; once they are back, the next holder gets a larger token.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_a_majority_of_a_running_cluster_stopped_fails_closed() {
        let cluster = EtcdCluster::start(3).unwrap();
        let leader = cluster.wait_for_leader(LONG).unwrap();
        let eps = cluster.endpoints();
        let ttl = Duration::from_secs(3);
        let (a, b) = (client(&eps, ttl), client(&eps, ttl));
        let mut held = a.try_acquire("e").await.unwrap();
        let token = held.fencing_token().unwrap().value();
        let (_dir, fence) = storage();
        write(&fence, "e", token).await.unwrap();

        cluster.member(leader).kill().unwrap();
        cluster.member((leader + 1) % 3).kill().unwrap();
        let err = b.try_acquire("e").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        let err = a.try_acquire("another").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        let err = held.extend().await.unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::Unavailable | ErrorKind::Lost),
            "{err}"
        );
        assert_eq!(fence.last_token("e").unwrap(), Some(token));

        cluster.restart_all().unwrap();
        let next = b.acquire("e").await.unwrap();
        let next_token = next.fencing_token().unwrap().value();
        assert!(next_token > token);
        write(&fence, "e", next_token).await.unwrap();
        next.release().await.unwrap();
    }

    /// The leader killed with SIGKILL while a lock is held, and restarted: it comes back with
    /// its data (its own serializable read has the lock's key at the lock's revision), a client
    /// on it alone is refused, and after the release gets a larger token.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_a_killed_member_comes_back_with_its_data() {
        let cluster = EtcdCluster::start(3).unwrap();
        let leader = cluster.wait_for_leader(LONG).unwrap();
        let eps = cluster.endpoints();
        let ttl = Duration::from_secs(30);
        let a = client(&eps, ttl);
        let held = a.try_acquire("e").await.unwrap();
        let token = held.fencing_token().unwrap().value();

        let member = cluster.member(leader);
        member.kill().unwrap();
        member.restart().unwrap();
        let mut raw = etcd_client::Client::connect([member.endpoint()], None)
            .await
            .unwrap();
        let deadline = Instant::now() + LONG;
        let revision = loop {
            let reply = raw
                .get(
                    held.owner(),
                    Some(etcd_client::GetOptions::new().with_serializable()),
                )
                .await
                .unwrap();
            if let Some(kv) = reply.kvs().first() {
                break kv.create_revision();
            }
            assert!(
                Instant::now() < deadline,
                "the restarted member never had the key"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(revision as u64, token);
        let on_it = client(&[member.endpoint()], ttl);
        let err = settle(&on_it, "e").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
        held.release().await.unwrap();
        let next = settle(&on_it, "e").await.unwrap();
        assert!(next.fencing_token().unwrap().value() > token);
        next.release().await.unwrap();
    }

    /// Every request to one member delayed 300 ms by a proxy, a client that reaches the cluster
    /// only through it: its validity is counted from before the lease grant went out (at most
    /// the TTL less the delay), a client on the other members is refused meanwhile, and gets a
    /// larger token after the release.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_network_delay_shortens_the_validity_and_keeps_the_lock_exclusive() {
        let cluster = EtcdCluster::start(3).unwrap();
        cluster.wait_for_leader(LONG).unwrap();
        let proxy = DelayProxy::start(cluster.member(0).client_port()).unwrap();
        let ttl = Duration::from_secs(10);
        let slow = client(&[format!("http://127.0.0.1:{}", proxy.port())], ttl);
        let other = client(&cluster.endpoints()[1..], ttl);
        let delay = Duration::from_millis(300);
        proxy.set_delay(delay);
        let held = slow.try_acquire("d").await.unwrap();
        let left = held.remaining();
        assert!(
            left <= ttl - delay,
            "validity {left:?} not shortened by the {delay:?} delay"
        );
        let token = held.fencing_token().unwrap().value();
        let err = other.try_acquire("d").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
        held.release().await.unwrap();
        let next = other.try_acquire("d").await.unwrap();
        assert!(next.fencing_token().unwrap().value() > token);
        next.release().await.unwrap();
    }

    /// Reentrancy on etcd: a task asking again for a lock it holds is refused at once
    /// (`AlreadyHeld`, not left waiting on itself), another task of the same client waits for
    /// the holder, and the refusal ends with the lock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_the_same_task_is_refused_at_once_and_other_tasks_wait() {
        let cluster = EtcdCluster::start(3).unwrap();
        let c = client(&cluster.endpoints(), Duration::from_secs(30));
        let lock = c.acquire("re").await.unwrap();
        let started = Instant::now();
        let err = c.acquire("re").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
        let err = c.try_acquire("re").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
        // "At once": far below the 30 s wait budget (generous for a loaded machine).
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        let other = c.clone();
        let waiter = tokio::spawn(async move {
            let l = other.acquire("re").await.unwrap();
            let token = l.fencing_token().unwrap().value();
            l.release().await.unwrap();
            token
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiter.is_finished(),
            "the other task must wait for the holder"
        );
        let first = lock.fencing_token().unwrap().value();
        lock.release().await.unwrap();
        assert!(waiter.await.unwrap() > first);
        let again = c.try_acquire("re").await.unwrap();
        again.release().await.unwrap();
    }

    /// The etcd read-write lock under a fault: 2 writers and 3 readers on a 3-member cluster
    /// whose leader is killed with SIGKILL during the run and restarted: never a writer with
    /// anyone, every write lock's revision distinct.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_rwlock_keeps_writers_alone_while_the_leader_is_killed() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;

        let cluster = Arc::new(EtcdCluster::start(3).unwrap());
        let leader = cluster.wait_for_leader(LONG).unwrap();
        let eps = cluster.endpoints();
        let (readers, writers, violations, grants) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let mut tasks = Vec::new();
        for k in 0..5 {
            let rw = client(&eps, Duration::from_secs(10)).rwlock("rw").unwrap();
            let (readers, writers, violations, grants) = (
                readers.clone(),
                writers.clone(),
                violations.clone(),
                grants.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut tokens = Vec::new();
                let until = Instant::now() + Duration::from_secs(4);
                while Instant::now() < until {
                    if k < 2 {
                        let Ok(lock) = rw.write().await else { continue };
                        tokens.push(lock.fencing_token().unwrap().value());
                        if writers.fetch_add(1, Ordering::SeqCst) != 0
                            || readers.load(Ordering::SeqCst) != 0
                        {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        writers.fetch_sub(1, Ordering::SeqCst);
                        let _ = lock.release().await;
                    } else {
                        let Ok(lock) = rw.read().await else { continue };
                        readers.fetch_add(1, Ordering::SeqCst);
                        if writers.load(Ordering::SeqCst) != 0 {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        readers.fetch_sub(1, Ordering::SeqCst);
                        let _ = lock.release().await;
                    }
                    grants.fetch_add(1, Ordering::SeqCst);
                }
                tokens
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = grants.load(Ordering::SeqCst);
        let fault = cluster.clone();
        tokio::task::spawn_blocking(move || {
            fault.member(leader).kill().unwrap();
            fault.member(leader).restart().unwrap();
        })
        .await
        .unwrap();
        let mut tokens = Vec::new();
        for t in tasks {
            tokens.extend(t.await.unwrap());
        }
        let n = tokens.len();
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), n, "a write revision granted twice");
        assert_eq!(violations.load(Ordering::SeqCst), 0);
        let all = grants.load(Ordering::SeqCst);
        println!(
            "etcd rwlock: {all} grants, {} after the kill began",
            all - before
        );
        assert!(all > before, "no grant after the leader was killed");
    }

    /// What the child process of the pause test does (nothing unless that test started it):
    /// takes the lock with auto-extension, prints its token, stops itself with SIGSTOP (the
    /// whole process: its extensions stop too), and once continued writes through the fence
    /// with its token and prints the outcome.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_pause_child_process() {
        let Ok(endpoints) = std::env::var("FENCELOCK_TEST_PAUSE_ENDPOINTS") else {
            return;
        };
        let db = std::env::var("FENCELOCK_TEST_PAUSE_DB").unwrap();
        let eps: Vec<String> = endpoints.split(',').map(str::to_owned).collect();
        let c = client(&eps, Duration::from_secs(2));
        let guard = c
            .acquire("sku")
            .await
            .unwrap()
            .auto_extend(AutoExtend::new());
        let token = guard.fencing_token().unwrap().value();
        println!("TOKEN {token}");
        // SAFETY: raising a signal on our own process has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGSTOP) };
        let fence = fencelock::fence::SqliteFence::open(&db).unwrap();
        match write(&fence, "sku", token).await {
            Ok(()) => println!("WROTE {token}"),
            Err(kind) => println!("REFUSED {kind:?}"),
        }
    }

    /// A holder process really paused (SIGSTOP of the whole process, auto-extension
    /// included) past its 2 s lease on a 3-member cluster: the next holder gets a larger token
    /// and writes; the paused holder, continued, is refused by the fence (`StaleToken`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_a_paused_holder_process_is_refused_by_the_fence() {
        let cluster = EtcdCluster::start(3).unwrap();
        let eps = cluster.endpoints();
        let (dir, fence) = storage();
        let db = dir.path().join("fenced.db");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "on_etcd::etcd_pause_child_process",
                "--nocapture",
            ])
            .env("FENCELOCK_TEST_PAUSE_ENDPOINTS", eps.join(","))
            .env("FENCELOCK_TEST_PAUSE_DB", &db)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let a_token: u64 = loop {
            let line = lines.next().expect("the child printed no token").unwrap();
            if let Some(t) = line.strip_prefix("TOKEN ") {
                break t.parse().unwrap();
            }
        };
        let stat = format!("/proc/{}/stat", child.id());
        let deadline = Instant::now() + LONG;
        loop {
            let s = std::fs::read_to_string(&stat).unwrap();
            if s.rsplit(") ").next().unwrap().starts_with('T') {
                break;
            }
            assert!(Instant::now() < deadline, "the child never stopped");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        let b = client(&eps, Duration::from_secs(2));
        let b_lock = b.acquire("sku").await.unwrap();
        let b_token = b_lock.fencing_token().unwrap().value();
        assert!(b_token > a_token);
        write(&fence, "sku", b_token).await.unwrap();

        // SAFETY: sending a signal to our own child has no memory-safety preconditions.
        unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        assert!(child.wait().unwrap().success());
        assert!(
            rest.iter().any(|l| l == "REFUSED StaleToken"),
            "the paused holder's write: {rest:?}"
        );
        assert_eq!(fence.last_token("sku").unwrap(), Some(b_token));
        b_lock.release().await.unwrap();
    }
}
