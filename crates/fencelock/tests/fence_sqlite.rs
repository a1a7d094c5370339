//! Fenced writes against a real SQLite database in a temporary file.
#![cfg(feature = "sqlite")]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencelock::fence::{FenceOptions, SqliteFence};
use fencelock::{Error, ErrorKind};
use rusqlite::Connection;

/// A temporary database with the test's application table `events`.
struct Db {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Db {
    fn new() -> Db {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fence.db");
        let db = Db { _dir: dir, path };
        db.fence()
            .unfenced(|conn| {
                conn.execute_batch(
                    "CREATE TABLE events (
                         seq INTEGER PRIMARY KEY AUTOINCREMENT,
                         resource TEXT NOT NULL,
                         token INTEGER NOT NULL,
                         writer TEXT NOT NULL DEFAULT ''
                     )",
                )
            })
            .unwrap();
        db
    }

    fn fence(&self) -> SqliteFence {
        SqliteFence::open(&self.path).unwrap()
    }

    /// The tokens of `resource`'s events, in commit order.
    fn events(&self, resource: &str) -> Vec<u64> {
        events(&self.path, resource)
    }
}

fn events(path: &Path, resource: &str) -> Vec<u64> {
    // A separate connection: it sees only what was committed.
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT token FROM events WHERE resource = ?1 ORDER BY seq")
        .unwrap();
    stmt.query_map([resource], |row| row.get::<_, i64>(0))
        .unwrap()
        .map(|token| u64::try_from(token.unwrap()).unwrap())
        .collect()
}

/// A fenced write that records its token as an event of `resource`.
fn record(fence: &SqliteFence, resource: &str, token: u64) -> fencelock::Result<()> {
    fence.write(resource, token, |tx| {
        tx.execute(
            "INSERT INTO events (resource, token) VALUES (?1, ?2)",
            rusqlite::params![resource, i64::try_from(token)?],
        )?;
        Ok(())
    })
}

