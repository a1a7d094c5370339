//! The waiting line of a contended lock, on real nodes: waiters are served in the order they
//! started waiting, each woken by its turn (not by polling), a client that asks again right after
//! releasing goes to the end of the line, and waiters that die or give up leave it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{Client, Config, RetryPolicy};
use fencelock_testkit::RedisNodes;

/// Retry delays so long that only a wake-up can explain a prompt grant.
fn patient(nodes: &RedisNodes, fencing: bool) -> Config {
    Config::new(nodes.urls())
        .with_ttl(Duration::from_secs(30))
        .with_node_timeout(Duration::from_millis(500))
        .with_quarantine(false)
        .with_fencing(fencing)
        .with_retry(
            RetryPolicy::new()
                .with_wait(Duration::from_secs(120))
                .with_base_delay(Duration::from_secs(30))
                .with_max_delay(Duration::from_secs(30)),
        )
}

/// A client that retries every 100 ms to `max_delay_ms` (for cases where polling must find what
/// no wake-up announces).
fn polling(nodes: &RedisNodes, max_delay_ms: u64) -> Client {
    let retry = RetryPolicy::new()
        .with_wait(Duration::from_secs(60))
        .with_base_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_millis(max_delay_ms));
    Client::new(patient(nodes, false).with_retry(retry)).unwrap()
}

/// How many waiters are in the line of `resource` on each node.
fn line_lengths(nodes: &RedisNodes, resource: &str) -> Vec<u64> {
    (0..nodes.len())
        .map(|i| {
            let out = nodes
                .node(i)
                .cli(&["ZCARD", &format!("fencelock:queue:{resource}")])
                .unwrap();
            out.trim().parse().unwrap()
        })
        .collect()
}

/// Waits (generously) until every node has `n` waiters in the line of `resource`.
async fn until_line_is(nodes: &RedisNodes, resource: &str, n: u64) {
    until_line_is_within(nodes, resource, n, Duration::from_secs(20)).await;
}

async fn until_line_is_within(nodes: &RedisNodes, resource: &str, n: u64, limit: Duration) {
    let started = Instant::now();
    loop {
        let lengths = line_lengths(nodes, resource);
        if lengths.iter().all(|l| *l == n) {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "line of {resource} did not reach {n} in {limit:?}: {lengths:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn served_in_order(fencing: bool) {
    let nodes = RedisNodes::start(3).unwrap();
    let holder = Client::new(patient(&nodes, fencing)).unwrap();
    let lock = holder.try_acquire("line").await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let client = Client::new(patient(&nodes, fencing)).unwrap();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let l = client.acquire("line").await.unwrap();
            order
                .lock()
                .unwrap()
                .push((i, l.fencing_token().map(|t| t.value())));
            tokio::time::sleep(Duration::from_millis(20)).await;
            l.release().await.unwrap();
        }));
        // The next waiter starts once this one stands in line on every node.
        until_line_is(&nodes, "line", i + 1).await;
    }
    let released = Instant::now();
    lock.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    // With 30 s retry delays, four hand-overs in well under 30 s were all wake-ups.
    assert!(
        released.elapsed() < Duration::from_secs(15),
        "the line took {:?}",
        released.elapsed()
    );
    let order = order.lock().unwrap().clone();
    let who: Vec<u64> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(who, [0, 1, 2, 3], "served out of line");
    if fencing {
        let tokens: Vec<u64> = order.iter().map(|(_, t)| t.unwrap()).collect();
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens {tokens:?}");
    }
    assert_eq!(line_lengths(&nodes, "line"), [0, 0, 0]);
}

#[tokio::test]
async fn waiters_are_served_in_the_order_they_started_waiting() {
    served_in_order(false).await;
}

#[tokio::test]
async fn fenced_waiters_are_served_in_order_with_increasing_tokens() {
    served_in_order(true).await;
}

/// Puts a waiter `who` first in line for `resource` on every node, with a lease of `lease_ms`
/// on the node's clock, as a waiter in another process would stand.
fn stand_in_line(nodes: &RedisNodes, resource: &str, who: &str, lease_ms: u64) {
    for i in 0..nodes.len() {
        let node = nodes.node(i);
        let time = node.cli(&["TIME"]).unwrap();
        let secs: u64 = time.lines().next().unwrap().trim().parse().unwrap();
        let lease = (secs * 1000 + lease_ms).to_string();
        node.cli(&["ZADD", &format!("fencelock:queue:{resource}"), "1", who])
            .unwrap();
        node.cli(&[
            "ZADD",
            &format!("fencelock:queue-lease:{resource}"),
            &lease,
            who,
        ])
        .unwrap();
        // The mark that tells a release someone waits.
        let mark = format!("fencelock:waiting:{resource}");
        let mark_ms = (lease_ms * 4).to_string();
        node.cli(&["SET", &mark, "1", "PX", &mark_ms]).unwrap();
    }
}

/// A process listening on `channel` on every node (a waiter of another client); killed on drop.
struct Listener(Vec<std::process::Child>);

