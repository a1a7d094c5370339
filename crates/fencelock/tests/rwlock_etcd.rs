//! The read-write lock on a real etcd: never a writer together with anyone, readers share, a
//! writer behind a stream of readers gets in (creation-revision order), a dead reader's lease
//! expires and the writer gets in, readers learn exactly the last writer's token, and the
//! mutex is the write side.
#![cfg(feature = "etcd")]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::{Client, Config, ErrorKind, RetryPolicy};
use fencelock_testkit::Etcd;

fn client(etcd: &Etcd, ttl: Duration) -> Client {
    let url = etcd.endpoint().replacen("http://", "etcd://", 1);
    let config = Config::new([url])
        .with_ttl(ttl)
        .with_retry(RetryPolicy::new().with_wait(Duration::from_secs(60)));
    Client::new(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_a_writer_with_anyone_and_readers_share() {
    let etcd = Etcd::start().unwrap();
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for k in 0..8 {
        let rw = client(&etcd, Duration::from_secs(10))
            .rwlock("rw:etcd")
            .unwrap();
        let (readers, writers, most, violations) = (
            readers.clone(),
            writers.clone(),
            most.clone(),
            violations.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..4 {
                if k < 2 {
                    let lock = rw.write().await.unwrap();
                    tokens.push(lock.fencing_token().unwrap().value());
                    if writers.fetch_add(1, Ordering::SeqCst) != 0
                        || readers.load(Ordering::SeqCst) != 0
                    {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    writers.fetch_sub(1, Ordering::SeqCst);
                    lock.release().await.unwrap();
                } else {
                    let lock = rw.read().await.unwrap();
                    assert_eq!(lock.fencing_token().map(|t| t.value()), None);
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    if writers.load(Ordering::SeqCst) != 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    lock.release().await.unwrap();
                }
            }
            tokens
        }));
    }
    let mut tokens = Vec::new();
    for t in tasks {
        tokens.extend(t.await.unwrap());
    }
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 8, "distinct revisions");
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    let most = most.load(Ordering::SeqCst);
    println!("etcd: at most {most} readers at once");
    assert!(most >= 2, "readers never shared");
}

#[tokio::test]
async fn the_mutex_is_the_write_side_and_readers_learn_its_token() {
    let etcd = Etcd::start().unwrap();
    let (a, b, m) = (
        client(&etcd, Duration::from_secs(10)),
        client(&etcd, Duration::from_secs(10)),
        client(&etcd, Duration::from_secs(10)),
    );
    let rw = a.rwlock("rw:side").unwrap();
    let r1 = rw.try_read().await.unwrap();
    assert_eq!(r1.last_writer_token(), Some(0));
    let r2 = b.rwlock("rw:side").unwrap().try_read().await.unwrap();
    let err = m.try_acquire("rw:side").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let mutex = m.try_acquire("rw:side").await.unwrap();
    let err = rw.try_read().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    mutex.release().await.unwrap();
    let write = m.rwlock("rw:side").unwrap().write().await.unwrap();
    let token = write.fencing_token().unwrap().value();
    write.release().await.unwrap();
    let read = rw.read().await.unwrap();
    assert_eq!(read.last_writer_token(), Some(token));
    read.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_behind_a_stream_of_readers_gets_in() {
    let etcd = Etcd::start().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for k in 0..3u64 {
        let rw = client(&etcd, Duration::from_secs(10))
            .rwlock("rw:stream")
            .unwrap();
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50 * k)).await;
            while !stop.load(Ordering::SeqCst) {
                let lock = rw.read().await.unwrap();
                tokio::time::sleep(Duration::from_millis(150)).await;
                lock.release().await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let started = Instant::now();
    let writer = client(&etcd, Duration::from_secs(10))
        .rwlock("rw:stream")
        .unwrap();
    let lock = tokio::time::timeout(Duration::from_secs(30), writer.write())
        .await
        .expect("the writer got in while readers kept arriving")
        .unwrap();
    let waited = started.elapsed();
    lock.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.await.unwrap();
    }
    println!("etcd: the writer waited {waited:?} behind 3 readers");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
}

#[tokio::test]
async fn a_dead_readers_lease_expires_and_the_writer_gets_in() {
    let etcd = Etcd::start().unwrap();
    let short = client(&etcd, Duration::from_secs(2));
    let dead = short.rwlock("rw:dead").unwrap().read().await.unwrap();
    // Forgotten: no release, no renewal, as if its process were killed.
    std::mem::forget(dead);
    let started = Instant::now();
    let lock = client(&etcd, Duration::from_secs(10))
        .rwlock("rw:dead")
        .unwrap()
        .write()
        .await
        .unwrap();
    let waited = started.elapsed();
    println!("etcd: the writer got in {waited:?} after a dead reader with a 2 s lease");
    assert!(waited >= Duration::from_millis(1500), "{waited:?}");
    assert!(waited < Duration::from_secs(20), "{waited:?}");
    lock.release().await.unwrap();
}