#[test]
fn newer_and_equal_tokens_apply_and_an_older_one_changes_nothing() {
    let db = Db::new();
    let fence = db.fence();
    assert_eq!(fence.last_token("r").unwrap(), None);

    record(&fence, "r", 5).unwrap();
    assert_eq!(fence.last_token("r").unwrap(), Some(5));
    record(&fence, "r", 5).unwrap(); // the same holder writing again
    record(&fence, "r", 7).unwrap();
    assert_eq!(fence.last_token("r").unwrap(), Some(7));

    let mut called = false;
    let err = fence
        .write("r", 6, |tx| {
            called = true;
            tx.execute("INSERT INTO events (resource, token) VALUES ('r', 6)", [])?;
            tx.execute("DELETE FROM events WHERE token = 5", [])?;
            Ok(())
        })
        .unwrap_err();
    match &err {
        Error::StaleToken {
            resource,
            presented,
            current,
            ..
        } => assert_eq!((resource.as_str(), *presented, *current), ("r", 6, 7)),
        other => panic!("expected StaleToken, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert!(!called, "the closure of a stale write must not run");
    assert_eq!(db.events("r"), [5, 5, 7]);
    assert_eq!(fence.last_token("r").unwrap(), Some(7));

    // Resources are fenced independently; a stale write on one leaves the other usable.
    record(&fence, "other", 1).unwrap();
    assert_eq!(fence.last_token("other").unwrap(), Some(1));
    record(&fence, "r", 8).unwrap();
    assert_eq!(db.events("r"), [5, 5, 7, 8]);
}

#[test]
fn a_failing_closure_rolls_back_its_statements_and_the_token() {
    let db = Db::new();
    let fence = db.fence();
    record(&fence, "r", 5).unwrap();

    #[derive(Debug)]
    struct OutOfStock;
    impl std::fmt::Display for OutOfStock {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("out of stock")
        }
    }
    impl std::error::Error for OutOfStock {}

    let err = fence
        .write("r", 9, |tx| -> Result<(), fencelock::fence::BoxError> {
            tx.execute("INSERT INTO events (resource, token) VALUES ('r', 9)", [])?;
            Err(OutOfStock.into())
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Storage);
    let source = std::error::Error::source(&err).unwrap();
    assert!(source.downcast_ref::<OutOfStock>().is_some(), "{err}");
    assert_eq!(
        fence.last_token("r").unwrap(),
        Some(5),
        "token not recorded"
    );
    assert_eq!(db.events("r"), [5]);

    // An SQL error inside the closure: same, with rusqlite's error as the source.
    let err = fence
        .write("r", 9, |tx| {
            tx.execute("INSERT INTO events (resource, token) VALUES ('r', 9)", [])?;
            tx.execute("INSERT INTO no_such_table VALUES (1)", [])?;
            Ok(())
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Storage);
    let source = std::error::Error::source(&err).unwrap();
    assert!(source.downcast_ref::<rusqlite::Error>().is_some(), "{err}");
    assert_eq!(fence.last_token("r").unwrap(), Some(5));
    assert_eq!(db.events("r"), [5]);

    // The fence is still usable afterwards.
    record(&fence, "r", 9).unwrap();
    assert_eq!(db.events("r"), [5, 9]);
}

#[test]
fn a_panicking_closure_rolls_back_and_the_fence_stays_usable() {
    let db = Db::new();
    let fence = db.fence();
    record(&fence, "r", 5).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fence.write("r", 6, |tx| -> Result<(), fencelock::fence::BoxError> {
            tx.execute("INSERT INTO events (resource, token) VALUES ('r', 6)", [])?;
            panic!("closure panicked on purpose");
        })
    }));
    assert!(panicked.is_err());
    assert_eq!(fence.last_token("r").unwrap(), Some(5));
    record(&fence, "r", 6).unwrap();
    assert_eq!(db.events("r"), [5, 6]);
}

