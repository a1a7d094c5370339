//! One behavioural test set for the mutex, written once and run on every backend against real
//! servers: Redlock over three Redis nodes (fencing on), etcd, PostgreSQL and ZooKeeper. Each
//! backend's own file tests its faults; this one holds them to the same contract. The family
//! (semaphore, read-write lock, election) has its own contract, run on the backends that offer
//! it; it takes a [`Config`], so adding a backend is one line.

use std::time::Duration;

use fencelock::protocol::{new_node_marker, NODE_MARKER_KEY};
use fencelock::{Client, Config, ErrorKind, RetryPolicy};
use fencelock_testkit::{Etcd, Postgres, RedisNodes, ZooKeeper};

/// Generous: waits on a loaded 2-core machine.
const LONG: Duration = Duration::from_secs(30);

fn config(urls: &[String]) -> Config {
    Config::new(urls.to_vec())
        .with_ttl(Duration::from_secs(10))
        .with_fencing(true)
        .with_retry(RetryPolicy::new().with_wait(LONG))
}

fn client(urls: &[String]) -> Client {
    Client::new(config(urls)).unwrap()
}

fn token(lock: &fencelock::Lock) -> u64 {
    lock.fencing_token()
        .expect("a fenced lock has a token")
        .value()
}

/// The contract: exclusion, a refusal that says contention, tokens that grow with each grant,
/// a waiter granted once the holder releases, a waiter that gives up leaving nothing that keeps
/// the next one out, and scoped work under the lock.
async fn the_mutex_contract(backend: &str, urls: Vec<String>) {
    let (a, b, c) = (client(&urls), client(&urls), client(&urls));

    // Exclusion, and the refusal's kind.
    let first = a.try_acquire("job").await.unwrap();
    let err = b.try_acquire("job").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{backend}: {err}");

    // After a release, the next holder's token is larger.
    let t1 = token(&first);
    first.release().await.unwrap();
    let second = b.try_acquire("job").await.unwrap();
    let t2 = token(&second);
    assert!(t2 > t1, "{backend}: token {t2} after {t1}");

    // A waiter is granted once the holder releases, with a larger token again.
    let waiter = tokio::spawn(async move {
        let lock = a.acquire("job").await;
        (a, lock)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "{backend}: the waiter got a held lock"
    );
    second.release().await.unwrap();
    let (a, third) = tokio::time::timeout(LONG, waiter).await.unwrap().unwrap();
    let third = third.unwrap();
    let t3 = token(&third);
    assert!(t3 > t2, "{backend}: token {t3} after {t2}");

    // A waiter that gives up (its call cut short) leaves nothing behind: once the holder
    // releases, a try by a third client is granted at once.
    let gave_up = tokio::time::timeout(Duration::from_millis(300), b.acquire("job")).await;
    assert!(gave_up.is_err(), "{backend}: the waiter got a held lock");
    third.release().await.unwrap();
    b.close().await;
    let fourth = c.try_acquire("job").await.unwrap();
    assert!(
        token(&fourth) > t3,
        "{backend}: tokens after the waiter gave up"
    );
    fourth.release().await.unwrap();

    // Scoped work runs under the lock, which is free again afterwards.
    let held = c
        .with_lock("job", async |ctx: fencelock::LockContext| {
            ctx.fencing_token().map(|t| t.value())
        })
        .await
        .unwrap();
    assert!(held.is_some_and(|t| t > t3), "{backend}: {held:?}");
    a.try_acquire("job").await.unwrap().release().await.unwrap();
    a.close().await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_keeps_the_mutex_contract() {
    let nodes = RedisNodes::start(3).unwrap();
    // Fresh nodes that never held a lock, marked new as `fencelock up` marks them (else the
    // restart quarantine keeps them out for a TTL).
    for node in nodes.iter() {
        let marker = new_node_marker(&node.run_id().unwrap());
        node.cli(&["SET", NODE_MARKER_KEY, &marker]).unwrap();
    }
    the_mutex_contract("Redlock", nodes.urls()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_keeps_the_mutex_contract() {
    let etcd = tokio::task::spawn_blocking(Etcd::start)
        .await
        .unwrap()
        .unwrap();
    let urls = etcd
        .endpoints()
        .iter()
        .map(|e| e.replacen("http://", "etcd://", 1))
        .collect();
    the_mutex_contract("etcd", urls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_the_mutex_contract() {
    let pg = tokio::task::spawn_blocking(Postgres::start)
        .await
        .unwrap()
        .unwrap();
    the_mutex_contract("PostgreSQL", vec![pg.url()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_keeps_the_mutex_contract() {
    let zk = tokio::task::spawn_blocking(ZooKeeper::start)
        .await
        .unwrap()
        .unwrap();
    the_mutex_contract("ZooKeeper", vec![zk.url()]).await;
}

/// The family's contract: a semaphore of N admits N and refuses the next until one releases;
/// read locks share and exclude a writer, and a write lock excludes readers; an election has
/// one leader at a time, the next leader's term is larger, and an observer sees it.
async fn the_family_contract(backend: &str, config: Config) {
    let new = || Client::new(config.clone()).unwrap();
    let (a, b, c) = (new(), new(), new());

    // Semaphore: N permits, the next refused until one is released.
    let (sa, sb, sc) = (
        a.semaphore("pool", 2).unwrap(),
        b.semaphore("pool", 2).unwrap(),
        c.semaphore("pool", 2).unwrap(),
    );
    let p1 = sa.try_acquire().await.unwrap();
    let p2 = sb.try_acquire().await.unwrap();
    assert_ne!(
        p1.resource(),
        p2.resource(),
        "{backend}: one slot, two permits"
    );
    let err = sc.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{backend}: {err}");
    p1.release().await.unwrap();
    let p3 = sc.try_acquire().await.unwrap();
    p2.release().await.unwrap();
    p3.release().await.unwrap();

    // Read-write lock: readers share, a writer waits for them, readers wait for a writer.
    let r1 = a.rwlock("doc").unwrap().try_read().await.unwrap();
    let r2 = b.rwlock("doc").unwrap().try_read().await.unwrap();
    let err = c.rwlock("doc").unwrap().try_write().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{backend}: {err}");
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = c.rwlock("doc").unwrap().try_write().await.unwrap();
    let err = a.rwlock("doc").unwrap().try_read().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{backend}: {err}");
    w.release().await.unwrap();

    // Election: one leader per term, terms that grow, an observer that follows.
    let mut observer = c.election("svc").unwrap().observe();
    let first = a.election("svc").unwrap().campaign("a").await.unwrap();
    let seen = tokio::time::timeout(LONG, observer.next()).await.unwrap();
    assert_eq!(
        (seen.term(), seen.value()),
        (first.term(), "a"),
        "{backend}"
    );
    let next = tokio::spawn(async move { b.election("svc").unwrap().campaign("b").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!next.is_finished(), "{backend}: two leaders at once");
    let t1 = first.term();
    first.resign().await.unwrap();
    let second = tokio::time::timeout(LONG, next)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        second.term() > t1,
        "{backend}: term {} after {t1}",
        second.term()
    );
    let seen = tokio::time::timeout(LONG, observer.next()).await.unwrap();
    assert_eq!(
        (seen.term(), seen.value()),
        (second.term(), "b"),
        "{backend}"
    );
    second.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_family_keeps_its_contract_on_redlock_etcd_and_zookeeper() {
    let nodes = RedisNodes::start(3).unwrap();
    for node in nodes.iter() {
        let marker = new_node_marker(&node.run_id().unwrap());
        node.cli(&["SET", NODE_MARKER_KEY, &marker]).unwrap();
    }
    let etcd = tokio::task::spawn_blocking(Etcd::start)
        .await
        .unwrap()
        .unwrap();
    let etcd_urls: Vec<String> = etcd
        .endpoints()
        .iter()
        .map(|e| e.replacen("http://", "etcd://", 1))
        .collect();
    let zk = tokio::task::spawn_blocking(ZooKeeper::start)
        .await
        .unwrap()
        .unwrap();
    // The backends side by side: one line each.
    tokio::join!(
        the_family_contract("Redlock", config(&nodes.urls())),
        the_family_contract("etcd", config(&etcd_urls)),
        the_family_contract("ZooKeeper", config(&[zk.url()])),
    );
}
