//! The etcd backend against real etcd 3.4 processes: mutual exclusion, FIFO order, fencing
//! tokens from revisions, member failures, and a paused holder's stale write.
#![cfg(feature = "etcd")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{AutoExtend, Client, Config, Error, ErrorKind, RetryPolicy, VoteOutcome};
use fencelock_testkit::{Etcd, EtcdCluster};

/// Generous: liveness waits on a loaded 2-core machine.
const LONG: Duration = Duration::from_secs(30);

fn etcd_urls(endpoints: &[String]) -> Vec<String> {
    endpoints
        .iter()
        .map(|e| e.replacen("http://", "etcd://", 1))
        .collect()
}

fn client(endpoints: &[String], ttl: Duration) -> Client {
    let config = Config::new(etcd_urls(endpoints))
        .with_ttl(ttl)
        .with_retry(RetryPolicy::new().with_wait(LONG));
    Client::new(config).unwrap()
}

/// How many waiters' keys the queue of `resource` holds, read with a separate etcd client.
async fn queue_len(endpoints: &[String], resource: &str) -> i64 {
    let mut raw = etcd_client::Client::connect(endpoints, None).await.unwrap();
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    raw.get(format!("fencelock/{resource}/"), Some(options))
        .await
        .unwrap()
        .count()
}