#[test]
fn tokens_above_i64_max_are_refused_before_any_write() {
    let db = Db::new();
    let fence = db.fence();
    let mut called = false;
    let err = fence
        .write("r", u64::MAX, |_| {
            called = true;
            Ok(())
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(!called);
    assert_eq!(fence.last_token("r").unwrap(), None);
    record(&fence, "r", i64::MAX as u64).unwrap();
    assert_eq!(fence.last_token("r").unwrap(), Some(i64::MAX as u64));
}

#[test]
fn the_table_name_is_configurable_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("custom.db");
    let options = FenceOptions::new()
        .with_table("my_fence")
        .with_busy_timeout(Duration::from_secs(5));
    let fence = SqliteFence::open_with(&path, &options).unwrap();
    assert_eq!(fence.table(), "my_fence");
    fence.write("r", 3, |_| Ok(())).unwrap();
    let conn = Connection::open(&path).unwrap();
    let token: i64 = conn
        .query_row(
            "SELECT token FROM my_fence WHERE resource = 'r'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(token, 3);

    let bad = FenceOptions::new().with_table("fence; DROP TABLE x");
    let err = SqliteFence::open_with(&path, &bad).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);

    // An existing connection works too, in memory even.
    let fence =
        SqliteFence::from_connection(Connection::open_in_memory().unwrap(), &options).unwrap();
    fence.write("r", 1, |_| Ok(())).unwrap();
    assert!(format!("{fence:?}").contains("my_fence"));
}

/// Writers with their own connections to one file race with interleaved tokens. Whatever the
/// interleaving, the accepted writes, in commit order, must carry non-decreasing tokens, and
/// every refusal must name a token the storage had accepted that is newer than the presented one.
#[test]
fn concurrent_writers_never_apply_an_older_token_after_a_newer_one() {
    const WRITERS: u64 = 4;
    const WRITES: u64 = 40;
    let db = Arc::new(Db::new());
    let tokens = Arc::new(AtomicU64::new(1));
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let db = Arc::clone(&db);
            let tokens = Arc::clone(&tokens);
            std::thread::spawn(move || {
                let fence = db.fence();
                let (mut applied, mut stale) = (Vec::new(), Vec::new());
                for i in 0..WRITES {
                    let token = tokens.fetch_add(1, Ordering::SeqCst);
                    // A pause between getting the token and writing, like a holder's work (or
                    // its GC pause), lets newer tokens overtake this one.
                    std::thread::sleep(Duration::from_micros(fastrand::u64(0..2_000)));
                    // Every third write is repeated, as one holder writing twice.
                    let times = if i % 3 == 0 { 2 } else { 1 };
                    for _ in 0..times {
                        let result = fence.write("shared", token, |tx| {
                            tx.execute(
                                "INSERT INTO events (resource, token, writer) VALUES ('shared', ?1, ?2)",
                                rusqlite::params![i64::try_from(token)?, format!("w{w}")],
                            )?;
                            Ok(())
                        });
                        match result {
                            Ok(()) => applied.push(token),
                            Err(Error::StaleToken {
                                presented, current, ..
                            }) => {
                                assert_eq!(presented, token);
                                assert!(current > presented, "refused {presented} for {current}");
                                stale.push((presented, current));
                            }
                            Err(other) => panic!("writer {w}: unexpected error: {other}"),
                        }
                    }
                }
                (applied, stale)
            })
        })
        .collect();

    let mut applied = Vec::new();
    let mut stale = Vec::new();
    for thread in threads {
        let (a, s) = thread.join().unwrap();
        applied.extend(a);
        stale.extend(s);
    }
    let committed = db.events("shared");
    assert!(
        committed.windows(2).all(|pair| pair[0] <= pair[1]),
        "an older token was applied after a newer one: {committed:?}"
    );
    applied.sort_unstable();
    let mut sorted = committed.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted, applied,
        "exactly the accepted writes were committed"
    );
    for (presented, current) in &stale {
        assert!(
            committed.contains(current),
            "refusal of {presented} named {current}, which was never committed"
        );
    }
    let fence = db.fence();
    assert_eq!(
        fence.last_token("shared").unwrap(),
        committed.last().copied()
    );
    eprintln!(
        "sqlite: {} writes applied, {} refused as stale",
        committed.len(),
        stale.len()
    );
}

/// The async wrapper runs writes on the blocking pool; tasks with their own fences race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_async_from_concurrent_tasks_keeps_tokens_in_order() {
    let db = Arc::new(Db::new());
    let tokens = Arc::new(AtomicU64::new(1));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let db = Arc::clone(&db);
            let tokens = Arc::clone(&tokens);
            tokio::spawn(async move {
                let fence = db.fence();
                let mut stale = 0;
                for _ in 0..25 {
                    let token = tokens.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_micros(fastrand::u64(0..2_000))).await;
                    let result = fence
                        .write_async("async", token, move |tx| {
                            tx.execute(
                                "INSERT INTO events (resource, token) VALUES ('async', ?1)",
                                [i64::try_from(token)?],
                            )?;
                            Ok(())
                        })
                        .await;
                    match result {
                        Ok(()) => {}
                        Err(Error::StaleToken { .. }) => stale += 1,
                        Err(other) => panic!("unexpected error: {other}"),
                    }
                }
                stale
            })
        })
        .collect();
    let mut stale = 0;
    for task in tasks {
        stale += task.await.unwrap();
    }
    let committed = db.events("async");
    assert!(
        committed.windows(2).all(|pair| pair[0] <= pair[1]),
        "{committed:?}"
    );
    assert_eq!(committed.len() + stale, 100);
}

