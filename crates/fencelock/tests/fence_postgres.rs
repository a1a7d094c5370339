//! Fenced writes against a real PostgreSQL 15 server that the testkit starts.
#![cfg(feature = "postgres")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencelock::fence::{BoxError, FenceOptions, PostgresFence};
use fencelock::{Error, ErrorKind};
use fencelock_testkit::Postgres;

/// A server with the test's application table `events`.
async fn start() -> (Postgres, PostgresFence) {
    let pg = tokio::task::spawn_blocking(Postgres::start)
        .await
        .unwrap()
        .expect("start PostgreSQL");
    let fence = PostgresFence::connect(&pg.url()).await.unwrap();
    fence
        .client()
        .batch_execute(
            "CREATE TABLE events (
                 seq BIGSERIAL PRIMARY KEY,
                 resource TEXT NOT NULL,
                 token BIGINT NOT NULL
             )",
        )
        .await
        .unwrap();
    (pg, fence)
}

/// The tokens of `resource`'s events, in insertion order (which is commit order: writers of
/// one resource hold its fence row's lock from before their insert until their commit).
async fn events(fence: &PostgresFence, resource: &str) -> Vec<u64> {
    fence
        .client()
        .query(
            "SELECT token FROM events WHERE resource = $1 ORDER BY seq",
            &[&resource],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| u64::try_from(row.get::<_, i64>(0)).unwrap())
        .collect()
}

