//! The fence inside the caller's own sqlx transaction, against a real PostgreSQL 15 server that
//! the testkit starts.
#![cfg(feature = "sqlx-postgres")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::fence::{FenceOptions, SqlxPostgresFence};
use fencelock::{Error, ErrorKind, FencingToken};
use fencelock_testkit::Postgres;
use sqlx::PgPool;

/// A server, a pool on it with the test's application table `events`, and the fence.
async fn start() -> (Postgres, PgPool, SqlxPostgresFence) {
    let pg = tokio::task::spawn_blocking(Postgres::start)
        .await
        .unwrap()
        .expect("start PostgreSQL");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(6)
        .connect(&pg.url())
        .await
        .unwrap();
    sqlx::raw_sql(
        "CREATE TABLE events (
             seq BIGSERIAL PRIMARY KEY,
             resource TEXT NOT NULL,
             token BIGINT NOT NULL
         )",
    )
    .execute(&pool)
    .await
    .unwrap();
    let fence = SqlxPostgresFence::setup(&pool, &FenceOptions::default())
        .await
        .unwrap();
    (pg, pool, fence)
}

/// The committed tokens of `resource`'s events, in insertion order.
async fn events(pool: &PgPool, resource: &str) -> Vec<u64> {
    sqlx::query_scalar::<_, i64>("SELECT token FROM events WHERE resource = $1 ORDER BY seq")
        .bind(resource)
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .map(|t| u64::try_from(t).unwrap())
        .collect()
}

async fn insert_event(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    resource: &str,
    token: u64,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO events (resource, token) VALUES ($1, $2)")
        .bind(resource)
        .bind(i64::try_from(token).unwrap())
        .execute(&mut **tx)
        .await
        .map(drop)
}

