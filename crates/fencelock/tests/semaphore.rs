//! The semaphore on real nodes: never more than N permit holders under 16 concurrent clients
//! (exact), a waiter woken by a release, waiters admitted in the order they came (one line for
//! all slots), a try that does not pass the line, a task that holds every permit refused at
//! once, and the scoped form.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::{Client, Config, ErrorKind, RetryPolicy};
use fencelock_testkit::RedisNodes;

fn config(nodes: &RedisNodes) -> Config {
    Config::new(nodes.urls())
        .with_ttl(Duration::from_secs(30))
        .with_node_timeout(Duration::from_millis(500))
        .with_quarantine(false)
        .with_fencing(true)
        .with_retry(
            RetryPolicy::new()
                .with_wait(Duration::from_secs(120))
                .with_base_delay(Duration::from_millis(20))
                .with_max_delay(Duration::from_millis(200)),
        )
}

const PERMITS: u32 = 3;
const CLIENTS: usize = 16;
const ROUNDS: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_n_holders_under_sixteen_clients() {
    let nodes = RedisNodes::start(3).unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        // One client each: separate connections, as separate processes would have.
        let client = Client::new(config(&nodes)).unwrap();
        let (inside, most, grants) = (inside.clone(), most.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            let sem = client.semaphore("sem:jobs", PERMITS).unwrap();
            for _ in 0..ROUNDS {
                let permit = sem.acquire().await.unwrap();
                assert!(permit.resource().starts_with("sem:jobs:permit:"));
                assert!(permit.fencing_token().map(|t| t.value()).is_some());
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                grants.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(fastrand::u64(5..30))).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    println!(
        "{} grants to {CLIENTS} clients, at most {most} holders at once (N = {PERMITS})",
        grants.load(Ordering::SeqCst)
    );
    assert_eq!(grants.load(Ordering::SeqCst), CLIENTS * ROUNDS);
    assert!(
        most <= PERMITS as usize,
        "{most} holders at once, N = {PERMITS}"
    );
}

#[tokio::test]
async fn a_waiter_is_woken_by_a_release_and_a_full_task_is_refused() {
    let nodes = RedisNodes::start(3).unwrap();
    let holder = Client::new(config(&nodes)).unwrap();
    let sem = holder.semaphore("sem:one", 2).unwrap();
    let a = sem.try_acquire().await.unwrap();
    let b = sem.try_acquire().await.unwrap();
    assert_ne!(a.resource(), b.resource());
    // Every permit is this task's: asking again is refused at once, not a wait on itself.
    let started = Instant::now();
    let err = sem.acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
    assert!(started.elapsed() < Duration::from_secs(20));

    // Another client: full, so one pass says Contention, naming the semaphore.
    let waiter = Client::new(
        config(&nodes).with_retry(
            // Retry delays so long that only a wake-up explains a prompt grant.
            RetryPolicy::new()
                .with_wait(Duration::from_secs(120))
                .with_base_delay(Duration::from_secs(60))
                .with_max_delay(Duration::from_secs(60)),
        ),
    )
    .unwrap();
    let wsem = waiter.semaphore("sem:one", 2).unwrap();
    let err = wsem.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    assert!(err.to_string().contains("\"sem:one\""), "{err}");
    let task = tokio::spawn(async move {
        let started = Instant::now();
        let p = wsem.acquire().await.unwrap();
        (
            p.resource().to_string(),
            started.elapsed(),
            p.release().await.is_ok(),
        )
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!task.is_finished(), "both permits are held");
    let freed = b.resource().to_string();
    b.release().await.unwrap();
    let (got, waited, released) = tokio::time::timeout(Duration::from_secs(50), task)
        .await
        .expect("the waiter is woken by the release, well before its 60 s retry delay")
        .unwrap();
    assert_eq!(got, freed);
    assert!(waited < Duration::from_secs(55));
    assert!(released);
    a.release().await.unwrap();
}

#[tokio::test]
async fn with_permit_runs_the_work_under_a_permit_and_releases_it() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(&nodes)).unwrap();
    let sem = client.semaphore("sem:scoped", 1).unwrap();
    let (slot, token) = sem
        .with_permit(async |ctx| {
            (
                ctx.resource().to_string(),
                ctx.fencing_token().map(|t| t.value()),
            )
        })
        .await
        .unwrap();
    assert_eq!(slot, "sem:scoped:permit:0");
    assert!(token.is_some());
    // Released: the only permit is free again.
    let p = sem.try_acquire().await.unwrap();
    assert!(p.fencing_token().map(|t| t.value()) > token);
    p.release().await.unwrap();
}

/// How many waiters the semaphore's line holds on node 0.
fn line_len(nodes: &RedisNodes, sem: &str) -> usize {
    let key = fencelock::protocol::queue_key(&fencelock::protocol::permit_line(sem));
    nodes
        .node(0)
        .cli(&["ZCARD", &key])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_admitted_in_the_order_they_came_and_a_try_does_not_pass_them() {
    let nodes = RedisNodes::start(3).unwrap();
    let holder = Client::new(config(&nodes)).unwrap();
    let sem = holder.semaphore("sem:fifo", 2).unwrap();
    let a = sem.try_acquire().await.unwrap();
    let b = sem.try_acquire().await.unwrap();

    // Four waiters, each in line before the next starts.
    let order: Arc<std::sync::Mutex<Vec<usize>>> = Arc::default();
    let mut waiters = Vec::new();
    for i in 0..4 {
        let c = Client::new(config(&nodes)).unwrap();
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let p = c.semaphore("sem:fifo", 2).unwrap().acquire().await.unwrap();
            order.lock().unwrap().push(i);
            // Holds of different lengths: no two waiters are let in by one moment's releases.
            tokio::time::sleep(Duration::from_millis(500 * (i as u64 + 1))).await;
            p.release().await.unwrap();
        }));
        let deadline = Instant::now() + Duration::from_secs(30);
        while line_len(&nodes, "sem:fifo") < i + 1 {
            assert!(Instant::now() < deadline, "waiter {i} never queued");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // One permit free while four wait: a try (no place in line) does not take it.
    a.release().await.unwrap();
    let other = Client::new(config(&nodes)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while order.lock().unwrap().is_empty() {
        if let Ok(p) = other.semaphore("sem:fifo", 2).unwrap().try_acquire().await {
            panic!("a try took {} from four waiters", p.resource());
        }
        assert!(Instant::now() < deadline, "nobody was let in");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    b.release().await.unwrap();
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(60), w)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    // Every waiter left the line once it held.
    let deadline = Instant::now() + Duration::from_secs(10);
    while line_len(&nodes, "sem:fifo") > 0 {
        assert!(Instant::now() < deadline, "the line kept its holders");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