async fn wait_queue_len(endpoints: &[String], resource: &str, want: i64) {
    let deadline = Instant::now() + LONG;
    loop {
        let len = queue_len(endpoints, resource).await;
        if len == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "queue of {resource} stayed at {len}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn etcds_urls_need_the_tls_feature() {
    let client = Client::new(Config::new(["etcds://127.0.0.1:2379"]));
    if cfg!(feature = "tls") {
        // Over TLS: tests/tls.rs.
        assert!(client.is_ok());
    } else {
        let err = client.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("`tls` feature"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_client_is_refused_while_first_holds_then_gets_it() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let a = client(&eps, Duration::from_secs(10));
    let b = client(&eps, Duration::from_secs(10));

    let lock = a.try_acquire("order:42").await.unwrap();
    assert!(
        lock.owner().starts_with("fencelock/order:42/"),
        "{}",
        lock.owner()
    );
    assert!(lock.fencing_token().unwrap().value() > 0);
    assert!(lock.remaining() > Duration::from_secs(5));
    assert!(lock.remaining() <= Duration::from_secs(10));
    assert_eq!(lock.votes().granted(), 1);

    let err = b.try_acquire("order:42").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    assert!(matches!(&err, Error::Contention { votes, .. }
        if votes.iter().all(|v| v.outcome == VoteOutcome::HeldByOther)));
    // The refused attempt took its key out of the queue again.
    assert_eq!(queue_len(&eps, "order:42").await, 1);
    // Other resources, including ones that look like sub-paths, are independent.
    b.try_acquire("order:42/line:1")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let first = lock.fencing_token().unwrap().value();
    lock.release().await.unwrap();
    assert_eq!(queue_len(&eps, "order:42").await, 0);
    let lock = b.try_acquire("order:42").await.unwrap();
    assert!(lock.fencing_token().unwrap().value() > first);
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_queue_order_without_overlap() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let resource = "fifo";
    let holder = client(&eps, Duration::from_secs(10));
    let first = holder.acquire(resource).await.unwrap();
    let first_token = first.fencing_token().unwrap().value();

    let inside = Arc::new(AtomicBool::new(false));
    let grants: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
    let mut tasks = Vec::new();
    const WAITERS: usize = 5;
    for i in 0..WAITERS {
        let c = client(&eps, Duration::from_secs(10));
        let (inside, grants) = (inside.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            let lock = c.acquire("fifo").await.unwrap();
            assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
            grants
                .lock()
                .unwrap()
                .push((i, lock.fencing_token().unwrap().value()));
            tokio::time::sleep(Duration::from_millis(30)).await;
            inside.store(false, Ordering::SeqCst);
            lock.release().await.unwrap();
        }));
        // Queue the next waiter only once this one's key is in: that fixes the queue order.
        wait_queue_len(&eps, resource, i as i64 + 2).await;
    }
    first.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let grants = grants.lock().unwrap().clone();
    let order: Vec<usize> = grants.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "grant order {grants:?}"
    );
    let mut last = first_token;
    for (i, token) in grants {
        assert!(token > last, "waiter {i} got token {token} after {last}");
        last = token;
    }
    assert_eq!(queue_len(&eps, resource).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_clients_exclude_each_other_and_tokens_increase() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let inside = Arc::new(AtomicBool::new(false));
    let tokens: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let c = client(&eps, Duration::from_secs(10));
        let (inside, tokens) = (inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let lock = c.acquire("counter").await.unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokens
                    .lock()
                    .unwrap()
                    .push(lock.fencing_token().unwrap().value());
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                lock.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 20);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens in grant order: {tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_times_out_or_is_cancelled_leaves_the_queue() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let a = client(&eps, Duration::from_secs(10));
    let b = client(&eps, Duration::from_secs(10));
    let lock = a.acquire("busy").await.unwrap();

    let policy = RetryPolicy::new().with_wait(Duration::from_millis(500));
    let err = b.acquire_with("busy", &policy).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        matches!(&err, Error::Timeout { last, .. } if last.kind() == ErrorKind::Contention),
        "{err}"
    );
    assert_eq!(queue_len(&eps, "busy").await, 1);

    // Cancelled: the waiter's lease is revoked in the background.
    let waiting = tokio::time::timeout(Duration::from_millis(300), b.acquire("busy")).await;
    assert!(waiting.is_err());
    wait_queue_len(&eps, "busy", 1).await;

    let token = lock.fencing_token().unwrap().value();
    lock.release().await.unwrap();
    let lock = b.try_acquire("busy").await.unwrap();
    assert!(lock.fencing_token().unwrap().value() > token);
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_keeps_the_lease_and_reports_it_lost_once_expired() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let a = client(&eps, Duration::from_secs(2));
    let b = client(&eps, Duration::from_secs(2));
    let mut lock = a.acquire("job").await.unwrap();
    // Held for three TTLs by extending.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        lock.extend().await.unwrap();
        assert!(lock.is_valid());
        let err = b.try_acquire("job").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    }
    // A holder that stops extending loses the lease; the next client then gets the lock, and
    // not before a's validity deadline: b tries every 10 ms, and the instant its try returns
    // the lock (within 10 ms of the grant, not whenever a check runs next) must be past it.
    let a_deadline = lock.validity_deadline();
    let (other, granted_by) = loop {
        match b.try_acquire("job").await {
            Ok(other) => break (other, Instant::now()),
            Err(e) => assert_eq!(e.kind(), ErrorKind::Contention, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        a_deadline <= granted_by,
        "granted to b {:?} before a's validity deadline",
        a_deadline - granted_by
    );
    let err = lock.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    assert!(other.fencing_token().map(|t| t.value()) > lock.fencing_token().map(|t| t.value()));
    let err = lock.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    other.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_extension_holds_past_the_ttl_and_fires_lost_when_etcd_stalls() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let a = client(&eps, Duration::from_secs(2));
    let b = client(&eps, Duration::from_secs(2));
    let guard = a
        .acquire("long-job")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!guard.is_lost());
    let err = b.try_acquire("long-job").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");

    // The only member stops answering: no renewal can succeed, so the signal must fire
    // before the validity deadline.
    let lost = guard.lost();
    etcd.pause().unwrap();
    let fired = tokio::time::timeout(LONG, lost.fired()).await;
    let fired_at = Instant::now();
    etcd.resume().unwrap();
    assert!(fired.is_ok(), "lost signal did not fire");
    assert!(fired_at <= guard.validity_deadline());
    let _ = guard.release().await;
}

/// How a follower fails in [`a_follower_down`].
#[derive(Debug, Clone, Copy)]
enum Down {
    /// SIGSTOP: the member accepts connections and never answers.
    Paused,
    /// SIGKILL: connections to the member are refused.
    Killed,
}

impl Down {
    fn bring_down(self, cluster: &EtcdCluster, member: usize) {
        match self {
            Down::Paused => cluster.member(member).pause().unwrap(),
            Down::Killed => cluster.member(member).kill().unwrap(),
        }
    }
}

/// A healthy 3-member cluster, one follower of which goes down (`how`), and the endpoints with
/// that follower listed first, so a client starts on the member that fails.
fn a_follower_down(how: Down) -> (EtcdCluster, Vec<String>) {
    let cluster = EtcdCluster::start(3).unwrap();
    let (follower, eps) = cluster.follower_first(LONG).unwrap();
    how.bring_down(&cluster, follower);
    (cluster, eps)
}

/// Ten `try_acquire` + `release` cycles on a free resource: the errors, each with its cycle.
async fn cycles_on_a_free_resource(c: &Client, resource: &str) -> Vec<(usize, String)> {
    let mut failures = Vec::new();
    for i in 0..10 {
        match c.try_acquire(resource).await {
            Ok(lock) => {
                if let Err(e) = lock.release().await {
                    failures.push((i, format!("release: {e}")));
                }
            }
            Err(e) => failures.push((i, e.to_string())),
        }
    }
    failures
}

/// The minority-down promise (docs/guarantees.md): with one follower of three down, every
/// call succeeds except at most the first one, whose failure moves the client to another
/// member.
async fn a_minority_down_leaves_the_lock_available(how: Down) {
    let (cluster, eps) = a_follower_down(how);
    let c = client(&eps, Duration::from_secs(5));
    let started = Instant::now();
    let failures = cycles_on_a_free_resource(&c, "minority").await;
    let took = started.elapsed();
    assert!(
        failures.is_empty() || (failures.len() == 1 && failures[0].0 == 0),
        "one follower {how:?}: {} of 10 cycles failed: {failures:?}",
        failures.len()
    );
    assert!(took < LONG, "one follower {how:?}: 10 cycles took {took:?}");
    // A waiting acquisition (the retry policy) gets the lock at once too.
    let lock = c.acquire("minority-wait").await.unwrap();
    lock.release().await.unwrap();
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_follower_leaves_the_lock_available() {
    a_minority_down_leaves_the_lock_available(Down::Paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_follower_leaves_the_lock_available() {
    a_minority_down_leaves_the_lock_available(Down::Killed).await;
}

/// A waiter watches the key ahead of it on the member it uses; when that member stops (`how`)
/// the waiter goes on through another member and is served soon after the holder releases,
/// not only at its next lease renewal (every TTL/3, 10 s here).
async fn a_waiter_whose_member_fails_is_served_through_another(how: Down) {
    let cluster = EtcdCluster::start(3).unwrap();
    let (follower, eps) = cluster.follower_first(LONG).unwrap();
    let holder = client(&eps, Duration::from_secs(30));
    let waiter = client(&eps, Duration::from_secs(30));
    let lock = holder.acquire("watched").await.unwrap();
    let task = tokio::spawn(async move {
        let lock = waiter.acquire("watched").await;
        (lock, Instant::now())
    });
    wait_queue_len(&eps[1..], "watched", 2).await;
    how.bring_down(&cluster, follower);
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.release().await.unwrap();
    let released = Instant::now();
    let (next, granted_at) = task.await.unwrap();
    let next = next.unwrap();
    let took = granted_at - released;
    assert!(
        took < Duration::from_secs(6),
        "member {how:?}: the waiter was served {took:?} after the release"
    );
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_member_dies_is_served_through_another() {
    a_waiter_whose_member_fails_is_served_through_another(Down::Killed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_member_stops_is_served_through_another() {
    a_waiter_whose_member_fails_is_served_through_another(Down::Paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_survives_killing_a_follower() {
    let cluster = EtcdCluster::start(3).unwrap();
    // The follower first, so both clients have used it before it dies.
    let (follower, eps) = cluster.follower_first(LONG).unwrap();
    let a = client(&eps, Duration::from_secs(5));
    let b = client(&eps, Duration::from_secs(5));

    let mut lock = a.acquire("ledger").await.unwrap();
    let token = lock.fencing_token().unwrap().value();
    let err = b.try_acquire("ledger").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    cluster.member(follower).kill().unwrap();
    // Each client may fail once, on its first request after the kill; never after.
    let (mut a_failed, mut b_failed) = (0, 0);
    for round in 0..5 {
        if let Err(e) = lock.extend().await {
            assert!(
                round == 0 && e.kind() != ErrorKind::Lost,
                "extend after the kill, round {round}: {e}"
            );
            a_failed += 1;
        }
        let err = b.try_acquire("ledger").await.unwrap_err();
        if err.kind() != ErrorKind::Contention {
            assert!(
                round == 0 && err.kind() == ErrorKind::Unavailable,
                "try_acquire after the kill, round {round}: {err}"
            );
            b_failed += 1;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eprintln!("after killing a follower: a failed {a_failed} time(s), b {b_failed} time(s)");
    lock.release().await.unwrap();
    let next = b.acquire("ledger").await.unwrap();
    assert!(next.fencing_token().unwrap().value() > token);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_never_yields_two_holders() {
    let cluster = EtcdCluster::start(3).unwrap();
    let eps = cluster.endpoints();
    let leader = cluster.wait_for_leader(LONG).unwrap();
    let ttl = Duration::from_secs(3);
    let a = client(&eps, ttl);
    let b = client(&eps, ttl);

    let mut lock = a.acquire("leader-kill").await.unwrap();
    let a_token = lock.fencing_token().unwrap().value();
    let mut a_deadlines = vec![lock.validity_deadline()];
    cluster.member(leader).kill().unwrap();

    // The second client keeps trying during the election and after it.
    let b_task = tokio::spawn(async move {
        let until = Instant::now() + Duration::from_secs(8);
        let mut grants = Vec::new();
        while Instant::now() < until {
            if let Ok(lock) = b.try_acquire("leader-kill").await {
                grants.push((Instant::now(), lock.fencing_token().unwrap().value()));
                lock.release().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        grants
    });
    // The holder extends through the election: each extension keeps the lock or reports it
    // lost; after a loss it stops.
    let until = Instant::now() + Duration::from_secs(8);
    let mut lost = false;
    while Instant::now() < until {
        match lock.extend().await {
            Ok(()) => a_deadlines.push(lock.validity_deadline()),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
                lost = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let grants = b_task.await.unwrap();
    eprintln!(
        "after killing the leader: a extended {} time(s), lost: {lost}; b was granted {} time(s)",
        a_deadlines.len() - 1,
        grants.len()
    );
    let a_last = *a_deadlines.iter().max().unwrap();
    for (granted_by, token) in &grants {
        // b's lock exists from some instant before `granted_by`; a's validity must have ended
        // by then.
        assert!(
            *granted_by >= a_last,
            "b was granted while a's lock was valid for another {:?}",
            a_last - *granted_by
        );
        assert!(*token > a_token);
    }
    if !lost {
        assert!(grants.is_empty(), "a kept its lock, so b must never get it");
        lock.release().await.unwrap();
    }
    cluster.wait_for_leader(LONG).unwrap();
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_stale_write_is_rejected_by_the_fence() {
    use fencelock::fence::SqliteFence;

    let dir = tempfile::tempdir().unwrap();
    let fence = SqliteFence::open(dir.path().join("shop.db")).unwrap();
    fence
        .unfenced(|conn| {
            conn.execute_batch(
                "CREATE TABLE inventory (sku TEXT PRIMARY KEY, stock INTEGER NOT NULL);
                 INSERT INTO inventory VALUES ('apple', 10);",
            )
        })
        .unwrap();
    let stock = |fence: &SqliteFence| -> i64 {
        fence.unfenced(|conn| {
            conn.query_row("SELECT stock FROM inventory WHERE sku = 'apple'", [], |r| {
                r.get(0)
            })
            .unwrap()
        })
    };

    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let a = client(&eps, Duration::from_secs(2));
    let b = client(&eps, Duration::from_secs(2));

    // A takes the lock, then "pauses" (a GC pause: it neither extends nor writes) until its
    // lease has expired and B holds the lock and has written.
    let a_lock = a.acquire("sku:apple").await.unwrap();
    let a_token = a_lock.fencing_token().unwrap().value();
    let b_lock = b.acquire("sku:apple").await.unwrap();
    let b_token = b_lock.fencing_token().unwrap().value();
    assert!(b_token > a_token);
    fence
        .write_async("sku:apple", b_token, |tx| {
            tx.execute(
                "UPDATE inventory SET stock = stock - 3 WHERE sku = 'apple'",
                [],
            )?;
            Ok(())
        })
        .await
        .unwrap();

    // A wakes up and writes with its old token: refused, B's write stands.
    let err = fence
        .write_async("sku:apple", a_token, |tx| {
            tx.execute("UPDATE inventory SET stock = 0 WHERE sku = 'apple'", [])?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    assert_eq!(stock(&fence), 7);
    assert_eq!(fence.last_token("sku:apple").unwrap(), Some(b_token));
    assert_eq!(a_lock.release().await.unwrap_err().kind(), ErrorKind::Lost);
    b_lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_is_unavailable() {
    // A port that nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = client(
        &[format!("http://127.0.0.1:{port}")],
        Duration::from_secs(5),
    );
    let err = c.try_acquire("nowhere").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let policy = RetryPolicy::new().with_wait(Duration::from_millis(1500));
    let err = c.acquire_with("nowhere", &policy).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        matches!(&err, Error::Timeout { last, .. } if last.kind() == ErrorKind::Unavailable),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_on_several_resources_holds_every_one_of_them() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let x = client(&eps, Duration::from_secs(10));
    let y = client(&eps, Duration::from_secs(10));

    let before = y.try_acquire("b").await.unwrap();
    let before_token = before.fencing_token().unwrap().value();
    before.release().await.unwrap();

    let both = x.try_acquire_many(&["a", "b"]).await.unwrap();
    assert_eq!(both.resources(), ["a", "b"]);
    let token = both.fencing_token().unwrap().value();
    assert!(token > before_token, "{token} after {before_token}");
    for taken in ["b", "a"] {
        let err = y.try_acquire(taken).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contention, "{taken}: {err}");
    }
    // All or nothing: a set that overlaps is refused and leaves no key in the free queue.
    let err = y.try_acquire_many(&["c", "b"]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    wait_queue_len(&eps, "c", 0).await;
    assert_eq!(queue_len(&eps, "a").await, 1);
    assert_eq!(queue_len(&eps, "b").await, 1);

    both.release().await.unwrap();
    let after = y.try_acquire("b").await.unwrap();
    assert!(after.fencing_token().unwrap().value() > token);
    after.release().await.unwrap();
    for r in ["a", "b", "c"] {
        assert_eq!(queue_len(&eps, r).await, 0, "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_in_opposite_orders_are_all_served_without_overlap() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let inside: Arc<[AtomicBool; 3]> = Arc::default();
    let index = |r: &str| ["a", "b", "c"].iter().position(|x| *x == r).unwrap();
    let served: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let sets: [(&'static str, &'static [&'static str]); 3] =
        [("X", &["a", "b"]), ("Y", &["b", "a"]), ("Z", &["b", "c"])];
    let mut tasks = Vec::new();
    for (name, set) in sets {
        let c = client(&eps, Duration::from_secs(10));
        let (inside, served) = (inside.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let lock = c.acquire_many(set).await.unwrap();
                for r in set {
                    let was = inside[index(r)].swap(true, Ordering::SeqCst);
                    assert!(!was, "{name} got {r:?} while another client held it");
                }
                served.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(20)).await;
                for r in set {
                    inside[index(r)].store(false, Ordering::SeqCst);
                }
                lock.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(LONG, t)
            .await
            .expect("a waiter was never served (deadlock?)")
            .unwrap();
    }
    assert_eq!(served.lock().unwrap().len(), 15);
    for r in ["a", "b", "c"] {
        assert_eq!(queue_len(&eps, r).await, 0, "{r}");
    }
}

#[test]
fn a_set_too_large_for_one_etcd_transaction_is_refused_before_any_io() {
    // Nothing listens on port 1: any I/O would fail as Unavailable, not InvalidConfig.
    let c = Client::new(Config::new(["etcd://127.0.0.1:1"])).unwrap();
    let names: Vec<String> = (0..64).map(|i| format!("r{i}")).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt.block_on(c.try_acquire_many(&names)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("at most 63"), "{err}");
    let err = rt.block_on(c.acquire_many(&names)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_split_over_calls_keeps_its_place_in_line() {
    // What `fencelock run` does: waits in short calls that resume one wait.
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let holder = client(&eps, Duration::from_secs(10));
    let early = client(&eps, Duration::from_secs(10));
    let late = client(&eps, Duration::from_secs(10));
    let held = holder.acquire("line").await.unwrap();

    let mut waiter = early.waiter(&["line"]).unwrap();
    let chunk = RetryPolicy::new().with_wait(Duration::from_millis(300));
    let err = waiter.acquire(&chunk).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    // Between two calls the early waiter keeps its key in the queue...
    assert_eq!(queue_len(&eps, "line").await, 2);
    // ... so a client that starts waiting now queues behind it.
    let late_wait = tokio::spawn(async move {
        let lock = late.acquire("line").await.unwrap();
        lock.release().await.unwrap();
        Instant::now()
    });
    wait_queue_len(&eps, "line", 3).await;
    let again = RetryPolicy::new().with_wait(LONG);
    let early_wait = tokio::spawn(async move {
        let lock = waiter.acquire(&again).await.unwrap();
        let at = Instant::now();
        tokio::time::sleep(Duration::from_millis(200)).await;
        lock.release().await.unwrap();
        at
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    let early_at = early_wait.await.unwrap();
    let late_at = late_wait.await.unwrap();
    assert!(early_at < late_at, "the late waiter was served first");
    assert_eq!(queue_len(&eps, "line").await, 0);
}

#[tokio::test]
async fn another_process_releases_and_extends_by_the_token() {
    let etcd = fencelock_testkit::Etcd::start().unwrap();
    let endpoints = etcd.endpoints();
    let holder = client(&endpoints, Duration::from_secs(5));
    let lock = holder.try_acquire("by-token").await.unwrap();
    let token = lock.owner().to_string();
    std::mem::forget(lock); // as `fencelock acquire` leaves it
    let other = client(&endpoints, Duration::from_secs(5));
    let err = other
        .release_by_owner("by-token", "not-a-key")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let err = other.release_by_owner("another", &token).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    other.extend_by_owner("by-token", &token).await.unwrap();
    assert_eq!(
        other.try_acquire("by-token").await.unwrap_err().kind(),
        ErrorKind::Contention
    );
    other.release_by_owner("by-token", &token).await.unwrap();
    assert_eq!(queue_len(&endpoints, "by-token").await, 0);
    let next = other.try_acquire("by-token").await.unwrap();
    next.release().await.unwrap();
    // Released already: the key is gone (its lease waits out its TTL), nothing changed.
    let err = other
        .release_by_owner("by-token", &token)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
}

/// The lease named by a lock key: its 16 hex digits after the queue prefix.
fn lease_of(token: &str, resource: &str) -> String {
    token
        .strip_prefix(&format!("fencelock/{resource}/"))
        .and_then(|rest| rest.get(..16))
        .unwrap_or_else(|| panic!("{token} is not a lock key of {resource}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_carries_the_next_lock_and_a_stale_token_touches_neither() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let owner = client(&eps, Duration::from_secs(10));
    let other = client(&eps, Duration::from_secs(10));

    let first = owner.try_acquire("carry").await.unwrap();
    let stale = first.owner().to_string();
    let first_token = first.fencing_token().unwrap().value();
    first.release().await.unwrap();
    assert_eq!(queue_len(&eps, "carry").await, 0);

    // The next lock of this client rides the lease the first one left: no grant, and a key of
    // its own, so that the first lock's token does not name it.
    let mut second = owner.try_acquire("carry").await.unwrap();
    assert_eq!(
        lease_of(second.owner(), "carry"),
        lease_of(&stale, "carry"),
        "the second lock did not carry the first one's lease over"
    );
    assert_ne!(second.owner(), stale, "a carried lease reused the old key");
    assert!(second.fencing_token().unwrap().value() > first_token);
    assert!(
        second.remaining() > Duration::from_secs(8),
        "{:?}",
        second.remaining()
    );

    // The stale token of the released lock neither releases nor extends the lock that now
    // rides its lease, nor renews the lease; nor does it without its use number.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let err = other.release_by_owner("carry", &stale).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    let err = other.extend_by_owner("carry", &stale).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    let bare = stale
        .rsplit_once('.')
        .map(|(bare, _)| bare.to_string())
        .unwrap();
    let err = other.release_by_owner("carry", &bare).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    let err = other.extend_by_owner("carry", &bare).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    let lease = i64::from_str_radix(&lease_of(second.owner(), "carry"), 16).unwrap();
    let mut raw = etcd_client::Client::connect(&eps, None).await.unwrap();
    let left = raw.lease_time_to_live(lease, None).await.unwrap().ttl();
    assert!(
        (1..=8).contains(&left),
        "the lease has {left} s of its 10 s left 2.1 s after its grant: a stale token renewed it"
    );
    assert_eq!(
        other.try_acquire("carry").await.unwrap_err().kind(),
        ErrorKind::Contention,
        "a stale token freed the lock that rides its lease"
    );
    assert_eq!(queue_len(&eps, "carry").await, 1);

    // A token of the live lock releases it from another process; its holder then learns that
    // it lost the lock, from an extension and from its release, though the lease lives on.
    let live = second.owner().to_string();
    other.release_by_owner("carry", &live).await.unwrap();
    assert_eq!(queue_len(&eps, "carry").await, 0);
    let err = second.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    let err = second.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");

    // A lock on several resources never carries a lease over: its token is released by
    // revoking the lease, which holds its keys only.
    let set = owner.try_acquire_many(&["carry", "carry-2"]).await.unwrap();
    let set_token = set.owner().to_string();
    other.release_by_owner("carry", &set_token).await.unwrap();
    assert_eq!(queue_len(&eps, "carry").await, 0);
    assert_eq!(queue_len(&eps, "carry-2").await, 0);
    drop(set);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_in_a_run_released_after_a_tenth_of_its_ttl_renews_its_lease_for_the_next() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let ttl = Duration::from_secs(10);
    let owner = client(&eps, ttl);
    let mut raw = etcd_client::Client::connect(&eps, None).await.unwrap();
    // A run of locks: the second starts right after the first's release, on its lease.
    let first = owner.try_acquire("aged").await.unwrap();
    let lease = lease_of(first.owner(), "aged");
    let id = i64::from_str_radix(&lease, 16).unwrap();
    first.release().await.unwrap();
    let lock = owner.try_acquire("aged").await.unwrap();
    assert_eq!(lease_of(lock.owner(), "aged"), lease);
    // A tenth of the 10 s lease is 1 s: past it the lease cannot carry a lock as it stands.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let release_started = Instant::now();
    lock.release().await.unwrap();
    let release_returned = Instant::now();
    // etcd reports whole seconds left, rounded down: 9 s (not the 8 s left 1.5 s after the
    // grant) says the release renewed the lease.
    let left = raw.lease_time_to_live(id, None).await.unwrap().ttl();
    assert!(
        left >= 9,
        "the aged lock's lease was not renewed at its release ({left} s left)"
    );
    assert_eq!(
        queue_len(&eps, "aged").await,
        0,
        "the released key is still there"
    );
    // The next lock rides it under a key of its own, with the validity of the renewal, which
    // was sent between the release's start and its return: counted from the grant it would
    // be 1.5 s shorter; counted from when the spare is taken, 300 ms longer than the renewal
    // can give.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let next = owner.try_acquire("aged").await.unwrap();
    let (remaining, since_start, since_return) = (
        next.remaining(),
        release_started.elapsed(),
        release_returned.elapsed(),
    );
    assert_eq!(
        lease_of(next.owner(), "aged"),
        lease,
        "the renewed lease did not carry the next lock"
    );
    assert!(
        remaining + since_start >= Duration::from_millis(9500),
        "validity not counted from the renewal: {remaining:?} left, {since_start:?} after the release began"
    );
    assert!(
        remaining + since_return <= ttl,
        "validity counted from after the renewal: {remaining:?} left, {since_return:?} after the release returned"
    );
    next.release().await.unwrap();
    assert_eq!(queue_len(&eps, "aged").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_lock_released_after_a_tenth_of_its_ttl_revokes_its_lease_and_the_next_grants_one() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let owner = client(&eps, Duration::from_secs(3));
    let lock = owner.try_acquire("aged").await.unwrap();
    let hex = lease_of(lock.owner(), "aged");
    let lease = i64::from_str_radix(&hex, 16).unwrap();
    // A tenth of the 3 s lease is 300 ms: past it, and with no release of this client just
    // before the lock (a lone lock, as a job's), the release revokes the lease (one write)
    // rather than renew it for a next lock that may not come.
    tokio::time::sleep(Duration::from_millis(400)).await;
    lock.release().await.unwrap();
    assert_eq!(queue_len(&eps, "aged").await, 0);
    let mut raw = etcd_client::Client::connect(&eps, None).await.unwrap();
    let left = raw.lease_time_to_live(lease, None).await.unwrap().ttl();
    assert_eq!(
        left, -1,
        "the aged lock's lease was not revoked ({left} s left)"
    );
    let next = owner.try_acquire("aged").await.unwrap();
    assert_ne!(
        lease_of(next.owner(), "aged"),
        hex,
        "a lease past its tenth carried the next lock"
    );
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_lease_revoked_from_outside_is_replaced_by_a_new_grant() {
    let etcd = Etcd::start().unwrap();
    let eps = etcd.endpoints();
    let owner = client(&eps, Duration::from_secs(10));
    let first = owner.try_acquire("spare").await.unwrap();
    let lease = lease_of(first.owner(), "spare");
    first.release().await.unwrap();
    let mut raw = etcd_client::Client::connect(&eps, None).await.unwrap();
    raw.lease_revoke(i64::from_str_radix(&lease, 16).unwrap())
        .await
        .unwrap();
    // The client's spare is gone: the next lock is granted a lease of its own, at once.
    let next = owner.try_acquire("spare").await.unwrap();
    assert_ne!(lease_of(next.owner(), "spare"), lease);
    assert!(
        next.remaining() > Duration::from_secs(8),
        "{:?}",
        next.remaining()
    );
    next.release().await.unwrap();
}

/// Issue 35, item 1: A holds `job`; its key is deleted elsewhere (as `fencelock release
/// --owner` does) and B takes the lock; the member A talks to stops, so A's release times out
/// once and tries again on another member, which finds the key (or, for a set, the lease)
/// gone. A must not hear that it released the lock: B held it while A thought it did. The
/// release cannot tell its own unanswered request from the delete by the token, so it says
/// `Unavailable` (with a healthy member, the same release says `Lost`).
async fn a_release_that_retried_does_not_report_a_lost_lock_released(resources: &[&str]) {
    let cluster = EtcdCluster::start(3).unwrap();
    let (follower, eps) = cluster.follower_first(LONG).unwrap();
    let a = client(&eps, Duration::from_secs(10));
    let b = client(&eps[1..], Duration::from_secs(10));
    let lock = a.try_acquire_many(resources).await.unwrap();
    let token = lock.owner().to_string();
    b.release_by_owner(resources[0], &token).await.unwrap();
    let next = b.try_acquire(resources[0]).await.unwrap();
    assert!(next.fencing_token().unwrap().value() > lock.fencing_token().unwrap().value());
    cluster.member(follower).pause().unwrap();
    let released = lock.release().await;
    cluster.member(follower).resume().unwrap();
    let err = match released {
        Ok(_) => panic!(
            "{resources:?}: the release reported a lock released that B held since its key was deleted by its token"
        ),
        Err(e) => e,
    };
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{resources:?}: {err}");
    assert!(
        err.to_string().contains("cannot tell"),
        "{resources:?}: {err}"
    );
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_retried_does_not_report_a_lock_deleted_by_its_token_released() {
    a_release_that_retried_does_not_report_a_lost_lock_released(&["job"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_release_that_retried_does_not_report_a_lease_revoked_by_its_token_released() {
    a_release_that_retried_does_not_report_a_lost_lock_released(&["job", "job-2"]).await;
}

/// A member that lags behind the others: B talks to member F only, which was paused while A
/// took its locks and resumes with B's requests already waiting. etcd serves a transaction of
/// comparisons alone from the member's own state, without the read barrier that other reads
/// wait for, so a check of a lock's key there may read the past. B's release of A's set by its
/// token looks at the set's first key before it revokes the lease: it must find the key, not
/// say that the lock was not held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_of_a_lock_key_on_a_lagging_member_read_the_present() {
    let cluster = EtcdCluster::start(3).unwrap();
    let leader = cluster.wait_for_leader(LONG).unwrap();
    let lagging = (0..3).find(|i| *i != leader).unwrap();
    let eps = cluster.endpoints();
    let others: Vec<String> = (0..3)
        .filter(|i| *i != lagging)
        .map(|i| eps[i].clone())
        .collect();
    let a = client(&others, Duration::from_secs(10));
    let b = client(std::slice::from_ref(&eps[lagging]), Duration::from_secs(10));
    // B's connection is up before the pauses.
    b.try_acquire("warm")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let paused = |what: &str| {
        cluster.member(lagging).pause().unwrap();
        eprintln!("member {lagging} paused: {what}");
    };

    // A set's token names a lease of its own: its release by token looks at the key first.
    for round in 0..3 {
        paused("a set");
        let set = a.try_acquire_many(&["set-1", "set-2"]).await.unwrap();
        let token = set.owner().to_string();
        let release = {
            let b = b.clone();
            let token = token.clone();
            tokio::spawn(async move { b.release_by_owner("set-1", &token).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        cluster.member(lagging).resume().unwrap();
        let released = release.await.unwrap();
        assert!(
            released.is_ok(),
            "round {round}: B's release of A's set {token} through the lagging member: {released:?}"
        );
        drop(set);
    }
}