/// A fenced write in the caller's transaction: admit, insert the event, commit.
async fn record(
    pool: &PgPool,
    fence: &SqlxPostgresFence,
    resource: &str,
    token: impl Into<FencingToken>,
) -> fencelock::Result<()> {
    let token: FencingToken = token.into();
    let value = token.value();
    let mut tx = pool.begin().await.unwrap();
    fence.admit(&mut tx, resource, token).await?;
    insert_event(&mut tx, resource, value).await.unwrap();
    tx.commit().await.unwrap();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_caller_transaction_leaves_the_fence_row_unchanged() {
    let (_pg, pool, fence) = start().await;
    assert_eq!(fence.last_token(&pool, "r").await.unwrap(), None);
    record(&pool, &fence, "r", 5).await.unwrap();
    record(&pool, &fence, "r", 5).await.unwrap(); // the same holder writing again
    assert_eq!(fence.last_token(&pool, "r").await.unwrap(), Some(5));

    // Admitted, then rolled back by the caller: neither the token nor the statement stays.
    let mut tx = pool.begin().await.unwrap();
    fence.admit(&mut tx, "r", 9).await.unwrap();
    insert_event(&mut tx, "r", 9).await.unwrap();
    assert_eq!(fence.last_token(&mut *tx, "r").await.unwrap(), Some(9));
    tx.rollback().await.unwrap();
    assert_eq!(fence.last_token(&pool, "r").await.unwrap(), Some(5));
    // Dropped without a commit: the same.
    let mut tx = pool.begin().await.unwrap();
    fence.admit(&mut tx, "r", 11).await.unwrap();
    insert_event(&mut tx, "r", 11).await.unwrap();
    drop(tx);
    // A first write of a new resource that rolls back leaves no fence row.
    let mut tx = pool.begin().await.unwrap();
    fence.admit(&mut tx, "new", 3).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(fence.last_token(&pool, "new").await.unwrap(), None);

    assert_eq!(fence.last_token(&pool, "r").await.unwrap(), Some(5));
    assert_eq!(events(&pool, "r").await, [5, 5]);
    // Older tokens than 9 and 11 are still admitted: those were never accepted.
    record(&pool, &fence, "r", 7).await.unwrap();
    assert_eq!(events(&pool, "r").await, [5, 5, 7]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_token_is_refused_and_the_callers_statement_is_not_committed() {
    let (_pg, pool, fence) = start().await;
    record(&pool, &fence, "r", FencingToken::new(9, "redis:r"))
        .await
        .unwrap();

    // The caller's statement runs first, then the fence refuses the stale token.
    let mut tx = pool.begin().await.unwrap();
    insert_event(&mut tx, "r", 3).await.unwrap();
    let err = fence
        .admit(&mut tx, "r", FencingToken::new(3, "redis:r"))
        .await
        .unwrap_err();
    match &err {
        Error::StaleToken {
            resource,
            presented,
            current,
            ..
        } => assert_eq!((resource.as_str(), *presented, *current), ("r", 3, 9)),
        other => panic!("expected StaleToken, got {other:?}"),
    }
    // Even a caller that ignores the error and commits does not commit its statement: the
    // refusal aborted the transaction, and PostgreSQL rolls an aborted transaction back.
    let _ = tx.commit().await;
    assert_eq!(events(&pool, "r").await, [9]);
    assert_eq!(fence.last_token(&pool, "r").await.unwrap(), Some(9));

    // With `?`, the transaction is dropped: rolled back too.
    let refused = async {
        let mut tx = pool.begin().await.unwrap();
        insert_event(&mut tx, "r", 4).await.unwrap();
        fence
            .admit(&mut tx, "r", FencingToken::new(4, "redis:r"))
            .await?;
        tx.commit().await.unwrap();
        Ok::<_, Error>(())
    };
    assert_eq!(refused.await.unwrap_err().kind(), ErrorKind::StaleToken);

    // A live lock's token below the row's last: a reset, refused the same way.
    let live =
        FencingToken::new(5, "redis:r").with_valid_until(Instant::now() + Duration::from_secs(600));
    let err = record(&pool, &fence, "r", live).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CounterReset, "{err}");
    assert!(
        err.to_string().contains("fencelock reseed --above 9"),
        "{err}"
    );
    // A token of another lock, or a bare number, on a bound row.
    for other in [FencingToken::new(99, "etcd:r"), FencingToken::unbound(99)] {
        let err = record(&pool, &fence, "r", other).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    }
    // A token the column cannot hold, refused before any I/O; the transaction still aborts.
    let mut tx = pool.begin().await.unwrap();
    insert_event(&mut tx, "r", 1).await.unwrap();
    let err = fence
        .admit(&mut tx, "r", i64::MAX as u64 + 1)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let _ = tx.commit().await;
    assert_eq!(events(&pool, "r").await, [9]);
    record(&pool, &fence, "r", FencingToken::new(10, "redis:r"))
        .await
        .unwrap();
    assert_eq!(events(&pool, "r").await, [9, 10]);
}

/// Writers on one pool, in their own transactions, with tokens from one counter: the accepted
/// writes in commit order carry non-decreasing tokens, and each refusal names a committed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_never_apply_an_older_token_after_a_newer_one() {
    const WRITERS: usize = 4;
    const WRITES: u64 = 25;
    let (_pg, pool, fence) = start().await;
    let tokens = Arc::new(AtomicU64::new(1));
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| {
            let (pool, fence, tokens) = (pool.clone(), fence.clone(), Arc::clone(&tokens));
            tokio::spawn(async move {
                let (mut applied, mut stale) = (Vec::new(), Vec::new());
                for _ in 0..WRITES {
                    let token = tokens.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_micros(fastrand::u64(0..3_000))).await;
                    match record(&pool, &fence, "shared", token).await {
                        Ok(()) => applied.push(token),
                        Err(Error::StaleToken {
                            presented, current, ..
                        }) => {
                            assert!(current > presented, "refused {presented} for {current}");
                            stale.push(current);
                        }
                        Err(other) => panic!("unexpected error: {other}"),
                    }
                }
                (applied, stale)
            })
        })
        .collect();
    let (mut applied, mut stale) = (Vec::new(), Vec::new());
    for task in tasks {
        let (a, s) = task.await.unwrap();
        applied.extend(a);
        stale.extend(s);
    }
    let committed = events(&pool, "shared").await;
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
    assert!(stale.iter().all(|current| committed.contains(current)));
    assert_eq!(
        fence.last_token(&pool, "shared").await.unwrap(),
        committed.last().copied()
    );
}