/// A fenced write that records its token as an event of `resource`.
async fn record(fence: &mut PostgresFence, resource: &str, token: u64) -> fencelock::Result<()> {
    fence
        .write(resource, token, async |tx| {
            tx.execute(
                "INSERT INTO events (resource, token) VALUES ($1, $2)",
                &[&resource, &i64::try_from(token)?],
            )
            .await?;
            Ok(())
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_and_equal_tokens_apply_and_an_older_one_changes_nothing() {
    let (_pg, mut fence) = start().await;
    assert_eq!(fence.last_token("r").await.unwrap(), None);

    record(&mut fence, "r", 5).await.unwrap();
    assert_eq!(fence.last_token("r").await.unwrap(), Some(5));
    record(&mut fence, "r", 5).await.unwrap(); // the same holder writing again
    record(&mut fence, "r", 7).await.unwrap();
    assert_eq!(fence.last_token("r").await.unwrap(), Some(7));

    let mut called = false;
    let err = fence
        .write("r", 6, async |tx| {
            called = true;
            tx.execute("INSERT INTO events (resource, token) VALUES ('r', 6)", &[])
                .await?;
            tx.execute("DELETE FROM events WHERE token = 5", &[])
                .await?;
            Ok(())
        })
        .await
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
    assert!(!called, "the closure of a stale write must not run");
    assert_eq!(events(&fence, "r").await, [5, 5, 7]);
    assert_eq!(fence.last_token("r").await.unwrap(), Some(7));

    // Resources are fenced independently, and the connection is fine after a refusal.
    record(&mut fence, "other", 1).await.unwrap();
    record(&mut fence, "r", 8).await.unwrap();
    assert_eq!(events(&fence, "r").await, [5, 5, 7, 8]);
    assert_eq!(fence.last_token("other").await.unwrap(), Some(1));

    // Tokens above i64::MAX are refused before any I/O.
    let err = record(&mut fence, "r", u64::MAX).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert_eq!(fence.last_token("r").await.unwrap(), Some(8));
    record(&mut fence, "max", i64::MAX as u64).await.unwrap();
    assert_eq!(
        fence.last_token("max").await.unwrap(),
        Some(i64::MAX as u64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_closure_rolls_back_its_statements_and_the_token() {
    let (_pg, mut fence) = start().await;
    record(&mut fence, "r", 5).await.unwrap();

    #[derive(Debug)]
    struct OutOfStock;
    impl std::fmt::Display for OutOfStock {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("out of stock")
        }
    }
    impl std::error::Error for OutOfStock {}

    let err = fence
        .write("r", 9, async |tx| -> Result<(), BoxError> {
            tx.execute("INSERT INTO events (resource, token) VALUES ('r', 9)", &[])
                .await?;
            Err(OutOfStock.into())
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Storage);
    let source = std::error::Error::source(&err).unwrap();
    assert!(source.downcast_ref::<OutOfStock>().is_some(), "{err}");
    assert_eq!(fence.last_token("r").await.unwrap(), Some(5));
    assert_eq!(events(&fence, "r").await, [5]);

    // An SQL error: the transaction is aborted; the source is tokio-postgres's error.
    let err = fence
        .write("r", 9, async |tx| {
            tx.execute("INSERT INTO events (resource, token) VALUES ('r', 9)", &[])
                .await?;
            tx.execute("INSERT INTO no_such_table VALUES (1)", &[])
                .await?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Storage);
    let source = std::error::Error::source(&err).unwrap();
    assert!(
        source.downcast_ref::<tokio_postgres::Error>().is_some(),
        "{err}"
    );
    assert_eq!(fence.last_token("r").await.unwrap(), Some(5));
    assert_eq!(events(&fence, "r").await, [5]);

    // A first write to a new resource that fails leaves no fence row behind.
    let err = fence
        .write("new", 3, async |_| -> Result<(), BoxError> {
            Err("nope".into())
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Storage);
    assert_eq!(fence.last_token("new").await.unwrap(), None);

    record(&mut fence, "r", 9).await.unwrap();
    assert_eq!(events(&fence, "r").await, [5, 9]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_names_the_server_without_its_password() {
    let (pg, _fence) = start().await;

    // The key-value form works as well as the URL, and a custom table name is used.
    let options = FenceOptions::new().with_table("public.my_fence");
    let mut fence = PostgresFence::connect_with(&pg.conn_str(), &options)
        .await
        .unwrap();
    assert_eq!(fence.table(), "public.my_fence");
    fence.write("r", 4, async |_| Ok(())).await.unwrap();
    let row = fence
        .client()
        .query_one("SELECT token FROM my_fence WHERE resource = 'r'", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 4);
    assert!(format!("{fence:?}").contains("my_fence"));

    let bad = FenceOptions::new().with_table("x; DROP TABLE events");
    let err = PostgresFence::connect_with(&pg.url(), &bad)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);

    // Nothing listens on port 1: the error names the server, with the password hidden.
    let err = PostgresFence::connect("postgres://app:hunter2@127.0.0.1:1/shop")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Storage);
    let shown = format!("{err} {err:?}");
    assert!(
        shown.contains("postgres://app:***@127.0.0.1:1/shop"),
        "{shown}"
    );
    assert!(!shown.contains("hunter2"), "{shown}");

    let err = PostgresFence::connect("host=127.0.0.1 port=notaport password=hunter2")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err}");
}

/// Tasks with their own connections race with interleaved tokens on one resource (which none
/// of them has written before, so their first writes also race to create its fence row).
/// Whatever the interleaving, the accepted writes in commit order must carry non-decreasing
/// tokens, and every refusal must name a newer token that was committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_never_apply_an_older_token_after_a_newer_one() {
    const WRITERS: usize = 4;
    const WRITES: u64 = 30;
    let (pg, fence) = start().await;
    let url = pg.url();
    let tokens = Arc::new(AtomicU64::new(1));
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| {
            let url = url.clone();
            let tokens = Arc::clone(&tokens);
            tokio::spawn(async move {
                // Connecting together also races the fence table's creation (a no-op here).
                let mut fence = PostgresFence::connect(&url).await.unwrap();
                let (mut applied, mut stale) = (Vec::new(), Vec::new());
                for i in 0..WRITES {
                    let token = tokens.fetch_add(1, Ordering::SeqCst);
                    // A pause between getting the token and writing, like a holder's work (or
                    // its GC pause), lets newer tokens overtake this one.
                    tokio::time::sleep(Duration::from_micros(fastrand::u64(0..3_000))).await;
                    // Every third write is repeated, as one holder writing twice.
                    for _ in 0..if i % 3 == 0 { 2 } else { 1 } {
                        match record(&mut fence, "shared", token).await {
                            Ok(()) => applied.push(token),
                            Err(Error::StaleToken {
                                presented, current, ..
                            }) => {
                                assert_eq!(presented, token);
                                assert!(current > presented, "refused {presented} for {current}");
                                stale.push((presented, current));
                            }
                            Err(other) => panic!("unexpected error: {other}"),
                        }
                    }
                }
                (applied, stale)
            })
        })
        .collect();
    let mut applied = Vec::new();
    let mut stale = Vec::new();
    for task in tasks {
        let (a, s) = task.await.unwrap();
        applied.extend(a);
        stale.extend(s);
    }
    let committed = events(&fence, "shared").await;
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
    assert_eq!(
        fence.last_token("shared").await.unwrap(),
        committed.last().copied()
    );
    eprintln!(
        "postgres: {} writes applied, {} refused as stale",
        committed.len(),
        stale.len()
    );
}

/// Fresh database: several fences connecting at once must not trip over each other creating
/// the fence table (plain `CREATE TABLE IF NOT EXISTS` can fail on a catalog unique index).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_connecting_at_once_create_the_table_once() {
    let pg = tokio::task::spawn_blocking(Postgres::start)
        .await
        .unwrap()
        .expect("start PostgreSQL");
    let options = FenceOptions::new().with_table("racing_fence");
    let connects: Vec<_> = (0..6)
        .map(|_| {
            let url = pg.url();
            let options = options.clone();
            tokio::spawn(async move { PostgresFence::connect_with(&url, &options).await })
        })
        .collect();
    for connect in connects {
        let mut fence = connect.await.unwrap().expect("connect and set up");
        fence.write("r", 1, async |_| Ok(())).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_row_is_bound_to_the_lock_of_its_first_token() {
    use fencelock::FencingToken;
    let pg = tokio::task::spawn_blocking(Postgres::start)
        .await
        .unwrap()
        .expect("start PostgreSQL");
    // A table from before rows were bound: no issuer column, one row written with a bare token.
    let (client, conn) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(
            "CREATE TABLE fencelock_fence (resource TEXT PRIMARY KEY, token BIGINT NOT NULL);
             INSERT INTO fencelock_fence VALUES ('r', 5);",
        )
        .await
        .unwrap();
    let mut fence = PostgresFence::connect(&pg.url()).await.unwrap();
    let redis = |t| FencingToken::new(t, "redis:r");
    let etcd = |t| FencingToken::new(t, "etcd:r");

    fence.write("r", redis(6), async |_| Ok(())).await.unwrap();
    fence.write("r", redis(6), async |_| Ok(())).await.unwrap();
    for other in [
        etcd(1_000),
        FencingToken::new(1_000, "redis:other"),
        1_000.into(),
    ] {
        let mut ran = false;
        let err = fence
            .write("r", other.clone(), async |_| {
                ran = true;
                Ok(())
            })
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{other}: {err}");
        assert!(err.to_string().contains("redis:r"), "{err}");
        assert!(!ran, "the closure ran for a token of another lock");
    }
    assert_eq!(fence.last_token("r").await.unwrap(), Some(6));
    let err = fence
        .write("r", redis(5), async |_| Ok(()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken);
    fence.write("r", redis(7), async |_| Ok(())).await.unwrap();

    // A new row is bound by its first token (the row is created in the same transaction).
    fence.write("s", etcd(3), async |_| Ok(())).await.unwrap();
    assert!(fence.write("s", redis(4), async |_| Ok(())).await.is_err());
    // A second connection sees the bindings.
    let mut other = PostgresFence::connect(&pg.url()).await.unwrap();
    assert!(other.write("r", etcd(99), async |_| Ok(())).await.is_err());
    assert_eq!(other.last_token("r").await.unwrap(), Some(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_does_not_wait_for_fenced_writes_in_progress() {
    let (pg, mut busy) = start().await;
    busy.write("r", 1, async |_| Ok(())).await.unwrap();
    let (inside_tx, inside) = tokio::sync::oneshot::channel();
    let writer = tokio::spawn(async move {
        busy.write("r", 2, async |_| {
            let _ = inside_tx.send(());
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(())
        })
        .await
    });
    inside.await.unwrap();
    // The setup must not take a lock that waits for the write's transaction.
    let url = pg.url();
    let fence = tokio::time::timeout(Duration::from_secs(3), PostgresFence::connect(&url))
        .await
        .expect("connecting waited for a fenced write in progress")
        .unwrap();
    assert_eq!(fence.last_token("r").await.unwrap(), Some(1));
    writer.await.unwrap().unwrap();
}

/// [`record`] with a token that knows its lock.
async fn record_issued(
    fence: &mut PostgresFence,
    resource: &str,
    token: fencelock::FencingToken,
) -> fencelock::Result<()> {
    let value = i64::try_from(token.value()).unwrap();
    fence
        .write(resource, token, async |tx| {
            tx.execute(
                "INSERT INTO events (resource, token) VALUES ($1, $2)",
                &[&resource, &value],
            )
            .await?;
            Ok(())
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_stale_but_a_live_holder_below_the_row_is_a_reset() {
    let nodes = fencelock_testkit::RedisNodes::start(3).unwrap();
    let new_client = || {
        fencelock::Client::new(
            fencelock::Config::new(nodes.urls())
                .with_fencing(true)
                .with_quarantine(false)
                .with_ttl(Duration::from_millis(800))
                .with_node_timeout(Duration::from_millis(500)),
        )
        .unwrap()
    };
    // Two clients (two processes): a task that still has its paused lock's handle may not ask
    // its own client for the same lock again (`Error::AlreadyHeld`, tests/reentrancy.rs).
    let (client, other) = (new_client(), new_client());
    let (_pg, mut fence) = start().await;

    // A holder takes its token, then pauses past its validity; another holder writes.
    let paused = client.try_acquire("r").await.unwrap();
    let paused_token = paused.fencing_token().unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!paused.is_valid());
    let next = other.acquire("r").await.unwrap();
    let next_token = next.fencing_token().unwrap().value();
    record_issued(&mut fence, "r", next.fencing_token().unwrap())
        .await
        .unwrap();
    let err = record_issued(&mut fence, "r", paused_token)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    assert!(err.to_string().contains("the lock was lost"), "{err}");
    assert_eq!(events(&fence, "r").await, [next_token]);
    drop(paused);

    // The storage's last is above the live holder's token, as tokens that started again below
    // it leave it: a reset, whose message says how to get back.
    let current = next_token + 1_000_000;
    let changed = fence
        .client()
        .execute(
            "UPDATE fencelock_fence SET token = $2 WHERE resource = $1",
            &[&"r", &i64::try_from(current).unwrap()],
        )
        .await
        .unwrap();
    assert_eq!(changed, 1);
    assert!(next.is_valid());
    let err = record_issued(&mut fence, "r", next.fencing_token().unwrap())
        .await
        .unwrap_err();
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
    let guard = next.auto_extend(fencelock::AutoExtend::new());
    let err = record_issued(&mut fence, "r", guard.fencing_token().unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CounterReset, "{err}");
    guard.release().await.unwrap();
    assert_eq!(
        events(&fence, "r").await,
        [next_token],
        "a refused write changed data"
    );
    assert_eq!(fence.last_token("r").await.unwrap(), Some(current));
}
