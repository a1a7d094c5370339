//! Fenced tokens across lost counters, on real nodes (issue 13, findings 6, 7 and 8): a node
//! restarted without its data, every node restarted without its data, one counter per node for
//! any number of resources, and the legacy per-resource counters of an upgraded node.
//!
//! The key names are written out ("fencelock:fence", the node counter, and
//! "fencelock:fence:<resource>", the legacy counter): they are the protocol other clients read.

use std::time::Duration;

use fencelock::{Client, Config, RetryPolicy};
use fencelock_testkit::{RedisNode, RedisNodes};

const COUNTER: &str = "fencelock:fence";

fn fenced(nodes: &RedisNodes) -> Client {
    Client::new(
        Config::new(nodes.urls())
            .with_fencing(true)
            .with_quarantine(false)
            .with_ttl(Duration::from_secs(2))
            .with_node_timeout(Duration::from_millis(300))
            .with_retry(
                RetryPolicy::new()
                    .with_wait(Duration::from_secs(60))
                    .with_base_delay(Duration::from_millis(2))
                    .with_max_delay(Duration::from_millis(20)),
            ),
    )
    .unwrap()
}

fn get(node: &RedisNode, key: &str) -> Option<String> {
    let v = node.cli(&["GET", key]).unwrap();
    (v != "(nil)").then_some(v)
}

