//! Reentrancy, on real nodes: a task that asks again for a lock it holds is refused at once
//! (not left waiting on itself for its wait budget), other tasks of the same client still wait
//! for it, and the refusal ends with the lock.

use std::time::{Duration, Instant};

use fencelock::{Client, Config, ErrorKind, RetryPolicy};
use fencelock_testkit::RedisNodes;

fn client(nodes: &RedisNodes) -> Client {
    Client::new(
        Config::new(nodes.urls())
            .with_ttl(Duration::from_secs(30))
            .with_quarantine(false)
            .with_fencing(true)
            // A wait budget far beyond the test's bound: only an immediate refusal passes.
            .with_retry(RetryPolicy::new().with_wait(Duration::from_secs(120))),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_task_is_refused_at_once_and_other_tasks_wait() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = client(&nodes);
    let lock = client.acquire("re:job").await.unwrap();

    // Outside any task (block_on's thread, as in #[tokio::main]) and then inside one.
    let started = Instant::now();
    let err = client.acquire("re:job").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
    assert!(err.to_string().contains("not reentrant"), "{err}");
    let err = client.try_acquire("re:job").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
    let err = client.acquire_many(&["other", "re:job"]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
    // A clone is the same client.
    let err = client.clone().acquire("re:job").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
    // "At once": far below the 120 s budget (generous for a loaded machine).
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    // Another task of the same client waits for the holder, as for any holder.
    let other = client.clone();
    let waiter = tokio::spawn(async move {
        let l = other.acquire("re:job").await.unwrap();
        let token = l.fencing_token().map(|t| t.value());
        l.release().await.unwrap();
        token
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "the other task must wait while we hold the lock"
    );
    let first = lock.fencing_token().map(|t| t.value());
    lock.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("the waiting task gets the lock after the release")
        .unwrap();
    assert!(second > first);

    // Released: this task may take it again.
    let again = client.try_acquire("re:job").await.unwrap();
    again.release().await.unwrap();
}

#[tokio::test]
async fn a_dropped_lock_or_guard_ends_the_refusal() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = client(&nodes);
    let guard = client
        .acquire("re:guard")
        .await
        .unwrap()
        .auto_extend(fencelock::AutoExtend::new());
    let err = client.try_acquire("re:guard").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
    guard.release().await.unwrap();
    let lock = client.try_acquire("re:guard").await.unwrap();
    drop(lock);
    client.close().await;
    let lock = client.acquire("re:guard").await.unwrap();
    lock.release().await.unwrap();

    // Scoped work that asks for its own lock gets the error, not a two-minute wait.
    let inner = client
        .with_lock("re:scoped", async |_ctx| {
            client
                .acquire("re:scoped")
                .await
                .map(|_| ())
                .unwrap_err()
                .kind()
        })
        .await
        .unwrap();
    assert_eq!(inner, ErrorKind::AlreadyHeld);
}
