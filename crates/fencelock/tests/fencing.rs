//! Fencing tokens on real nodes: strictly increasing from one holder to the next, also across a
//! node that is killed and restarted empty.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock::{protocol, Client, Config, RetryPolicy};
use fencelock_testkit::RedisNodes;

fn fenced(nodes: &RedisNodes) -> Client {
    Client::new(
        Config::new(nodes.urls())
            .with_fencing(true)
            .with_quarantine(false)
            // Short, so that the seed wait (a TTL after a node is found without its counter)
            // passes within the test.
            .with_ttl(Duration::from_secs(2))
            .with_node_timeout(Duration::from_millis(500))
            .with_retry(
                RetryPolicy::new()
                    .with_wait(Duration::from_secs(120))
                    .with_base_delay(Duration::from_millis(2))
                    .with_max_delay(Duration::from_millis(20)),
            ),
    )
    .unwrap()
}

#[tokio::test]
async fn tokens_increase_across_1000_acquisitions_with_a_node_restarted_empty() {
    let nodes = RedisNodes::start(5).unwrap();
    let clients = [fenced(&nodes), fenced(&nodes)];
    let mut last = 0u64;
    let mut tokens = Vec::new();
    for i in 0..1000 {
        if i == 300 {
            nodes.node(2).kill().unwrap();
        }
        if i == 600 {
            // Restarted without persistence: its counter is gone.
            nodes.node(2).restart().unwrap();
            assert_eq!(
                nodes
                    .node(2)
                    .cli(&["GET", protocol::FENCE_COUNTER_KEY])
                    .unwrap(),
                "(nil)"
            );
        }
        let lock = clients[i % 2].acquire("mono").await.unwrap();
        let t = lock
            .fencing_token()
            .expect("fencing mode gives a token")
            .value();
        assert!(t > last, "acquisition {i}: token {t} after {last}");
        last = t;
        tokens.push(t);
        lock.release().await.unwrap();
    }
    // The restarted node takes a seed only a seed wait (the seeding client's TTL) after it was
    // first found without its counter (issue 27, item 3): past it, the next grants seed it.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut seeded = None;
    for i in 0..200 {
        let lock = clients[i % 2].acquire("mono").await.unwrap();
        let t = lock
            .fencing_token()
            .expect("fencing mode gives a token")
            .value();
        assert!(t > last, "after the seed wait: token {t} after {last}");
        last = t;
        tokens.push(t);
        lock.release().await.unwrap();
        let read = nodes
            .node(2)
            .cli(&["GET", protocol::FENCE_COUNTER_KEY])
            .unwrap();
        if read != "(nil)" {
            seeded = Some(read);
            break;
        }
    }
    // Seeded (or written back to) after the wait: its counter is exactly a token a holder got
    // after the restart.
    let c: u64 = seeded
        .expect("the restarted node was never seeded after the seed wait")
        .parse()
        .unwrap();
    assert!(
        tokens[600..].contains(&c),
        "counter {c} on the restarted node is no token issued since the restart"
    );
    // And every node's counter is the last token of a grant it took part in: none is ahead.
    for n in nodes.iter() {
        let c: u64 = n
            .cli(&["GET", protocol::FENCE_COUNTER_KEY])
            .unwrap()
            .parse()
            .unwrap();
        assert!(tokens.contains(&c), "counter {c} is no fencing token");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holders_get_distinct_increasing_tokens() {
    let nodes = RedisNodes::start(3).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let c = fenced(&nodes);
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..30 {
                let lock = c.acquire("shared").await.unwrap();
                order
                    .lock()
                    .unwrap()
                    .push(lock.fencing_token().unwrap().value());
                lock.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap();
    assert_eq!(order.len(), 180);
    // Pushed inside the critical section, so this is the order of the holders.
    for w in order.windows(2) {
        assert!(w[1] > w[0], "{} then {}", w[0], w[1]);
    }
}

#[tokio::test]
async fn efficiency_locks_carry_no_token_and_touch_no_counter() {
    let nodes = RedisNodes::start(1).unwrap();
    let c = Client::new(Config::new(nodes.urls())).unwrap();
    let lock = c.try_acquire("plain").await.unwrap();
    assert_eq!(lock.fencing_token().map(|t| t.value()), None);
    lock.release().await.unwrap();
    assert_eq!(
        nodes
            .node(0)
            .cli(&["EXISTS", protocol::FENCE_COUNTER_KEY])
            .unwrap(),
        "0"
    );
}

#[tokio::test]
async fn fenced_and_plain_redlock_clients_exclude_each_other() {
    let nodes = RedisNodes::start(3).unwrap();
    let plain = Client::new(
        Config::new(nodes.urls())
            .with_quarantine(false)
            .with_node_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let f = fenced(&nodes);
    let lock = plain.try_acquire("mixed").await.unwrap();
    assert!(f.try_acquire("mixed").await.is_err());
    lock.release().await.unwrap();
    // A release returns at a quorum; the last node's delete may still be on its way, and a
    // fenced client on nodes that never had a counter must hear every node (a node that
    // answers "held" leaves it unable to tell a fresh cluster from a forgotten counter, and it
    // fails closed). CI saw exactly that once: wait for the straggler.
    wait_until_gone(&nodes, "mixed").await;
    let lock = f.try_acquire("mixed").await.unwrap();
    assert!(plain.try_acquire("mixed").await.is_err());
    // A third-party Redlock client sees a plain SET NX key holding a random value.
    assert_eq!(nodes.node(0).cli(&["GET", "mixed"]).unwrap(), lock.owner());
    lock.release().await.unwrap();
}

/// Waits (generously) until no node holds `key`.
async fn wait_until_gone(nodes: &RedisNodes, key: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for i in 0..nodes.len() {
        while nodes.node(i).cli(&["EXISTS", key]).unwrap() != "0" {
            assert!(
                std::time::Instant::now() < deadline,
                "node {i} still holds {key} 30 s after the release"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