impl Listener {
    fn start(nodes: &RedisNodes, channel: &str) -> Listener {
        let children = (0..nodes.len())
            .map(|i| {
                std::process::Command::new("redis-cli")
                    .args([
                        "-p",
                        &nodes.node(i).port().to_string(),
                        "SUBSCRIBE",
                        channel,
                    ])
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        Listener(children)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test]
async fn a_client_asking_again_right_after_its_release_goes_behind_the_waiter() {
    let nodes = RedisNodes::start(3).unwrap();
    let a = polling(&nodes, 200);
    let first = a.try_acquire("again").await.unwrap();
    // Another process waits first in line (lease 3 s) and listens for its turn.
    let _listening = Listener::start(&nodes, "fencelock:turn:other");
    // Listening on every node: the release returns once a majority deleted the key, and the
    // nodes that answered first must report the wake-up too (on a loaded machine one
    // redis-cli can subscribe well after another).
    let started = Instant::now();
    for i in 0..nodes.len() {
        loop {
            let subs = nodes
                .node(i)
                .cli(&["PUBSUB", "NUMSUB", "fencelock:turn:other"])
                .unwrap();
            if subs.lines().nth(1).map(str::trim) == Some("1") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no listener on node {i}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    stand_in_line(&nodes, "again", "other.1", 3_000);
    // The release reaches the waiter, so asking again at once (as a loop over work items does)
    // joins the end of the line instead of taking the free key: A is served only once the
    // other waiter has left the line (here: its lease lapsed, as it never came).
    first.release().await.unwrap();
    let again = a.acquire("again").await.unwrap();
    // A node grants A only once the waiter's lease lapsed there, and its grant drops the lapsed
    // waiter from the line; the grant needs a majority, so the waiter is gone from a majority at
    // least. (A node that did not grant may still list it: the waiter registered on the nodes
    // one after another, so its lease there lapses a little later.) Had A been served ahead of
    // the waiter, the waiter would still be in line on the majority that granted.
    let mut in_line = Vec::new();
    for i in 0..nodes.len() {
        let score = nodes
            .node(i)
            .cli(&["ZSCORE", "fencelock:queue:again", "other.1"])
            .unwrap();
        if !matches!(score.trim(), "" | "(nil)") {
            in_line.push(i);
        }
    }
    assert!(
        in_line.len() < 2,
        "A was served ahead of the waiter, still in line on nodes {in_line:?}"
    );
    again.release().await.unwrap();
}

#[tokio::test]
async fn a_waiter_that_gives_up_or_is_cancelled_leaves_the_line() {
    let nodes = RedisNodes::start(3).unwrap();
    let holder = Client::new(patient(&nodes, false)).unwrap();
    let lock = holder.try_acquire("leave").await.unwrap();

    // Cancelled: the acquire future is dropped while it waits.
    let cancelled = Client::new(patient(&nodes, false)).unwrap();
    let task = tokio::spawn(async move { cancelled.acquire("leave").await.map(|_| ()) });
    until_line_is(&nodes, "leave", 1).await;
    task.abort();
    until_line_is(&nodes, "leave", 0).await;

    // Gave up: the wait ran out.
    let impatient = Client::new(patient(&nodes, false)).unwrap();
    let policy = RetryPolicy::new()
        .with_wait(Duration::from_millis(1_500))
        .with_base_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_millis(200));
    let err = impatient
        .acquire_with("leave", &policy)
        .await
        .expect_err("the lock is held");
    assert_eq!(err.kind(), fencelock::ErrorKind::Timeout);
    // Well before the line's own expiry (4 leases, 6.4 s here) could empty it.
    until_line_is_within(&nodes, "leave", 0, Duration::from_secs(5)).await;
    lock.release().await.unwrap();
}

#[tokio::test]
async fn a_dead_waiter_holds_up_the_line_only_until_its_lease_runs_out() {
    let nodes = RedisNodes::start(3).unwrap();
    let holder = Client::new(patient(&nodes, false)).unwrap();
    let lock = holder.try_acquire("dead").await.unwrap();
    // A waiter that crashed: first in line, with a lease running out in 1.5 s on every node's
    // clock, and nobody to wake on its turn channel.
    stand_in_line(&nodes, "dead", "crashed.1", 1_500);
    let waiter = polling(&nodes, 300);
    let task = tokio::spawn(async move {
        let got = waiter.acquire("dead").await.unwrap();
        got.release().await.unwrap();
    });
    until_line_is(&nodes, "dead", 2).await;
    // The release names the crashed waiter, which never comes: the live one is served once
    // the lease has lapsed (polling at its retry delay finds it), not never.
    lock.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the live waiter was never served")
        .unwrap();
    assert_eq!(line_lengths(&nodes, "dead"), [0, 0, 0]);
}

#[tokio::test]
async fn a_wait_split_over_several_calls_keeps_its_place_in_line() {
    let nodes = RedisNodes::start(3).unwrap();
    let holder = Client::new(patient(&nodes, false)).unwrap();
    let lock = holder.try_acquire("split").await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));

    // The first waiter waits in short calls, as a command that reports progress between them
    // does; each call resumes the wait that began here.
    let first = Client::new(patient(&nodes, false)).unwrap();
    let mut waiter = first.waiter(&["split"]).unwrap();
    let first_order = order.clone();
    let chunked = tokio::spawn(async move {
        let policy = RetryPolicy::new()
            .with_wait(Duration::from_millis(300))
            .with_base_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_millis(100));
        let mut calls = 0;
        let l = loop {
            calls += 1;
            match waiter.acquire(&policy).await {
                Ok(l) => break l,
                Err(e) => assert_eq!(e.kind(), fencelock::ErrorKind::Timeout, "{e}"),
            }
        };
        first_order.lock().unwrap().push("chunked");
        l.release().await.unwrap();
        calls
    });
    until_line_is(&nodes, "split", 1).await;
    // Several of its calls have timed out by now.
    tokio::time::sleep(Duration::from_millis(1_000)).await;

    // The second waiter starts later, with one long call.
    let second = Client::new(patient(&nodes, false)).unwrap();
    let second_order = order.clone();
    let long = tokio::spawn(async move {
        let l = second.acquire("split").await.unwrap();
        second_order.lock().unwrap().push("long");
        l.release().await.unwrap();
    });
    until_line_is(&nodes, "split", 2).await;
    // Let the first waiter's current call time out and the next begin: that call began after
    // the second waiter's wait.
    tokio::time::sleep(Duration::from_millis(800)).await;
    lock.release().await.unwrap();
    let calls = chunked.await.unwrap();
    long.await.unwrap();
    assert!(calls > 1, "the wait was not split ({calls} call)");
    // Without its place kept, each new call of the first waiter would queue behind the second.
    assert_eq!(*order.lock().unwrap(), ["chunked", "long"]);
    assert_eq!(line_lengths(&nodes, "split"), [0, 0, 0]);
}

/// The TTL left on `key` of node 0, in ms (-1: none, -2: no such key).
fn pttl(nodes: &RedisNodes, key: &str) -> i64 {
    nodes
        .node(0)
        .cli(&["PTTL", key])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The lease deadline of the only waiter in the line of `resource` on node 0, if it has one.
fn lease_of_the_waiter(nodes: &RedisNodes, resource: &str) -> Option<String> {
    let leases = format!("fencelock:queue-lease:{resource}");
    let out = nodes
        .node(0)
        .cli(&["ZRANGE", &leases, "0", "0", "WITHSCORES"])
        .unwrap();
    out.lines().nth(1).map(|s| s.trim().to_string())
}

/// Waits (generously) until the waiter renewed its registration: its lease deadline moved.
async fn until_renewed(nodes: &RedisNodes, resource: &str) {
    let before = lease_of_the_waiter(nodes, resource);
    let started = Instant::now();
    while lease_of_the_waiter(nodes, resource) == before
        || lease_of_the_waiter(nodes, resource).is_none()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the waiter did not renew its registration"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every write to the line's keys (the queue, the leases, the wait mark) leaves a TTL, so that a
/// line nobody renews goes away: also a renewal, also one that finds a line key without a TTL,
/// and one that re-creates the leases key after it expired (issue 13, finding 9).
#[tokio::test]
async fn every_key_of_the_line_keeps_a_ttl() {
    let nodes = RedisNodes::start(1).unwrap();
    let holder = Client::new(patient(&nodes, false)).unwrap();
    let lock = holder.try_acquire("kept").await.unwrap();
    let waiter = polling(&nodes, 100);
    let task = tokio::spawn(async move { waiter.acquire("kept").await.unwrap().release().await });
    until_line_is_within(&nodes, "kept", 1, Duration::from_secs(20)).await;
    let keys = [
        "fencelock:queue:kept",
        "fencelock:queue-lease:kept",
        "fencelock:waiting:kept",
    ];
    let all_kept = |when: &str| {
        for key in keys {
            let ttl = pttl(&nodes, key);
            assert!(ttl > 0, "{when}: {key} has PTTL {ttl}");
        }
    };
    until_renewed(&nodes, "kept").await;
    all_kept("after registration and a renewal");

    // A line key without a TTL (left by an older version, or PERSIST) gets one at the next
    // renewal.
    nodes.node(0).cli(&["PERSIST", keys[0]]).unwrap();
    nodes.node(0).cli(&["PERSIST", keys[1]]).unwrap();
    until_renewed(&nodes, "kept").await;
    all_kept("after a renewal of a line without TTL");

    // The leases key expires on its own; the next renewal re-creates it, with a TTL.
    nodes.node(0).cli(&["PEXPIRE", keys[1], "1"]).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    until_renewed(&nodes, "kept").await;
    all_kept("after the leases key expired and was re-created");

    lock.release().await.unwrap();
    task.await.unwrap().unwrap();
}