#[test]
fn a_fence_row_is_bound_to_the_lock_of_its_first_token() {
    use fencelock::FencingToken;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bound.db");
    // A table from before rows were bound: no issuer column, one row written with a bare token.
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE fencelock_fence (resource TEXT PRIMARY KEY NOT NULL, token INTEGER NOT NULL);
         INSERT INTO fencelock_fence VALUES ('r', 5);",
    )
    .unwrap();
    drop(conn);
    let fence = SqliteFence::open(&path).unwrap();
    let redis = |t| FencingToken::new(t, "redis:r");
    let etcd = |t| FencingToken::new(t, "etcd:r");

    // The old row takes its first bound token, and is bound from then on.
    fence.write("r", redis(6), |_| Ok(())).unwrap();
    fence.write("r", redis(6), |_| Ok(())).unwrap();
    let ran = std::cell::Cell::new(false);
    for other in [
        etcd(1_000),
        FencingToken::new(1_000, "redis:other"),
        1_000.into(),
    ] {
        let err = fence
            .write("r", other.clone(), |_| {
                ran.set(true);
                Ok(())
            })
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{other}: {err}");
        assert!(err.to_string().contains("redis:r"), "{err}");
    }
    assert!(!ran.get(), "the closure ran for a token of another lock");
    assert_eq!(fence.last_token("r").unwrap(), Some(6));
    assert_eq!(
        fence.write("r", redis(5), |_| Ok(())).unwrap_err().kind(),
        ErrorKind::StaleToken
    );
    fence.write("r", redis(7), |_| Ok(())).unwrap();

    // A new row is bound by its first token; a row of bare tokens stays unbound.
    fence.write("s", etcd(3), |_| Ok(())).unwrap();
    assert!(fence.write("s", redis(4), |_| Ok(())).is_err());
    fence.write("u", 1, |_| Ok(())).unwrap();
    fence.write("u", 2, |_| Ok(())).unwrap();
    // Reopening keeps the bindings.
    drop(fence);
    let fence = SqliteFence::open(&path).unwrap();
    assert!(fence.write("r", etcd(99), |_| Ok(())).is_err());
    assert_eq!(fence.last_token("r").unwrap(), Some(7));
}

#[test]
fn processes_opening_an_old_table_at_once_add_the_issuer_column_once() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("old{round}.db"));
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE fencelock_fence (resource TEXT PRIMARY KEY NOT NULL, token INTEGER NOT NULL);",
        )
        .unwrap();
        drop(conn);
        let barrier = Arc::new(std::sync::Barrier::new(6));
        let openers: Vec<_> = (0..6)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteFence::open(&path).map(|_| ())
                })
            })
            .collect();
        for opener in openers {
            opener.join().unwrap().unwrap();
        }
    }
}

/// A fencing client on `nodes` with a short TTL, so that a holder can outlive its lock.
fn fenced_client(nodes: &fencelock_testkit::RedisNodes, ttl: Duration) -> fencelock::Client {
    fencelock::Client::new(
        fencelock::Config::new(nodes.urls())
            .with_fencing(true)
            .with_quarantine(false)
            .with_ttl(ttl)
            .with_node_timeout(Duration::from_millis(500)),
    )
    .unwrap()
}

