//! Long work under a lock, on real nodes: auto-extension, the lost signal, wake-up on release,
//! several resources at once, and the restart quarantine.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{AutoExtend, Client, Config, ErrorKind, RetryPolicy, VoteOutcome};
use fencelock_testkit::RedisNodes;

/// A node timeout a loaded 2-core machine meets, but short enough for short TTLs.
fn config(nodes: &RedisNodes, ttl_ms: u64) -> Config {
    Config::new(nodes.urls())
        .with_ttl(Duration::from_millis(ttl_ms))
        .with_node_timeout(Duration::from_millis(ttl_ms / 4))
        .with_quarantine(false)
}

#[tokio::test]
async fn a_job_of_ten_ttls_keeps_its_lock_while_a_minority_dies() {
    let nodes = RedisNodes::start(5).unwrap();
    // A 1 s TTL (250 ms node timeout): short enough for ten TTLs in a test, long enough that a
    // loaded machine does not miss an extension.
    let c = Client::new(config(&nodes, 1_000)).unwrap();
    let other = Client::new(config(&nodes, 1_000)).unwrap();
    let guard = c
        .try_acquire("job")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    let lost = guard.lost();
    let started = Instant::now();
    let mut checks = 0;
    while started.elapsed() < Duration::from_millis(10_000) {
        if checks == 10 {
            nodes.node(0).kill().unwrap();
            nodes.node(1).kill().unwrap();
        }
        // Held by another client on a majority, with or without two dead nodes: contention,
        // never "unavailable" (the caller would wait for nodes to come back instead of a holder).
        let err = other.try_acquire("job").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contention, "check {checks}: {err}");
        assert!(!lost.is_fired(), "lost after {:?}", started.elapsed());
        checks += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(guard.remaining() > Duration::ZERO);
    guard.release().await.unwrap();
    other
        .try_acquire("job")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn stopping_a_majority_fires_the_lost_signal_before_the_deadline() {
    let nodes = RedisNodes::start(5).unwrap();
    let c = Client::new(config(&nodes, 2_000)).unwrap();
    let guard = c
        .try_acquire("maj")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..3 {
        nodes.node(i).kill().unwrap();
    }
    let deadline = guard.validity_deadline();
    tokio::time::timeout(Duration::from_secs(10), guard.lost().fired())
        .await
        .expect("the lost signal must fire");
    assert!(
        Instant::now() < deadline,
        "fired after the validity deadline"
    );
    assert_eq!(guard.release().await.unwrap_err().kind(), ErrorKind::Lost);
}

/// Two of three nodes refuse the extension script for a while (an ACL change: every call
/// fails at once with NOPERM, as a node that is restarting refuses connections), shorter than
/// the validity: the engine retries within the validity left and the lock survives, extended
/// again once the nodes take the script back. Before the one extension rule, the first batch
/// without a quorum fired the lost signal.
#[tokio::test]
async fn a_passing_failure_of_a_majority_is_retried_within_the_validity() {
    let nodes = RedisNodes::start(3).unwrap();
    let mut urls = Vec::new();
    for node in nodes.iter() {
        node.cli(&["ACL", "SETUSER", "ext", "on", ">pw", "~*", "&*", "+@all"])
            .unwrap();
        urls.push(format!("redis://ext:pw@127.0.0.1:{}", node.port()));
    }
    let c = Client::new(
        Config::new(&urls)
            .with_ttl(Duration::from_millis(3_000))
            .with_node_timeout(Duration::from_millis(500))
            .with_quarantine(false),
    )
    .unwrap();
    let guard = c
        .try_acquire("passing")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new().with_interval(Duration::from_millis(300)));
    let mut extensions = guard.extensions();
    for i in 1..3 {
        nodes
            .node(i)
            .cli(&["ACL", "SETUSER", "ext", "-evalsha", "-eval"])
            .unwrap();
    }
    // Wait until an attempt has failed, then give the script back after a while.
    let failing = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let state = extensions.changed().await.expect("the guard is alive");
            if let Some(why) = state.failing() {
                return why.to_string();
            }
        }
    })
    .await
    .expect("an extension must fail while two nodes refuse the script");
    // Why it fails: the refusing nodes' ACL error. (How many nodes extended is not fixed: once
    // two refused, the round is decided and the third node's answer is not waited for.)
    assert!(
        failing.contains("of 3 nodes, not held on 0, quorum 2"),
        "{failing}"
    );
    assert!(failing.contains("NOPERM"), "{failing}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!guard.is_lost(), "lost: {:?}", guard.lost().cause());
    let before = guard.validity_deadline();
    for i in 1..3 {
        nodes
            .node(i)
            .cli(&["ACL", "SETUSER", "ext", "+evalsha", "+eval"])
            .unwrap();
    }
    tokio::time::timeout(Duration::from_secs(5), async {
        while guard.validity_deadline() <= before {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("an extension must succeed once the nodes take the script back");
    assert!(!guard.is_lost());
    assert_eq!(guard.extensions().latest().failing(), None);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_hanging_extension_still_fires_the_lost_signal_in_time() {
    let nodes = RedisNodes::start(3).unwrap();
    // A node timeout longer than the safety margin: the extension hangs past the point where
    // the signal must fire.
    let c =
        Client::new(config(&nodes, 2_000).with_node_timeout(Duration::from_millis(1_500))).unwrap();
    let guard = c
        .try_acquire("hang")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..3 {
        nodes.node(i).pause().unwrap();
    }
    let deadline = guard.validity_deadline();
    tokio::time::timeout(Duration::from_secs(10), guard.lost().fired())
        .await
        .expect("the lost signal must fire");
    let now = Instant::now();
    assert!(
        now < deadline,
        "fired {:?} after the deadline",
        now - deadline
    );
    for i in 0..3 {
        nodes.node(i).resume().unwrap();
    }
    drop(guard);
}

#[tokio::test]
async fn with_lock_runs_the_work_and_releases() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = Client::new(config(&nodes, 1_000)).unwrap();
    let value = c
        .with_lock("scoped", async |lock| {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            assert!(!lock.is_lost());
            7
        })
        .await
        .unwrap();
    assert_eq!(value, 7);
    for n in nodes.iter() {
        assert_eq!(n.cli(&["EXISTS", "scoped"]).unwrap(), "0");
    }
}

#[tokio::test]
async fn with_lock_reports_a_lost_lock_and_stops_the_work() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = Client::new(config(&nodes, 900)).unwrap();
    let finished = Arc::new(AtomicUsize::new(0));
    let f = finished.clone();
    let n = &nodes;
    let result = c
        .with_lock("scoped-lost", async move |_lost| {
            n.node(0).kill().unwrap();
            n.node(1).kill().unwrap();
            tokio::time::sleep(Duration::from_secs(20)).await;
            f.fetch_add(1, Ordering::SeqCst);
        })
        .await;
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the work ran past the loss"
    );
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_not_by_its_retry_delay() {
    let nodes = RedisNodes::start(3).unwrap();
    let holder = Client::new(config(&nodes, 10_000)).unwrap();
    let waiter = Client::new(
        config(&nodes, 10_000).with_retry(
            RetryPolicy::new()
                .with_wait(Duration::from_secs(60))
                .with_base_delay(Duration::from_secs(20))
                .with_max_delay(Duration::from_secs(20)),
        ),
    )
    .unwrap();
    let lock = holder.try_acquire("handover").await.unwrap();
    let wait = tokio::spawn(async move {
        let l = waiter.acquire("handover").await.unwrap();
        let at = Instant::now();
        l.release().await.unwrap();
        at
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    lock.release().await.unwrap();
    let got = wait.await.unwrap();
    // Polling alone would wait at least 10 s (half the 20 s delay).
    assert!(
        got - released < Duration::from_secs(5),
        "handed over after {:?}",
        got - released
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_multi_resource_requests_never_overlap() {
    let nodes = RedisNodes::start(3).unwrap();
    let names = ["a", "b", "c", "d", "e"];
    let holders: Arc<Mutex<HashMap<&str, usize>>> = Arc::default();
    let overlaps = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for w in 0..8usize {
        let c = Client::new(
            config(&nodes, 5_000).with_retry(
                RetryPolicy::new()
                    .with_wait(Duration::from_secs(120))
                    .with_base_delay(Duration::from_millis(2))
                    .with_max_delay(Duration::from_millis(20)),
            ),
        )
        .unwrap();
        let (holders, overlaps, done) = (holders.clone(), overlaps.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(w as u64);
            for _ in 0..25 {
                let mut set: Vec<&str> = names.iter().copied().filter(|_| rng.bool()).collect();
                if set.is_empty() {
                    set.push(names[rng.usize(..names.len())]);
                }
                let lock = c.acquire_many(&set).await.unwrap();
                {
                    let mut h = holders.lock().unwrap();
                    for r in &set {
                        if h.insert(r, w).is_some() {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                tokio::task::yield_now().await;
                {
                    let mut h = holders.lock().unwrap();
                    for r in &set {
                        h.remove(r);
                    }
                }
                lock.release().await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(done.load(Ordering::SeqCst), 200);
}

#[tokio::test]
async fn a_multi_resource_lock_is_all_or_nothing() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = Client::new(config(&nodes, 5_000)).unwrap();
    let ab = c.try_acquire_many(&["x", "y"]).await.unwrap();
    // Another client: this one's own second request is refused before any I/O (not
    // reentrant, tests/reentrancy.rs), and the nodes' all-or-nothing is what is tested here.
    let other = Client::new(config(&nodes, 5_000)).unwrap();
    let err = other.try_acquire_many(&["y", "z"]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention);
    for n in nodes.iter() {
        assert_eq!(n.cli(&["EXISTS", "z"]).unwrap(), "0", "z was set alone");
    }
    ab.release().await.unwrap();
    c.try_acquire_many(&["y", "z"])
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(
        c.try_acquire_many(&["q", "q"]).await.unwrap_err().kind(),
        ErrorKind::InvalidConfig
    );
}

#[tokio::test]
async fn one_client_extends_two_thousand_locks_in_batches() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = Client::new(config(&nodes, 1_500).with_node_timeout(Duration::from_secs(1))).unwrap();
    let mut guards = Vec::new();
    for i in 0..2_000 {
        let lock = c.try_acquire(&format!("held:{i}")).await.unwrap();
        guards.push(lock.auto_extend(AutoExtend::new()));
    }
    let calls_before = evalsha_calls(&nodes);
    let reads_before = reads(&nodes);
    // Three TTLs: every lock needs several extensions to survive.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    assert!(guards.iter().all(|g| !g.is_lost()), "a held lock was lost");
    // The batches announce their TTL (restart quarantine): the entry the acquisitions left
    // 4.5 s ago would have run out by now.
    let until: f64 = nodes
        .node(0)
        .cli(&["ZSCORE", fencelock::protocol::TTLS_KEY, "1500"])
        .unwrap()
        .parse()
        .unwrap_or(0.0);
    let time = nodes.node(0).cli(&["TIME"]).unwrap();
    let now_s: f64 = time.lines().next().unwrap().parse().unwrap();
    assert!(until / 1000.0 > now_s - 1.0, "the TTL announcement ran out");
    let calls = evalsha_calls(&nodes) - calls_before;
    let reads = reads(&nodes) - reads_before;
    assert!(
        calls >= 2_000 * 2,
        "extensions were not sent: {calls} calls"
    );
    // Batched, the extensions of locks that fall due together travel in one pipeline, which the
    // node takes in a read or a few (16 KiB each); one request per lock costs the node a read
    // per extension. A batch holds the locks that fall due within a quarter of the interval
    // (tens to hundreds here, depending on how fast the 2,000 acquisitions went); unbatched
    // requests make about one extension per read. The bound sits between the two.
    assert!(
        reads * 10 <= calls,
        "{calls} extensions arrived in {reads} reads: not batched"
    );
    for g in guards {
        g.release().await.unwrap();
    }
}

fn evalsha_calls(nodes: &RedisNodes) -> u64 {
    let stats = nodes.node(0).cli(&["INFO", "commandstats"]).unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Read events the node processed: one per request that arrives on its own, a few per pipeline.
fn reads(nodes: &RedisNodes) -> u64 {
    let stats = nodes.node(0).cli(&["INFO", "stats"]).unwrap();
    stats
        .lines()
        .find_map(|l| l.trim().strip_prefix("total_reads_processed:"))
        .and_then(|n| n.parse().ok())
        .expect("total_reads_processed in INFO stats (Redis 6 or later)")
}

/// Article section 8, last point: a node restarted empty within the TTL must not count.
async fn restart_scenario(quarantine: bool) -> Result<(), fencelock::Error> {
    let nodes = RedisNodes::start(5).unwrap();
    // New nodes never held a lock: marked so (as `fencelock up` does), they count at once.
    for node in nodes.iter() {
        let marker = fencelock::protocol::new_node_marker(&node.run_id().unwrap());
        node.cli(&["SET", fencelock::protocol::NODE_MARKER_KEY, &marker])
            .unwrap();
    }
    let ttl = Duration::from_millis(1_500);
    // A connects while nodes 4 and 5 are paused, so it holds exactly nodes 1 to 3.
    nodes.node(3).pause().unwrap();
    nodes.node(4).pause().unwrap();
    // (A's own view of the nodes does not matter here; B's does.)
    let a = Client::new(
        Config::new(nodes.urls())
            .with_ttl(Duration::from_secs(10))
            .with_quarantine(false),
    )
    .unwrap();
    // Connections first (a loaded machine may need more than a node timeout to set them up);
    // the paused nodes' attempts stay pending, so nothing is sent to them.
    a.connect().await;
    let lock = a.try_acquire("restart").await.unwrap();
    assert_eq!(lock.votes().granted(), 3);
    // Let A's requests to the paused nodes time out, so they never land there.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Node 3 is killed and comes back empty; 4 and 5 resume.
    nodes.node(2).kill().unwrap();
    nodes.node(2).restart().unwrap();
    nodes.node(3).resume().unwrap();
    nodes.node(4).resume().unwrap();
    for i in 3..5 {
        assert_eq!(nodes.node(i).cli(&["GET", "restart"]).unwrap(), "(nil)");
    }
    let b = Client::new(
        Config::new(nodes.urls())
            .with_ttl(ttl)
            .with_quarantine(quarantine),
    )
    .unwrap();
    b.connect().await;
    let result = b.try_acquire("restart").await.map(|l| {
        assert!(l
            .votes()
            .iter()
            .all(|v| !matches!(v.outcome, VoteOutcome::Excluded(_))));
        std::mem::forget(l);
    });
    drop(lock);
    result
}

#[tokio::test]
async fn quarantine_keeps_a_restarted_empty_node_out_of_the_quorum() {
    let err = restart_scenario(true).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let excluded = err
        .votes()
        .unwrap()
        .iter()
        .filter(|v| matches!(v.outcome, VoteOutcome::Excluded(_)))
        .count();
    assert_eq!(excluded, 1, "{err}");
}

#[tokio::test]
async fn without_quarantine_the_restarted_node_lets_a_second_client_in() {
    restart_scenario(false)
        .await
        .expect("without quarantine B gets the lock A still holds");
}

/// Issue 29 item 3: every node loses its script cache (SCRIPT FLUSH) while a batch of
/// auto-extended locks (two mutex locks and a read lock, extended together in one pipeline per
/// node) is held: the batch meets NOSCRIPT, loads the scripts and goes on; no lock is lost.
#[tokio::test]
async fn a_script_flush_on_every_node_does_not_stop_the_batched_extensions() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = Client::new(config(&nodes, 1_000)).unwrap();
    let settings = AutoExtend::new();
    let a = c
        .try_acquire("flush:a")
        .await
        .unwrap()
        .auto_extend(settings.clone());
    let b = c
        .try_acquire("flush:b")
        .await
        .unwrap()
        .auto_extend(settings.clone());
    let r = c
        .rwlock("flush:r")
        .unwrap()
        .try_read()
        .await
        .unwrap()
        .auto_extend(settings);
    let lost = [a.lost(), b.lost(), r.lost()];
    tokio::time::sleep(Duration::from_millis(300)).await;
    for n in nodes.iter() {
        n.cli(&["SCRIPT", "FLUSH"]).unwrap();
    }
    // Three TTLs after the flush: every extension since met an empty cache first.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    for (signal, name) in lost.iter().zip(["flush:a", "flush:b", "flush:r"]) {
        assert!(!signal.is_fired(), "{name} was lost after the flush");
    }
    for n in nodes.iter() {
        for key in ["flush:a", "flush:b", "flush:r"] {
            let pttl: i64 = n.cli(&["PTTL", key]).unwrap().trim().parse().unwrap();
            assert!(pttl > 0, "{key} on {}: PTTL {pttl}", n.url());
        }
    }
    a.release().await.unwrap();
    b.release().await.unwrap();
    r.release().await.unwrap();
}