/// Waits until `key` is gone from `node` (its TTL ran out).
async fn wait_free(node: &RedisNode, key: &str) {
    for _ in 0..300 {
        if get(node, key).is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{key} still set on {} after 15 s", node.port());
}

/// Kills the node (SIGKILL) and starts it again on its port: no persistence, so every key is
/// gone, its counter too.
fn restart_empty(node: &RedisNode) {
    node.kill().unwrap();
    node.restart().unwrap();
    assert_eq!(node.cli(&["DBSIZE"]).unwrap(), "0");
}

/// The model checker's trace of finding 6 (`tests/fencing_model.rs`,
/// `without_the_guard_a_restart_breaks_uniqueness`), steered on real nodes: A holds on {n0, n1}
/// while n2 is paused, n0 restarts empty, B asks while n1 is paused and gets {n0, n2}, where
/// n0 lost the counter and n2 missed A's grants. Without the guard B was issued a token below
/// A's; with it B fails closed, naming n0, and is issued a larger token once n1 is back; n0 is
/// seeded with that token.
#[tokio::test]
async fn a_node_restarted_without_its_counter_never_yields_a_smaller_token() {
    let nodes = RedisNodes::start(3).unwrap();
    let (a, b) = (fenced(&nodes), fenced(&nodes));
    // All three nodes take the first grant, so all three have a counter.
    let first = a.acquire("R").await.unwrap();
    let mut last = first.fencing_token().unwrap().value();
    first.release().await.unwrap();
    nodes.node(2).pause().unwrap();
    for _ in 0..5 {
        let lock = a.acquire("R").await.unwrap();
        let t = lock.fencing_token().unwrap().value();
        assert!(t > last, "{t} after {last}");
        last = t;
        lock.release().await.unwrap();
    }
    nodes.node(2).resume().unwrap();
    // A's SETs that n2 queued while paused land now; their releases came too late. Wait for
    // those keys to expire (the TTL), as they would.
    wait_free(nodes.node(2), "R").await;
    restart_empty(nodes.node(0));
    nodes.node(1).pause().unwrap();
    // B's granting quorum is {n0, n2}: n0 lost its counter, n2 has only the first token.
    let refused = b.try_acquire("R").await;
    nodes.node(1).resume().unwrap();
    match refused {
        Ok(lock) => panic!(
            "B was fencing token {:?} from {{n0, n2}} after A's {last}",
            lock.fencing_token().map(|t| t.value())
        ),
        Err(e) => {
            let msg = e.to_string();
            assert_eq!(e.kind(), fencelock::ErrorKind::Unavailable, "{msg}");
            let n0 = format!("127.0.0.1:{}", nodes.node(0).port());
            assert!(
                msg.contains(&n0) && msg.contains("no fence counter"),
                "the error names the node without a counter: {msg}"
            );
            assert!(msg.contains("fencelock reseed --above"), "{msg}");
        }
    }
    // The failed attempt released what it took.
    for n in nodes.iter() {
        assert_eq!(get(n, "R"), None);
    }
    // With n1 back, a quorum of counters: a larger token, and n0 is seeded with it once its
    // seed wait (the client's TTL and drift, issue 27 item 3) has passed since a seed first
    // found it without a counter.
    let lock = b.acquire("R").await.unwrap();
    let t = lock.fencing_token().unwrap().value();
    assert!(t > last, "{t} after {last}");
    // The wait outlasts the lock's TTL.
    lock.release().await.unwrap();
    let mut seeded = None;
    for _ in 0..300 {
        // The seed is sent once the token is issued; n0 may not have granted (the round
        // returns at a quorum), then a later grant that n0 takes part in seeds it.
        seeded = get(nodes.node(0), COUNTER);
        if seeded.is_some() {
            break;
        }
        if let Ok(l) = b.try_acquire("other").await {
            l.release().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seeded = seeded.expect("n0 was seeded by a later grant");
    let seeded: u64 = seeded.parse().unwrap();
    assert!(seeded > last, "n0 seeded with {seeded}, not above {last}");
    // Everything later is above, through n0 too.
    nodes.node(2).pause().unwrap();
    let next = b.acquire("R").await.unwrap();
    assert!(next.fencing_token().unwrap().value() > t);
    next.release().await.unwrap();
    nodes.node(2).resume().unwrap();
    wait_free(nodes.node(2), "R").await;
}

/// Finding 8: fencing mode keeps one counter key per node, whatever the number of resources.
#[tokio::test]
async fn a_hundred_thousand_resources_leave_one_counter_key_per_node() {
    let nodes = RedisNodes::start(3).unwrap();
    // A script over 1,000 keys takes a while on a loaded machine.
    let client = Client::new(
        Config::new(nodes.urls())
            .with_fencing(true)
            .with_quarantine(false)
            .with_node_timeout(Duration::from_secs(3)),
    )
    .unwrap();
    let mut tokens = Vec::new();
    for batch in 0..100 {
        let names: Vec<String> = (0..1000).map(|i| format!("order:{batch}:{i}")).collect();
        let lock = client.acquire_many(&names).await.unwrap();
        tokens.push(lock.fencing_token().unwrap().value());
        lock.release().await.unwrap();
    }
    for n in nodes.iter() {
        let keys = n.cli(&["KEYS", "fencelock:fence*"]).unwrap();
        let count = keys.lines().count();
        assert_eq!(count, 1, "node {}: {count} counter keys", n.port());
        assert_eq!(keys, COUNTER);
    }
    // Each batch's attempt started after the previous token was issued: its quorum meets the
    // nodes that recorded that token and reads at least it, whatever the resources (one
    // counter for all). Concurrent grants of different resources may get equal tokens (issue 27
    // item 10): no order or uniqueness holds between them.
    for w in tokens.windows(2) {
        assert!(w[1] > w[0], "{} then {}", w[0], w[1]);
    }
}

/// Migration: a node upgraded with a legacy per-resource counter gives that resource a larger
/// token, and the write-back folds the legacy key into the node counter.
#[tokio::test]
async fn legacy_per_resource_counters_are_honoured_then_deleted() {
    let nodes = RedisNodes::start(3).unwrap();
    // As the per-resource protocol left them: the last token, 500, on the quorum that took its
    // write-back, an older one on the third node.
    for (n, v) in nodes.iter().zip(["500", "500", "120"]) {
        n.cli(&["SET", "fencelock:fence:R", v]).unwrap();
    }
    let client = fenced(&nodes);
    let lock = client.acquire("R").await.unwrap();
    let t = lock.fencing_token().unwrap().value();
    assert!(t > 500, "token {t} is not above the legacy counter 500");
    lock.release().await.unwrap();
    // Every node that took the write-back has the node counter and no legacy key any more; a
    // quorum took it.
    let mut folded = 0;
    for n in nodes.iter() {
        if get(n, COUNTER).is_some() {
            assert!(get(n, COUNTER).unwrap().parse::<u64>().unwrap() >= t);
            assert_eq!(get(n, "fencelock:fence:R"), None, "node {}", n.port());
            folded += 1;
        }
    }
    assert!(folded >= 2, "{folded} nodes took the write-back");
}

/// Finding 7, the token side: every node restarted without its data (as `fencelock down` and
/// `up` do to the dev nodes). The next fenced token is above the last token the storage
/// accepted, so the fenced storage accepts the new holder's writes.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn after_every_node_lost_its_data_the_storage_accepts_the_next_holder() {
    use fencelock::fence::SqliteFence;
    let dir = tempfile::tempdir().unwrap();
    let fence = SqliteFence::open(dir.path().join("fence.db")).unwrap();
    let nodes = RedisNodes::start(3).unwrap();
    let client = fenced(&nodes);
    let mut before = 0;
    for _ in 0..3 {
        let lock = client.acquire("job").await.unwrap();
        before = lock.fencing_token().unwrap().value();
        fence.write("job", before, |_tx| Ok(())).unwrap();
        lock.release().await.unwrap();
    }
    assert_eq!(fence.last_token("job").unwrap(), Some(before));
    for n in nodes.iter() {
        restart_empty(n);
    }
    let lock = client.acquire("job").await.unwrap();
    let after = lock.fencing_token().unwrap().value();
    assert!(
        after > before,
        "token {after} after the loss, {before} before"
    );
    fence
        .write("job", after, |_tx| Ok(()))
        .expect("the storage accepts the new epoch's holder");
    lock.release().await.unwrap();
}

/// Two nodes restarted empty, the third (which kept the counter) paused: the two grants have no
/// counter, yet this is no new epoch (the third may hold the largest token). The attempt fails
/// closed. With the third back it still does: one counter is not a quorum of them (the largest
/// token may have been on the two lost ones only); the way back is `fencelock reseed`.
#[tokio::test]
async fn no_epoch_starts_while_a_node_with_the_counter_does_not_grant() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = fenced(&nodes);
    let lock = client.acquire("E").await.unwrap();
    let before = lock.fencing_token().unwrap().value();
    lock.release().await.unwrap();
    restart_empty(nodes.node(0));
    restart_empty(nodes.node(1));
    // A new client: the first one's connections to the restarted nodes are gone.
    let client = fenced(&nodes);
    client.connect().await;
    nodes.node(2).pause().unwrap();
    let attempt = client.try_acquire("E").await;
    nodes.node(2).resume().unwrap();
    match attempt {
        Ok(lock) => panic!(
            "issued {:?} from two nodes without a counter",
            lock.fencing_token().map(|t| t.value())
        ),
        Err(e) => assert_eq!(e.kind(), fencelock::ErrorKind::Unavailable, "{e}"),
    }
    wait_free(nodes.node(2), "E").await;
    let e = client.try_acquire("E").await.unwrap_err();
    assert_eq!(e.kind(), fencelock::ErrorKind::Unavailable, "{e}");
    assert_eq!(e.to_string().matches("no fence counter").count(), 2, "{e}");
    assert!(before > 0);
}

/// Seeding only after issue: an attempt whose write-back a quorum refuses (an ACL on n1 and n2
/// forbids the write-back script) seeds nothing, so the node that lost its counter stays
/// without one.
#[tokio::test]
async fn a_failed_attempt_seeds_no_node() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = fenced(&nodes);
    client.acquire("S").await.unwrap().release().await.unwrap();
    restart_empty(nodes.node(0));
    let mut urls = vec![nodes.node(0).url()];
    for i in 1..3 {
        let node = nodes.node(i);
        // Every script this client runs but the write-back, by hash (published sources).
        let mut rule: Vec<String> = ["ACL", "SETUSER", "nowb", "on", ">pw", "~*", "&*"]
            .iter()
            .chain(&["+@all", "-evalsha", "-eval"])
            .map(|s| s.to_string())
            .collect();
        for src in [
            fencelock::protocol::ACQUIRE_FENCED_SCRIPT,
            fencelock::protocol::RELEASE_SCRIPT,
        ] {
            let sha = node.cli(&["SCRIPT", "LOAD", src]).unwrap();
            rule.push(format!("+evalsha|{sha}"));
        }
        let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
        node.cli(&rule).unwrap();
        urls.push(format!("redis://nowb:pw@127.0.0.1:{}", node.port()));
    }
    let refused = Client::new(
        Config::new(&urls)
            .with_fencing(true)
            .with_quarantine(false)
            .with_node_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    // n0 is among the granting nodes of most attempts (the round returns at two grants only if
    // both have a counter); twenty attempts, and none may seed it.
    for i in 0..20u64 {
        // Counters above every token the client proposed so far (it proposes one above the
        // largest it saw), so that no proposal is taken and each attempt needs the write-back.
        for k in 1..3 {
            let high = (9_000_000_000_000_000_000 + i * 10).to_string();
            nodes.node(k).cli(&["SET", COUNTER, &high]).unwrap();
        }
        let err = refused.try_acquire("S").await.unwrap_err();
        assert_eq!(err.kind(), fencelock::ErrorKind::Unavailable, "{err}");
        // The failed attempt's release is done when try_acquire returns.
        assert_eq!(
            get(nodes.node(0), COUNTER),
            None,
            "n0 was seeded by a failed attempt"
        );
    }
}

/// The one-round path (issue 18): on nodes that have their counters, a fenced acquisition whose
/// proposal a quorum took is issued without the write-back. A user that may run every script but
/// the write-back still gets tokens, each above the last; before the one-round path every such
/// acquisition failed (the write-back is refused on every node).
#[tokio::test]
async fn on_warm_nodes_a_fenced_acquisition_needs_no_write_back() {
    let nodes = RedisNodes::start(3).unwrap();
    // Warm up: the first grant on fresh nodes starts an epoch, which needs the write-back.
    let warm = fenced(&nodes).acquire("W").await.unwrap();
    let mut last = warm.fencing_token().unwrap().value();
    warm.release().await.unwrap();
    let mut urls = Vec::new();
    for node in nodes.iter() {
        let mut rule: Vec<String> = ["ACL", "SETUSER", "nowb", "on", ">pw", "~*", "&*"]
            .iter()
            .chain(&["+@all", "-evalsha", "-eval"])
            .map(|s| s.to_string())
            .collect();
        for src in [
            fencelock::protocol::ACQUIRE_FENCED_SCRIPT,
            fencelock::protocol::RELEASE_SCRIPT,
        ] {
            let sha = node.cli(&["SCRIPT", "LOAD", src]).unwrap();
            rule.push(format!("+evalsha|{sha}"));
        }
        let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
        node.cli(&rule).unwrap();
        urls.push(format!("redis://nowb:pw@127.0.0.1:{}", node.port()));
    }
    let client = Client::new(
        Config::new(&urls)
            .with_fencing(true)
            .with_quarantine(false)
            .with_node_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    for _ in 0..20 {
        let lock = client.try_acquire("W").await.unwrap();
        let token = lock.fencing_token().unwrap().value();
        assert!(token > last, "token {token} after {last}");
        last = token;
        lock.release().await.unwrap();
    }
    // Every node took the last proposal (the third with its request after the round returned).
    client.close().await;
    for node in nodes.iter() {
        assert_eq!(get(node, COUNTER), Some(last.to_string()));
    }
}
