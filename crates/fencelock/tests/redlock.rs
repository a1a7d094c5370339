//! The core lock against real redis-server processes: the article's tests and the failure cases
//! of the Redlock description.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::{Client, Config, Error, ErrorKind, RetryPolicy, VoteOutcome};
use fencelock_testkit::{RedisNode, RedisNodes};

/// Tests that are not about timeouts use a node timeout that a loaded 2-core machine meets.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);

fn client(nodes: &RedisNodes) -> Client {
    Client::new(
        Config::new(nodes.urls())
            .with_quarantine(false)
            .with_node_timeout(NODE_TIMEOUT),
    )
    .unwrap()
}

fn get(node: &RedisNode, key: &str) -> String {
    node.cli(&["GET", key]).unwrap()
}

#[tokio::test]
async fn second_client_cannot_acquire_while_first_holds_then_can_after_release() {
    let nodes = RedisNodes::start(3).unwrap();
    let a = client(&nodes);
    let b = client(&nodes);

    let lock = a.try_acquire("lock:order:42").await.unwrap();
    assert!(lock.remaining() < Config::DEFAULT_TTL);
    // The round returns at quorum; the third node may still be answering.
    assert!(lock.votes().granted() >= 2);
    let err = b.try_acquire("lock:order:42").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");

    lock.release().await.unwrap();
    let lock_b = b.try_acquire("lock:order:42").await.unwrap();
    lock_b.release().await.unwrap();
}

/// The same on one node (an efficiency lock): that path is a bare `SET NX PX`, not a script, so
/// it needs its own test (the `acquire-without-nx` mutant of scripts/mutants.sh survives every
/// test on three nodes).
#[tokio::test]
async fn on_one_node_a_second_client_cannot_acquire_while_the_first_holds() {
    let nodes = RedisNodes::start(1).unwrap();
    let a = client(&nodes);
    let b = client(&nodes);
    let lock = a.try_acquire("lock:single").await.unwrap();
    let err = b.try_acquire("lock:single").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    assert_eq!(get(nodes.node(0), "lock:single"), lock.owner());
    lock.release().await.unwrap();
    b.try_acquire("lock:single")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn still_acquires_with_one_of_three_nodes_stopped() {
    let nodes = RedisNodes::start(3).unwrap();
    nodes.node(2).stop().unwrap();
    let c = client(&nodes);
    let lock = c.try_acquire("lock:order:99").await.unwrap();
    assert_eq!(lock.votes().granted(), 2);
    lock.release().await.unwrap();
}

#[tokio::test]
async fn five_nodes_two_down_acquires_three_down_is_unavailable_and_leaves_nothing() {
    let nodes = RedisNodes::start(5).unwrap();
    nodes.node(3).kill().unwrap();
    nodes.node(4).kill().unwrap();
    let c = client(&nodes);
    let lock = c.try_acquire("r").await.unwrap();
    assert_eq!(lock.votes().granted(), 3);
    lock.release().await.unwrap();

    nodes.node(2).kill().unwrap();
    let err = c.try_acquire("r").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(matches!(err, Error::Unavailable { ref votes, .. } if votes.failed() == 3));
    for i in 0..2 {
        assert_eq!(get(nodes.node(i), "r"), "(nil)", "node {i} kept our key");
    }
}

#[tokio::test]
async fn paused_nodes_cost_about_one_node_timeout_not_the_ttl() {
    let nodes = RedisNodes::start(5).unwrap();
    // Long enough that a loaded machine's answers come in time; the bounds below are in node
    // timeouts, so they scale with it.
    let timeout = Duration::from_millis(500);
    let c = Client::new(
        Config::new(nodes.urls())
            .with_ttl(Duration::from_secs(30))
            .with_node_timeout(timeout)
            .with_quarantine(false),
    )
    .unwrap();
    // Warm the connections, so the measurement is about the paused nodes.
    c.try_acquire("warm")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // Two paused nodes: the other three still form a quorum, and the round returns when they
    // answered, without waiting for the paused ones.
    nodes.node(0).pause().unwrap();
    nodes.node(1).pause().unwrap();
    let started = Instant::now();
    let lock = c.try_acquire("p").await.unwrap();
    let took = started.elapsed();
    assert!(took < timeout * 2, "took {took:?}");
    assert_eq!(lock.votes().granted(), 3);
    lock.release().await.unwrap();

    // A third paused node: the attempt fails once the paused nodes' timeout runs out, then
    // releases what it set, which waits one more node timeout for the paused nodes: two node
    // timeouts in all, far sooner than the 30 s TTL. (Waiting for the nodes one after the
    // other, or retrying, would take three or more.)
    nodes.node(2).pause().unwrap();
    let started = Instant::now();
    let err = c.try_acquire("p2").await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        took >= timeout,
        "took {took:?}: did not wait for the paused nodes"
    );
    assert!(
        took < timeout * 3,
        "took {took:?}: more than two node timeouts"
    );
    let timed_out = err
        .votes()
        .unwrap()
        .iter()
        .filter(|v| v.outcome == VoteOutcome::TimedOut)
        .count();
    assert_eq!(timed_out, 3);
    for i in 0..3 {
        nodes.node(i).resume().unwrap();
    }
}

