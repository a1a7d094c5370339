//! The read-write lock on real nodes (Redlock over three, and one node): never a writer
//! together with anyone under concurrent readers and writers (exact), readers share, a writer
//! behind a stream of readers gets in, a dead reader stops counting after its own TTL, readers
//! learn the last writer's token, and the write side is the mutex.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::{Client, Config, ErrorKind, RetryPolicy};
use fencelock_testkit::RedisNodes;

fn config(urls: Vec<String>, ttl: Duration) -> Config {
    Config::new(urls)
        .with_ttl(ttl)
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

fn client(nodes: &RedisNodes) -> Client {
    Client::new(config(nodes.urls(), Duration::from_secs(30))).unwrap()
}

/// Who is inside, checked by every holder on entry: a writer must find nobody, a reader no
/// writer.
#[derive(Default)]
struct Inside {
    readers: AtomicUsize,
    writers: AtomicUsize,
    most_readers: AtomicUsize,
    violations: AtomicUsize,
}

impl Inside {
    fn enter_write(&self) {
        if self.writers.fetch_add(1, Ordering::SeqCst) != 0
            || self.readers.load(Ordering::SeqCst) != 0
        {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave_write(&self) {
        self.writers.fetch_sub(1, Ordering::SeqCst);
    }

    fn enter_read(&self) {
        let now = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_readers.fetch_max(now, Ordering::SeqCst);
        if self.writers.load(Ordering::SeqCst) != 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave_read(&self) {
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn mixed_load(
    nodes: &RedisNodes,
    readers: usize,
    writers: usize,
    rounds: usize,
) -> Arc<Inside> {
    let inside = Arc::new(Inside::default());
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for k in 0..readers + writers {
        // One client each: separate connections, as separate processes would have.
        let rw = client(nodes).rwlock("rw:mixed").unwrap();
        let (inside, tokens) = (inside.clone(), tokens.clone());
        let writer = k < writers;
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
                if writer {
                    // Every other round barges in with single attempts, outside the line (as
                    // a mutex holder of the name or another client's first attempt does): the
                    // exclusion must not rest on the line.
                    let lock = if round % 2 == 1 {
                        loop {
                            match rw.try_write().await {
                                Ok(lock) => break lock,
                                Err(e) if e.kind() == ErrorKind::Contention => {
                                    tokio::time::sleep(Duration::from_millis(3)).await
                                }
                                Err(e) => panic!("{e}"),
                            }
                        }
                    } else {
                        rw.write().await.unwrap()
                    };
                    inside.enter_write();
                    tokens
                        .lock()
                        .unwrap()
                        .push(lock.fencing_token().unwrap().value());
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(2..10))).await;
                    inside.leave_write();
                    lock.release().await.unwrap();
                } else {
                    let lock = rw.read().await.unwrap();
                    inside.enter_read();
                    assert_eq!(
                        lock.fencing_token().map(|t| t.value()),
                        None,
                        "a reader has no fencing token"
                    );
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(5..30))).await;
                    inside.leave_read();
                    lock.release().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Writers' tokens are all distinct and each grant's is above the previous grant's (the
    // grants are serial: the vector's order is their order).
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), writers * rounds);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    inside
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_a_writer_with_anyone_and_readers_share() {
    let nodes = RedisNodes::start(3).unwrap();
    let inside = mixed_load(&nodes, 8, 3, 5).await;
    let most = inside.most_readers.load(Ordering::SeqCst);
    println!("8 readers and 3 writers x 5 rounds on 3 nodes: at most {most} readers at once");
    assert_eq!(inside.violations.load(Ordering::SeqCst), 0);
    assert!(most >= 2, "readers never shared ({most} at most)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_one_node_too() {
    let nodes = RedisNodes::start(1).unwrap();
    let inside = mixed_load(&nodes, 4, 2, 4).await;
    assert_eq!(inside.violations.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn readers_share_and_the_mutex_is_the_write_side() {
    let nodes = RedisNodes::start(3).unwrap();
    let (a, b, m) = (client(&nodes), client(&nodes), client(&nodes));
    let r1 = a.rwlock("rw:share").unwrap().try_read().await.unwrap();
    let r2 = b.rwlock("rw:share").unwrap().try_read().await.unwrap();
    assert_ne!(r1.owner(), r2.owner());
    // Readers exclude writers and mutex holders of the same name.
    let err = m.rwlock("rw:share").unwrap().try_write().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    let err = m.try_acquire("rw:share").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    r1.release().await.unwrap();
    let err = m.try_acquire("rw:share").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "one reader left: {err}");
    r2.release().await.unwrap();
    // The last reader gone, the key is free: a mutex holder excludes readers and writers.
    let held = m.try_acquire("rw:share").await.unwrap();
    let err = a.rwlock("rw:share").unwrap().try_read().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    let err = b.rwlock("rw:share").unwrap().try_write().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_task_holding_the_lock_is_refused_at_once() {
    let nodes = RedisNodes::start(3).unwrap();
    let rw = client(&nodes).rwlock("rw:again").unwrap();
    let read = rw.read().await.unwrap();
    let started = Instant::now();
    // A second read would wait behind a writer that waits for the first: refused instead.
    assert_eq!(rw.read().await.unwrap_err().kind(), ErrorKind::AlreadyHeld);
    assert_eq!(rw.write().await.unwrap_err().kind(), ErrorKind::AlreadyHeld);
    assert!(started.elapsed() < Duration::from_secs(5));
    read.release().await.unwrap();
    let write = rw.write().await.unwrap();
    assert_eq!(
        rw.try_read().await.unwrap_err().kind(),
        ErrorKind::AlreadyHeld
    );
    write.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_behind_a_stream_of_readers_gets_in() {
    let nodes = RedisNodes::start(3).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer_in = Arc::new(AtomicBool::new(false));
    let overtook = Arc::new(AtomicUsize::new(0));
    let waiting_since = Arc::new(std::sync::Mutex::new(None::<Instant>));
    // Four readers, each holding 150 ms and asking again at once, staggered: the lock is never
    // free of readers, so without the line a writer would wait for ever.
    let mut readers = Vec::new();
    for k in 0..4u64 {
        let rw = client(&nodes).rwlock("rw:stream").unwrap();
        let (stop, writer_in, overtook, since) = (
            stop.clone(),
            writer_in.clone(),
            overtook.clone(),
            waiting_since.clone(),
        );
        readers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(40 * k)).await;
            let mut grants = 0;
            while !stop.load(Ordering::SeqCst) {
                let asked = Instant::now();
                let lock = rw.read().await.unwrap();
                grants += 1;
                // A reader that asked a second after the writer began to wait, and got in while
                // the writer still had not, overtook it.
                let late = since
                    .lock()
                    .unwrap()
                    .is_some_and(|w| asked > w + Duration::from_secs(1));
                if late && !writer_in.load(Ordering::SeqCst) {
                    overtook.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
                lock.release().await.unwrap();
            }
            grants
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let writer = client(&nodes).rwlock("rw:stream").unwrap();
    let started = Instant::now();
    *waiting_since.lock().unwrap() = Some(started);
    let lock = tokio::time::timeout(Duration::from_secs(60), writer.write())
        .await
        .expect("the writer got in while readers kept arriving")
        .unwrap();
    let waited = started.elapsed();
    writer_in.store(true, Ordering::SeqCst);
    lock.release().await.unwrap();
    // Readers go on after the writer.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let mut grants = 0;
    for r in readers {
        grants += r.await.unwrap();
    }
    println!("the writer waited {waited:?} behind 4 readers ({grants} read grants)");
    assert!(waited < Duration::from_secs(20), "{waited:?}");
    assert_eq!(
        overtook.load(Ordering::SeqCst),
        0,
        "readers that asked after the writer queued got in before it"
    );
}

#[tokio::test]
async fn a_dead_readers_entry_expires_and_the_writer_gets_in() {
    let nodes = RedisNodes::start(3).unwrap();
    // The dead reader: a 2 s TTL, its lock forgotten (no release, no extension: as if its
    // process were killed).
    let short = Client::new(config(nodes.urls(), Duration::from_secs(2))).unwrap();
    let dead = short.rwlock("rw:dead").unwrap().read().await.unwrap();
    let dead_until = Instant::now() + Duration::from_secs(2);
    std::mem::forget(dead);
    // A live reader with a long TTL, that leaves after half a second.
    let live = client(&nodes)
        .rwlock("rw:dead")
        .unwrap()
        .read()
        .await
        .unwrap();
    let leaves = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        live.release().await.unwrap();
    });
    let writer = client(&nodes).rwlock("rw:dead").unwrap();
    let started = Instant::now();
    let lock = writer.write().await.unwrap();
    let got = Instant::now();
    leaves.await.unwrap();
    println!(
        "the writer got in {:?} after it asked, {:?} after the dead reader's TTL",
        got - started,
        got.saturating_duration_since(dead_until)
    );
    // Not before the dead reader's entry expired (less the drift), and well before the live
    // reader's 30 s TTL would have: per-reader expiry.
    assert!(
        got + Duration::from_millis(200) >= dead_until,
        "{:?}",
        dead_until - got
    );
    assert!(
        got - started < Duration::from_secs(15),
        "{:?}",
        got - started
    );
    lock.release().await.unwrap();
}

#[tokio::test]
async fn readers_learn_the_last_writers_token() {
    let nodes = RedisNodes::start(3).unwrap();
    let (w, r) = (client(&nodes), client(&nodes));
    let rw = r.rwlock("rw:last").unwrap();
    let first = rw.try_read().await.unwrap();
    assert_eq!(first.last_writer_token(), Some(0), "no writer yet");
    first.release().await.unwrap();
    let mut last = 0;
    for _ in 0..3 {
        let write = w.rwlock("rw:last").unwrap().write().await.unwrap();
        let token = write.fencing_token().unwrap().value();
        assert!(token > last);
        assert_eq!(write.last_writer_token(), None);
        write.release().await.unwrap();
        last = token;
        let read = rw.read().await.unwrap();
        assert_eq!(read.last_writer_token(), Some(last));
        read.release().await.unwrap();
    }
    // A plain mutex holder of the name records nothing.
    let mutex = w.acquire("rw:last").await.unwrap();
    assert!(mutex.fencing_token().unwrap().value() > last);
    mutex.release().await.unwrap();
    let read = rw.read().await.unwrap();
    assert_eq!(read.last_writer_token(), Some(last));
    read.release().await.unwrap();
    // Without fencing there is no token to learn.
    let plain = Client::new(config(nodes.urls(), Duration::from_secs(30)).with_fencing(false))
        .unwrap()
        .rwlock("rw:last")
        .unwrap();
    let read = plain.read().await.unwrap();
    assert_eq!(read.last_writer_token(), None);
    read.release().await.unwrap();
}

#[tokio::test]
async fn scoped_reads_and_writes_run_under_their_locks() {
    let nodes = RedisNodes::start(3).unwrap();
    let rw = client(&nodes).rwlock("rw:scoped").unwrap();
    let token = rw
        .with_write(async |ctx| {
            assert_eq!(ctx.resource(), "rw:scoped");
            ctx.fencing_token().unwrap().value()
        })
        .await
        .unwrap();
    let (seen, fencing) = rw
        .with_read(async |ctx| {
            (
                ctx.last_writer_token(),
                ctx.fencing_token().map(|t| t.value()),
            )
        })
        .await
        .unwrap();
    assert_eq!(seen, Some(token));
    assert_eq!(fencing, None);
    #[derive(Debug)]
    enum WorkError {
        Lock(#[allow(dead_code)] fencelock::Error),
        Own,
    }
    impl From<fencelock::Error> for WorkError {
        fn from(e: fencelock::Error) -> Self {
            WorkError::Lock(e)
        }
    }
    let failed: Result<(), WorkError> = rw.try_with_read(async |_| Err(WorkError::Own)).await;
    assert!(matches!(failed, Err(WorkError::Own)), "{failed:?}");
    // Released in every case: a writer gets in at once.
    let again = rw.try_write().await.unwrap();
    assert!(again.fencing_token().unwrap().value() > token);
    again.release().await.unwrap();
}

#[tokio::test]
async fn an_auto_extended_read_lock_outlives_its_ttl() {
    let nodes = RedisNodes::start(3).unwrap();
    let short = Client::new(config(nodes.urls(), Duration::from_millis(600))).unwrap();
    let guard = short
        .rwlock("rw:long")
        .unwrap()
        .read()
        .await
        .unwrap()
        .auto_extend(fencelock::AutoExtend::new());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!guard.is_lost());
    let err = client(&nodes)
        .rwlock("rw:long")
        .unwrap()
        .try_write()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_read_lock_whose_entries_vanish_fires_its_lost_signal() {
    let nodes = RedisNodes::start(3).unwrap();
    let short = Client::new(config(nodes.urls(), Duration::from_millis(900))).unwrap();
    let guard = short
        .rwlock("rw:lost")
        .unwrap()
        .read()
        .await
        .unwrap()
        .auto_extend(fencelock::AutoExtend::new());
    // The reader's entries go from a quorum (an operator's DEL, a node's data lost), once the
    // acquisition's last request has landed (the round returned at a quorum).
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..2 {
        nodes
            .node(i)
            .cli(&["DEL", "fencelock:readers:rw:lost", "rw:lost"])
            .unwrap();
    }
    tokio::time::timeout(Duration::from_secs(10), guard.lost().fired())
        .await
        .expect("the lost signal fires");
    assert_eq!(guard.lost().cause(), Some(fencelock::LostCause::NotHeld));
    assert_eq!(guard.release().await.unwrap_err().kind(), ErrorKind::Lost);
}