/// Sets the fence row of `resource` to `token` by hand: the storage's last token, as a lock
/// whose tokens started again below it (every node lost its counter) leaves it.
fn set_row(path: &Path, resource: &str, token: u64) {
    let conn = Connection::open(path).unwrap();
    let changed = conn
        .execute(
            "UPDATE fencelock_fence SET token = ?2 WHERE resource = ?1",
            rusqlite::params![resource, i64::try_from(token).unwrap()],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_stale_but_a_live_holder_below_the_row_is_a_reset() {
    let nodes = fencelock_testkit::RedisNodes::start(3).unwrap();
    // Two clients (two processes): a task that still has its paused lock's handle may not ask
    // its own client for the same lock again (`Error::AlreadyHeld`, tests/reentrancy.rs).
    let client = fenced_client(&nodes, Duration::from_millis(800));
    let other = fenced_client(&nodes, Duration::from_millis(800));
    let db = Db::new();
    let fence = db.fence();

    // A holder takes its token, then pauses past its validity; another holder writes.
    let paused = client.try_acquire("r").await.unwrap();
    let paused_token = paused.fencing_token().unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!paused.is_valid());
    let next = other.acquire("r").await.unwrap();
    let next_token = next.fencing_token().unwrap().value();
    record_issued(&fence, "r", next.fencing_token().unwrap()).unwrap();
    // The paused holder wakes up: stale, with the message that says not to retry.
    let err = record_issued(&fence, "r", paused_token).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    assert!(err.to_string().contains("the lock was lost"), "{err}");
    assert_eq!(db.events("r"), [next_token]);
    drop(paused);

    // The live holder's token is below the row's last: the storage's last came from tokens that
    // started again below it. A reset, not a stale holder: the message says how to get back.
    let current = next_token + 1_000_000;
    set_row(&db.path, "r", current);
    assert!(next.is_valid());
    let err = record_issued(&fence, "r", next.fencing_token().unwrap()).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains(&format!("run `fencelock reseed --above {current}`")),
        "{shown}"
    );
    match &err {
        Error::CounterReset {
            resource,
            presented,
            current: last,
            issuer,
            ..
        } => {
            assert_eq!(
                (resource.as_str(), *presented, *last),
                ("r", next_token, current)
            );
            assert_eq!(issuer.as_deref(), Some("redis:r"));
        }
        other => panic!("expected CounterReset, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert_eq!(db.events("r"), [next_token], "a refused write changed data");

    // The same through a guard, whose token follows the guard's live state.
    let guard = next.auto_extend(fencelock::AutoExtend::new());
    let err = record_issued(&fence, "r", guard.fencing_token().unwrap()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CounterReset, "{err}");
    // A token that does not know its lock's state: stale, as before.
    let err = record_issued(
        &fence,
        "r",
        fencelock::FencingToken::new(next_token, "redis:r"),
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    guard.release().await.unwrap();
    assert_eq!(db.events("r"), [next_token]);
}

/// The way back after the reset: reseed above the storage's last, take the lock again, write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reset_reseeding_above_the_storages_last_lets_the_next_holder_write() {
    let nodes = fencelock_testkit::RedisNodes::start(3).unwrap();
    let client = fenced_client(&nodes, Duration::from_secs(10));
    let db = Db::new();
    let fence = db.fence();
    let lock = client.acquire("r").await.unwrap();
    let token = lock.fencing_token().unwrap().value();
    record_issued(&fence, "r", lock.fencing_token().unwrap()).unwrap();
    let current = token + 1_000_000;
    set_row(&db.path, "r", current);
    let err = record_issued(&fence, "r", lock.fencing_token().unwrap()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CounterReset, "{err}");
    lock.release().await.unwrap();

    let votes = client.reseed_fence(current).await.unwrap();
    assert_eq!(votes.granted(), 3, "{votes}");
    let lock = client.acquire("r").await.unwrap();
    assert!(lock.fencing_token().unwrap().value() > current);
    record_issued(&fence, "r", lock.fencing_token().unwrap()).unwrap();
    assert_eq!(
        db.events("r"),
        [token, lock.fencing_token().unwrap().value()]
    );
    lock.release().await.unwrap();
}

/// [`record`] with a token that knows its lock.
fn record_issued(
    fence: &SqliteFence,
    resource: &str,
    token: fencelock::FencingToken,
) -> fencelock::Result<()> {
    let value = i64::try_from(token.value()).unwrap();
    fence.write(resource, token, |tx| {
        tx.execute(
            "INSERT INTO events (resource, token) VALUES (?1, ?2)",
            rusqlite::params![resource, value],
        )?;
        Ok(())
    })
}