#[tokio::test]
async fn validity_is_below_the_ttl_and_shrinks_with_acquisition_time() {
    let nodes = RedisNodes::start(3).unwrap();
    let ttl = Duration::from_secs(10);
    let c = Client::new(
        Config::new(nodes.urls())
            .with_ttl(ttl)
            .with_node_timeout(Duration::from_secs(3))
            .with_quarantine(false),
    )
    .unwrap();
    let drift = c.config().drift();

    // The deadline is counted from before the request: between `ttl - drift` after the call
    // and `ttl - drift` after the return.
    let before = Instant::now();
    let fast = c.try_acquire("v1").await.unwrap();
    let after = Instant::now();
    let deadline = fast.validity_deadline();
    assert!(
        deadline >= before + (ttl - drift),
        "{:?}",
        deadline - before
    );
    assert!(deadline <= after + (ttl - drift), "{:?}", deadline - after);
    fast.release().await.unwrap();

    // Two of the three nodes stop for a second: a quorum needs one of them, so the acquisition
    // takes about a second, and its validity is a second shorter. (SIGSTOP takes effect before
    // the request is sent, unlike a DEBUG SLEEP sent on another connection, which may not have
    // started yet.)
    for i in 0..2 {
        nodes.node(i).pause().unwrap();
    }
    let before = Instant::now();
    let slow = tokio::spawn({
        let c = c.clone();
        async move { c.try_acquire("v2").await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    for i in 0..2 {
        nodes.node(i).resume().unwrap();
    }
    let slow = slow.await.unwrap().unwrap();
    let took = before.elapsed();
    assert!(took >= Duration::from_secs(1), "took {took:?}");
    let deadline = slow.validity_deadline();
    // Counted from before the request: at most `ttl - drift` after the call, so at least the
    // second the nodes were stopped below a validity counted from the reply.
    assert!(
        deadline <= before + (ttl - drift) + Duration::from_millis(500),
        "validity counted from the reply: deadline {:?} after the call",
        deadline - before
    );
    slow.release().await.unwrap();
}

#[tokio::test]
async fn foreign_keys_on_a_minority_are_left_alone_on_a_majority_mean_contention() {
    let nodes = RedisNodes::start(5).unwrap();
    let c = client(&nodes);
    for i in 0..2 {
        nodes
            .node(i)
            .cli(&["SET", "f", "someone-else", "PX", "60000"])
            .unwrap();
    }
    let lock = c.try_acquire("f").await.unwrap();
    assert_eq!(lock.votes().granted(), 3);
    // (The nodes holding the foreign key may still be answering: the round returns at quorum.)
    lock.release().await.unwrap();
    for i in 0..2 {
        assert_eq!(get(nodes.node(i), "f"), "someone-else");
    }

    nodes
        .node(2)
        .cli(&["SET", "f", "someone-else", "PX", "60000"])
        .unwrap();
    let err = c.try_acquire("f").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    for i in 0..3 {
        assert_eq!(get(nodes.node(i), "f"), "someone-else");
    }
    for i in 3..5 {
        assert_eq!(get(nodes.node(i), "f"), "(nil)", "node {i} kept our key");
    }
}

#[tokio::test]
async fn release_with_a_wrong_token_leaves_the_key() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = client(&nodes);
    let lock = c.try_acquire("w").await.unwrap();
    let token = lock.owner().to_string();
    let err = c.release_by_owner("w", "not-the-owner").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    let err = c.extend_by_owner("w", "not-the-owner").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    for n in nodes.iter() {
        assert_eq!(get(n, "w"), token);
    }
    lock.release().await.unwrap();
    for n in nodes.iter() {
        assert_eq!(get(n, "w"), "(nil)");
    }
}

#[tokio::test]
async fn extend_after_expiry_fails_and_does_not_recreate_the_key() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = Client::new(
        Config::new(nodes.urls())
            .with_ttl(Duration::from_millis(1_000))
            .with_node_timeout(Duration::from_millis(200))
            .with_quarantine(false),
    )
    .unwrap();
    let mut lock = c.try_acquire("e").await.unwrap();
    let token = lock.owner().to_string();
    lock.extend().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let err = lock.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    // The same through the script path, which the local deadline check above short-cuts.
    let err = c.extend_by_owner("e", &token).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    for n in nodes.iter() {
        assert_eq!(get(n, "e"), "(nil)");
    }
    let err = lock.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost);
}

