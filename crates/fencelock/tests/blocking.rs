//! `fencelock::blocking` from plain `std::thread`s (no tokio in the test's code) against real
//! redis-server nodes: mutual exclusion among threads, the lost signal, the release of a dropped
//! lock by the background task, a clear refusal inside an async runtime, and the fences (SQLite,
//! and PostgreSQL on a real server) written from plain threads.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use fencelock::blocking::Client;
use fencelock::{AutoExtend, Config, ErrorKind, LostCause, RetryPolicy};
use fencelock_testkit::{RedisNode, RedisNodes};

const NODE_TIMEOUT: Duration = Duration::from_millis(500);

fn config(urls: Vec<String>) -> Config {
    Config::new(urls)
        .with_quarantine(false)
        .with_node_timeout(NODE_TIMEOUT)
        .with_retry(RetryPolicy::new().with_wait(Duration::from_secs(60)))
}

#[test]
fn threads_exclude_each_other() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(nodes.urls()).with_fencing(true)).unwrap();
    let inside = Arc::new(AtomicU32::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (client, inside, tokens) = (client.clone(), inside.clone(), tokens.clone());
            thread::spawn(move || {
                for _ in 0..5 {
                    client
                        .with_lock("blocking-counter", |ctx| {
                            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                            tokens
                                .lock()
                                .unwrap()
                                .push(ctx.fencing_token().unwrap().value());
                            thread::sleep(Duration::from_millis(5));
                            inside.fetch_sub(1, Ordering::SeqCst);
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 20);
    // Each holder's fencing token is above the one before it.
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    client.close();
}

#[test]
fn the_lost_signal_fires_on_a_plain_thread() {
    let node = RedisNode::start().unwrap();
    let client = Client::new(config(vec![node.url()]).with_ttl(Duration::from_secs(2))).unwrap();
    let guard = client
        .try_acquire("blocking-lost")
        .unwrap()
        .auto_extend(AutoExtend::new());
    let lost = guard.lost();
    assert!(!lost.wait_timeout(Duration::from_millis(100)));
    // Someone deletes the key: the next extension finds it gone.
    node.cli(&["DEL", "blocking-lost"]).unwrap();
    let waiter = thread::spawn(move || {
        lost.wait();
        lost.cause()
    });
    assert_eq!(waiter.join().unwrap(), Some(LostCause::NotHeld));
    assert!(guard.is_lost());
    assert_eq!(guard.release().unwrap_err().kind(), ErrorKind::Lost);
}

#[test]
fn a_dropped_lock_is_released_by_the_background_task() {
    let node = RedisNode::start().unwrap();
    // A TTL far longer than the test waits: only a release frees the resource in time.
    let ttl = Duration::from_secs(60);
    let a = Client::new(config(vec![node.url()]).with_ttl(ttl)).unwrap();
    let b = Client::new(config(vec![node.url()]).with_ttl(ttl)).unwrap();
    let lock = a.try_acquire("blocking-drop").unwrap();
    assert_eq!(
        b.try_acquire("blocking-drop").unwrap_err().kind(),
        ErrorKind::Contention
    );
    let started = Instant::now();
    drop(lock);
    let lock = b
        .acquire_with(
            "blocking-drop",
            &RetryPolicy::new().with_wait(Duration::from_secs(30)),
        )
        .unwrap();
    assert!(started.elapsed() < ttl / 2, "{:?}", started.elapsed());
    lock.release().unwrap();
    a.close();
    b.close();
}

#[test]
fn inside_an_async_runtime_it_refuses_instead_of_blocking_it() {
    let node = RedisNode::start().unwrap();
    let client = Client::new(config(vec![node.url()])).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt.block_on(async { client.try_acquire("blocking-inside").unwrap_err() });
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(err.to_string().contains("spawn_blocking"), "{err}");
    // Outside, the same client works.
    client
        .try_acquire("blocking-inside")
        .unwrap()
        .release()
        .unwrap();
}

#[test]
fn with_lock_keeps_the_lock_while_the_calling_thread_blocks() {
    let node = RedisNode::start().unwrap();
    let ttl = Duration::from_secs(2);
    let client = Client::new(config(vec![node.url()]).with_ttl(ttl)).unwrap();
    let other = Client::new(config(vec![node.url()]).with_ttl(ttl)).unwrap();
    // The work blocks its thread for more than two TTLs: only the runtime thread's extensions
    // keep the lock meanwhile.
    let held_throughout = client
        .with_lock("blocking-long", |ctx| {
            thread::sleep(ttl * 5 / 2);
            let contended = other.try_acquire("blocking-long").unwrap_err().kind();
            (ctx.is_lost(), contended)
        })
        .unwrap();
    assert_eq!(held_throughout, (false, ErrorKind::Contention));
}

/// Two fencing clients on `nodes`: one whose locks run out after 1 s, for a holder that
/// pauses past its TTL, and one for the next holder, which waits (up to a minute) until then.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn fencing_clients(nodes: &RedisNodes) -> (Client, Client) {
    let brief = Client::new(
        config(nodes.urls())
            .with_fencing(true)
            .with_ttl(Duration::from_secs(1))
            .with_node_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let client = Client::new(config(nodes.urls()).with_fencing(true)).unwrap();
    (brief, client)
}

/// Blocking code writes fenced too: the blocking lock's fencing token goes to the (blocking)
/// SQLite fence, which binds the row to the lock and refuses the paused holder's older token.
#[cfg(feature = "sqlite")]
#[test]
fn a_blocking_holder_writes_through_the_fence_and_a_stale_one_is_refused() {
    use fencelock::fence::SqliteFence;

    let nodes = RedisNodes::start(3).unwrap();
    let (brief, client) = fencing_clients(&nodes);
    let dir = tempfile::tempdir().unwrap();
    let fence = SqliteFence::open(dir.path().join("blocking.db")).unwrap();
    // A holder whose lock runs out while it is paused.
    let paused = brief.acquire("blocking:fenced").unwrap();
    let old = paused.fencing_token().unwrap();
    // Granted only once the paused holder's keys expired.
    let next = client.acquire("blocking:fenced").unwrap();
    let token = next.fencing_token().unwrap();
    assert!(token.value() > old.value());
    fence.write("blocking:fenced", token, |_| Ok(())).unwrap();
    let err = fence.write("blocking:fenced", old, |_| Ok(())).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    // The guard's token too, bound to the same lock.
    let guard = next.auto_extend(AutoExtend::new());
    fence
        .write(
            "blocking:fenced",
            guard.fencing_token().unwrap(),
            |_| Ok(()),
        )
        .unwrap();
    guard.release().unwrap();
    drop(paused);
}

/// The blocking PostgreSQL fence from plain threads: each thread opens its own fence (one
/// connection) on a real PostgreSQL; the live holder's write applies, the paused holder's older
/// token is refused before its statements run, and nothing of it reaches the table.
#[cfg(feature = "postgres")]
#[test]
fn a_blocking_holder_writes_through_the_postgres_fence_and_a_stale_one_is_refused() {
    use fencelock::blocking::PostgresFence;
    use fencelock::fence::BoxError;
    use fencelock::FencingToken;
    use fencelock_testkit::Postgres;

    /// A fenced write that records its token as an event; `ran` says whether the closure ran.
    fn record(url: &str, token: FencingToken) -> (fencelock::Result<()>, bool) {
        let mut fence = PostgresFence::connect(url).unwrap();
        let mut ran = false;
        let value = i64::try_from(token.value()).unwrap();
        let result = fence.write("blocking:pg", token, |tx| {
            ran = true;
            tx.execute(
                "INSERT INTO events (resource, token) VALUES ('blocking:pg', $1)",
                &[&value],
            )?;
            Ok(())
        });
        (result, ran)
    }

    let nodes = RedisNodes::start(3).unwrap();
    let pg = Postgres::start().unwrap();
    let url = pg.url();
    let mut fence = PostgresFence::connect(&url).unwrap();
    fence
        .client()
        .batch_execute(
            "CREATE TABLE events (seq BIGSERIAL PRIMARY KEY, resource TEXT NOT NULL, token BIGINT NOT NULL)",
        )
        .unwrap();
    let (brief, client) = fencing_clients(&nodes);

    // A holder whose lock runs out while it is paused; the next holder writes from its thread.
    let paused = brief.acquire("blocking:pg").unwrap();
    let old = paused.fencing_token().unwrap();
    // Granted only once the paused holder's keys expired.
    let next = client.acquire("blocking:pg").unwrap();
    let token = next.fencing_token().unwrap();
    assert!(token.value() > old.value());
    let live = {
        let (url, token) = (url.clone(), token.clone());
        thread::spawn(move || record(&url, token))
    };
    let (result, ran) = live.join().unwrap();
    result.unwrap();
    assert!(ran);

    // The paused holder wakes up on its own thread: refused, its closure never runs.
    let stale = {
        let url = url.clone();
        thread::spawn(move || record(&url, old))
    };
    let (result, ran) = stale.join().unwrap();
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    assert!(!ran, "the closure of a stale write ran");
    assert!(err.to_string().contains("the lock was lost"), "{err}");

    // A failing closure rolls back its statements and the token.
    let guard = next.auto_extend(AutoExtend::new());
    let newer_row: Result<(), BoxError> = Err("out of stock".into());
    let err = fence
        .write("blocking:pg", guard.fencing_token().unwrap(), |tx| {
            tx.execute(
                "INSERT INTO events (resource, token) VALUES ('blocking:pg', -1)",
                &[],
            )?;
            newer_row
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Storage, "{err}");
    // The guard's token is the live holder's: accepted again.
    fence
        .write("blocking:pg", guard.fencing_token().unwrap(), |_| Ok(()))
        .unwrap();
    let tokens: Vec<i64> = fence
        .client()
        .query("SELECT token FROM events ORDER BY seq", &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(tokens, [i64::try_from(token.value()).unwrap()]);
    assert_eq!(
        fence.last_token("blocking:pg").unwrap(),
        Some(token.value())
    );
    guard.release().unwrap();
    drop(paused);
}

/// The blocking PostgreSQL fence's errors: an unreachable server is named without its password,
/// and a call from inside an async runtime is refused instead of blocking (or panicking) it.
#[cfg(feature = "postgres")]
#[test]
fn the_blocking_postgres_fence_names_the_server_and_refuses_inside_a_runtime() {
    use fencelock::blocking::PostgresFence;

    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://app:s3cret@127.0.0.1:{port}/shop");
    let err = PostgresFence::connect(&url).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Storage, "{err}");
    let shown = err.to_string();
    assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt.block_on(async { PostgresFence::connect(&url).unwrap_err() });
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("fence::PostgresFence"), "{err}");
}

/// Issue 29 item 11: a program that drops a lock (an early `?`) and then its client, without
/// `close`, leaves no key: the drop of the last handle waited for the release, whose answers
/// came back before it returned (so the nodes are read at once, not polled).
#[test]
fn dropping_the_client_without_close_releases_a_dropped_lock() {
    let nodes = RedisNodes::start(3).unwrap();
    for i in 0..5 {
        let key = format!("blocking-no-close-{i}");
        let client = Client::new(
            config(nodes.urls())
                .with_ttl(Duration::from_secs(60))
                .with_node_timeout(Duration::from_secs(2)),
        )
        .unwrap();
        let lock = client.acquire(&key).unwrap();
        drop(lock);
        drop(client);
        for node in nodes.iter() {
            assert_eq!(
                node.cli(&["EXISTS", &key]).unwrap(),
                "0",
                "round {i}: {key} is still held on {} after the client was dropped",
                node.url()
            );
        }
    }
}