#[tokio::test]
async fn extend_renews_the_ttl_on_the_nodes() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = Client::new(
        Config::new(nodes.urls())
            .with_ttl(Duration::from_millis(1500))
            .with_node_timeout(Duration::from_millis(200))
            .with_quarantine(false),
    )
    .unwrap();
    let mut lock = c.try_acquire("x").await.unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        lock.extend().await.unwrap();
    }
    // 2.4 s after acquisition, past the 1.5 s TTL: the keys are still ours.
    for n in nodes.iter() {
        assert_eq!(get(n, "x"), lock.owner());
    }
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_clients_fifty_sections_each_never_overlap() {
    let nodes = RedisNodes::start(3).unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        // The default 50 ms node timeout is for a calm network; 16 clients on a loaded 2-core
        // machine miss it, and a release that times out is not what this test is about.
        let c = Client::new(
            Config::new(nodes.urls())
                .with_quarantine(false)
                .with_node_timeout(NODE_TIMEOUT)
                .with_retry(
                    RetryPolicy::new()
                        .with_wait(Duration::from_secs(120))
                        .with_base_delay(Duration::from_millis(2))
                        .with_max_delay(Duration::from_millis(20)),
                ),
        )
        .unwrap();
        let (inside, done, overlaps) = (inside.clone(), done.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                let lock = c.acquire("contended").await.unwrap();
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
                lock.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(done.load(Ordering::SeqCst), 800);
}

#[tokio::test]
async fn secrets_never_appear_in_errors() {
    let node = RedisNode::start().unwrap();
    let url = format!("redis://alice:hunter2@127.0.0.1:{}/0", node.port());
    let c = Client::new(Config::new([url])).unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
    let err = c.try_acquire("s").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    assert!(!format!("{err:?}").contains("hunter2"), "{err:?}");
}

#[tokio::test]
async fn bad_input_is_an_error_not_a_panic() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = client(&nodes);
    assert_eq!(
        c.try_acquire("").await.unwrap_err().kind(),
        ErrorKind::InvalidConfig
    );
    // A key of the wrong type at the resource name: someone else's data, never touched.
    for n in nodes.iter() {
        n.cli(&["RPUSH", "list", "a"]).unwrap();
    }
    let err = c.try_acquire("list").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    assert!(c.release_by_owner("list", "t").await.is_err());
    for n in nodes.iter() {
        assert_eq!(n.cli(&["LRANGE", "list", "0", "-1"]).unwrap(), "a");
    }
    let err = Client::new(Config::new([
        "redis://127.0.0.1:1/0",
        "redis://127.0.0.1:1/0",
    ]))
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
}

#[test]
fn handles_and_futures_are_send() {
    fn is_send<T: Send>(_: &T) {}
    fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<Client>();
    is_send_sync::<fencelock::Lock>();
    is_send_sync::<Error>();
    let c = Client::new(Config::new(["redis://127.0.0.1:1/0"])).unwrap();
    is_send(&c.try_acquire("r"));
    is_send(&c.acquire("r"));
}

/// A node that accepts connections and never answers (a hung host behind a live port): counts
/// the connections it was offered.
fn black_hole() -> (String, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/0", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (url, accepted)
}

#[tokio::test]
async fn requests_that_wait_for_a_connection_share_one_attempt() {
    let (url, accepted) = black_hole();
    // The set-up gives up after 300 ms; the requests would wait 3 s.
    let c = Client::new(
        Config::new([url])
            .with_connect_timeout(Duration::from_millis(300))
            .with_node_timeout(Duration::from_secs(3)),
    )
    .unwrap();
    let attempts = (0..5).map(|i| {
        let c = c.clone();
        async move { c.try_acquire(&format!("hole:{i}")).await }
    });
    for result in futures_util::future::join_all(attempts).await {
        let err = result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        // The vote says what happened and what to try.
        assert!(err.to_string().contains("connect timeout"), "{err}");
    }
    // One attempt served the five acquisitions, and one the five releases that follow a
    // failure; without sharing, each waiter tried again in turn when an attempt failed.
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}
