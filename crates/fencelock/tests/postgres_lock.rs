//! The PostgreSQL lock backend (`postgres://`) against a real PostgreSQL 15 server that the test
//! kit starts: mutual exclusion, tokens that grow across holders and a crash, expiry and
//! takeover, extension, the owner check, auto-extension and the lost signal, and the refusals.
#![cfg(feature = "postgres-lock")]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::{AutoExtend, Client, Config, ErrorKind, LostCause, RetryPolicy, VoteOutcome};
use fencelock_testkit::Postgres;

/// Generous: waits on a loaded 2-core machine.
const LONG: Duration = Duration::from_secs(30);

async fn start() -> Postgres {
    tokio::task::spawn_blocking(Postgres::start)
        .await
        .unwrap()
        .expect("start PostgreSQL")
}

fn client(pg: &Postgres, ttl: Duration) -> Client {
    let config = Config::new([pg.url()])
        .with_ttl(ttl)
        .with_retry(RetryPolicy::new().with_wait(LONG));
    Client::new(config).unwrap()
}

/// How many waiters stand in the line of `resource` (live or not yet cleaned up).
fn in_line(pg: &Postgres, resource: &str) -> usize {
    pg.psql(&format!(
        "SELECT count(*) FROM fencelock_waiters WHERE resource = '{resource}'"
    ))
    .unwrap()
    .parse()
    .unwrap()
}

/// Waits until `n` waiters stand in the line of `resource`.
async fn until_in_line(pg: &Postgres, resource: &str, n: usize) {
    let started = Instant::now();
    while in_line(pg, resource) != n {
        assert!(
            started.elapsed() < LONG,
            "never {n} in the line of {resource}"
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

fn token(lock: &fencelock::Lock) -> u64 {
    lock.fencing_token()
        .expect("a postgres lock has a token")
        .value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_client_is_refused_while_the_first_holds_then_gets_it() {
    let pg = start().await;
    let a = client(&pg, Duration::from_secs(10));
    let b = client(&pg, Duration::from_secs(10));
    // Connecting ahead creates the table: one vote, the database's.
    let votes = a.connect().await;
    assert_eq!(votes.len(), 1);
    assert_eq!(votes.granted(), 1, "{votes}");
    let tables = pg
        .psql("SELECT count(*) FROM pg_class WHERE relname IN ('fencelock_locks', 'fencelock_tokens')")
        .unwrap();
    assert_eq!(tables, "2");

    let lock = a.try_acquire("order:42").await.unwrap();
    assert_eq!(lock.votes().len(), 1);
    assert_eq!(lock.votes().as_slice()[0].outcome, VoteOutcome::Granted);
    let err = b.try_acquire("order:42").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    // Another resource is free.
    b.try_acquire("order:43")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    lock.release().await.unwrap();
    let lock = b.try_acquire("order:42").await.unwrap();
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_right_to_create_uses_the_table_an_administrator_made() {
    let pg = start().await;
    let admin = client(&pg, Duration::from_secs(10));
    assert_eq!(admin.connect().await.granted(), 1);
    // PostgreSQL 15 gives ordinary users no CREATE on the public schema.
    pg.psql(
        "CREATE ROLE app LOGIN; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON fencelock_locks, fencelock_waiters, fencelock_readers TO app; \
         GRANT USAGE ON SEQUENCE fencelock_tokens, fencelock_line TO app;",
    )
    .unwrap();
    let url = pg.url().replacen("postgres@", "app@", 1);
    let app = Client::new(Config::new([url]).with_retry(RetryPolicy::once())).unwrap();
    let mut lock = app.try_acquire("shared-with-admin").await.unwrap();
    lock.extend().await.unwrap();
    assert_eq!(
        admin
            .try_acquire("shared-with-admin")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Contention
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_times_out_while_the_lock_is_held_and_gets_it_after_the_release() {
    let pg = start().await;
    let a = client(&pg, Duration::from_secs(20));
    let b = client(&pg, Duration::from_secs(20));
    let lock = a.try_acquire("queue").await.unwrap();

    let short = RetryPolicy::new().with_wait(Duration::from_millis(800));
    let asked = Instant::now();
    let err = b.acquire_with("queue", &short).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    let fencelock::Error::Timeout { attempts, last, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(*attempts > 1, "{attempts} attempts");
    assert_eq!(last.kind(), ErrorKind::Contention, "{last}");
    // The waiter that gave up left the line.
    assert_eq!(in_line(&pg, "queue"), 0);

    let waiter = tokio::spawn(async move { b.acquire("queue").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t1 = token(&lock);
    lock.release().await.unwrap();
    let second = tokio::time::timeout(LONG, waiter)
        .await
        .expect("the waiter gets the lock")
        .unwrap()
        .unwrap();
    assert!(token(&second) > t1);
    second.release().await.unwrap();
}

/// A TTL of 30 s: a waiter re-checks on its own only at a third of it (its heartbeat), so a
/// grant within [`WOKEN`] of a release came from the release's wake-up.
const LINE_TTL: Duration = Duration::from_secs(30);
/// Far below the heartbeat (10 s) and generous on a loaded machine.
const WOKEN: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_granted_in_line_order_and_woken_by_the_release() {
    let pg = start().await;
    let holder = client(&pg, LINE_TTL);
    let first = holder.try_acquire("fifo").await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    // When the last release was sent.
    let released = Arc::new(std::sync::Mutex::new(Instant::now()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let c = client(&pg, LINE_TTL);
        let (order, released) = (order.clone(), released.clone());
        waiters.push(tokio::spawn(async move {
            let lock = c.acquire("fifo").await.unwrap();
            let latency = released.lock().unwrap().elapsed();
            order.lock().unwrap().push(i);
            let t = token(&lock);
            *released.lock().unwrap() = Instant::now();
            lock.release().await.unwrap();
            (latency, t)
        }));
        // Each waiter stands in line before the next one comes.
        until_in_line(&pg, "fifo", i + 1).await;
    }
    // A try never passes the waiters.
    assert_eq!(
        client(&pg, LINE_TTL)
            .try_acquire("fifo")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Contention
    );
    let mut last = token(&first);
    *released.lock().unwrap() = Instant::now();
    first.release().await.unwrap();
    for w in waiters {
        let (latency, t) = tokio::time::timeout(LONG, w).await.unwrap().unwrap();
        assert!(latency < WOKEN, "woken {latency:?} after the release");
        assert!(t > last, "token {t} after {last}");
        last = t;
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
    assert_eq!(in_line(&pg, "fifo"), 0);
}

/// How long the commit of a release of `late` is held open (a deferred trigger sleeps in it).
const COMMIT_PAUSE: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_comes_while_a_release_commits_is_not_left_asleep() {
    // A release wakes a line only when it sees a place in it. A waiter that comes after the
    // release looked, but whose attempt still sees the lease (the release has not committed),
    // would sleep until its heartbeat unless the release's look and its commit are ordered
    // with the waiter's place by the resource's lock. A deferred trigger holds the release's
    // commit open, after its look, so that the waiter comes inside that window.
    let pg = start().await;
    let patient = |ttl| {
        let config = Config::new([pg.url()])
            .with_ttl(ttl)
            .with_node_timeout(COMMIT_PAUSE * 3)
            .with_retry(RetryPolicy::new().with_wait(LONG));
        Client::new(config).unwrap()
    };
    let holder = patient(LINE_TTL);
    assert_eq!(holder.connect().await.granted(), 1);
    pg.psql(&format!(
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN PERFORM pg_sleep({}); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER slow_commit AFTER DELETE ON fencelock_locks
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD.resource = 'late')
             EXECUTE FUNCTION slow_commit()",
        COMMIT_PAUSE.as_secs()
    ))
    .unwrap();
    let lock = holder.try_acquire("late").await.unwrap();
    let releasing = tokio::spawn(async move {
        lock.release().await.unwrap();
        Instant::now()
    });
    // The release has looked at the line and sleeps in its commit.
    let started = Instant::now();
    while pg
        .psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'")
        .unwrap()
        != "1"
    {
        assert!(
            started.elapsed() < LONG,
            "the release never reached its commit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waiter = patient(LINE_TTL);
    let lock = tokio::time::timeout(LONG, waiter.acquire("late"))
        .await
        .unwrap()
        .unwrap();
    let granted = Instant::now();
    let released = tokio::time::timeout(LONG, releasing)
        .await
        .unwrap()
        .unwrap();
    // Without the order the waiter wakes at its heartbeat, a third of the TTL (10 s) after it
    // entered the line; with it, as soon as the release commits.
    let late = granted.saturating_duration_since(released);
    assert!(late < WOKEN, "granted {late:?} after the release returned");
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_the_first_protocol_version_shares_the_database_with_this_one() {
    // Version 1's take and release stay installed beside version 2's: an older client's calls,
    // sent here by hand as it sends them, meet this version's clients on one resource.
    let pg = start().await;
    let c = client(&pg, LINE_TTL);
    assert_eq!(c.connect().await.granted(), 1);
    let old: u64 = pg
        .psql("SELECT o_token FROM fencelock_take_v1(ARRAY['mixed'], 'old', 30000, NULL)")
        .unwrap()
        .parse()
        .unwrap();
    let err = c.try_acquire("mixed").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    // The old release wakes this version's waiter, which gets a larger token.
    let waiter = client(&pg, LINE_TTL);
    let waiting = tokio::spawn(async move { waiter.acquire("mixed").await });
    until_in_line(&pg, "mixed", 1).await;
    let released = Instant::now();
    let live = pg
        .psql("SELECT fencelock_release_v1(ARRAY['mixed'], 'old')")
        .unwrap();
    assert_eq!(live, "t");
    let lock = tokio::time::timeout(LONG, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        released.elapsed() < WOKEN,
        "woken {:?} after",
        released.elapsed()
    );
    assert!(token(&lock) > old, "token {} after {old}", token(&lock));
    // The old take refuses this version's lease, and takes the resource once it is released.
    let refused = pg
        .psql("SELECT o_token IS NULL FROM fencelock_take_v1(ARRAY['mixed'], 'old', 30000, NULL)")
        .unwrap();
    assert_eq!(refused, "t");
    let new = token(&lock);
    lock.release().await.unwrap();
    let again: u64 = pg
        .psql("SELECT o_token FROM fencelock_take_v1(ARRAY['mixed'], 'old', 30000, NULL)")
        .unwrap()
        .parse()
        .unwrap();
    assert!(again > new, "token {again} after {new}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_never_passes_a_waiter_and_a_place_that_expires_or_is_left_frees_the_line() {
    let pg = start().await;
    let c = client(&pg, LINE_TTL);
    assert_eq!(c.connect().await.granted(), 1);
    // A waiter that stands in line and makes no attempt (a paused process): the lock is free,
    // yet nobody passes it.
    let place = pg
        .psql("SELECT fencelock_enter_v1(ARRAY['gate'], 'paused', 30000)")
        .unwrap();
    let err = c.try_acquire("gate").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    let short = RetryPolicy::new().with_wait(Duration::from_millis(800));
    let err = c.acquire_with("gate", &short).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    // A waiter behind it gets the lock once it leaves, woken by the leaving.
    let behind = client(&pg, LINE_TTL);
    let waiter = tokio::spawn(async move { behind.acquire("gate").await });
    until_in_line(&pg, "gate", 2).await;
    let left = Instant::now();
    pg.psql(&format!(
        "SELECT fencelock_leave_v1(ARRAY['gate'], {place})"
    ))
    .unwrap();
    let lock = tokio::time::timeout(LONG, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(left.elapsed() < WOKEN, "woken {:?} after", left.elapsed());
    lock.release().await.unwrap();

    // A place that is not refreshed expires: the waiter behind wakes at its expiry.
    pg.psql("SELECT fencelock_enter_v1(ARRAY['gate2'], 'paused', 1500)")
        .unwrap();
    let asked = Instant::now();
    let lock = c.acquire("gate2").await.unwrap();
    assert!(
        asked.elapsed() < Duration::from_millis(1500) + WOKEN,
        "{:?}",
        asked.elapsed()
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_the_line() {
    let pg = start().await;
    let holder = client(&pg, LINE_TTL);
    let lock = holder.try_acquire("cancel").await.unwrap();
    let c = client(&pg, LINE_TTL);
    let cancelled = tokio::spawn(async move { c.acquire("cancel").await });
    until_in_line(&pg, "cancel", 1).await;
    let aborted = Instant::now();
    cancelled.abort();
    // Long before the place's 30 s expiry.
    until_in_line(&pg, "cancel", 0).await;
    assert!(
        aborted.elapsed() < WOKEN,
        "left {:?} after",
        aborted.elapsed()
    );

    let next = client(&pg, LINE_TTL);
    let waiter = tokio::spawn(async move { next.acquire("cancel").await });
    until_in_line(&pg, "cancel", 1).await;
    let released = Instant::now();
    lock.release().await.unwrap();
    let lock = tokio::time::timeout(LONG, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < WOKEN, "{:?}", released.elapsed());
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_after_its_connections_are_terminated_and_after_a_server_restart() {
    let pg = start().await;
    let holder = client(&pg, LINE_TTL);
    let lock = holder.try_acquire("restart").await.unwrap();
    let c = client(&pg, LINE_TTL);
    let waiter = tokio::spawn(async move { (c.acquire("restart").await, c) });
    until_in_line(&pg, "restart", 1).await;
    // Every connection but psql's: the holder's, the waiter's and its listening connection.
    let killed: usize = pg
        .psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = 'postgres' AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
        )
        .unwrap()
        .parse()
        .unwrap();
    assert!(killed >= 3, "{killed} connections");
    let released = Instant::now();
    lock.release().await.unwrap();
    let (lock, c) = tokio::time::timeout(LONG, waiter).await.unwrap().unwrap();
    let lock = lock.unwrap();
    assert!(released.elapsed() < WOKEN, "{:?}", released.elapsed());
    let t1 = token(&lock);

    // The lock row and a waiter's place outlive a restart; the waiter listens again and is
    // woken by the release after it.
    let next = client(&pg, LINE_TTL);
    let waiter = tokio::spawn(async move { next.acquire("restart").await });
    until_in_line(&pg, "restart", 1).await;
    let pg = tokio::task::spawn_blocking(move || {
        pg.stop().unwrap();
        pg.restart().unwrap();
        pg
    })
    .await
    .unwrap();
    assert_eq!(in_line(&pg, "restart"), 1);
    // The waiter finds the server back (it retries within its policy's delays) and listens
    // again: wait for its LISTEN, however long a loaded machine takes, then release.
    let started = Instant::now();
    while pg
        .psql(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND query LIKE 'LISTEN%'",
        )
        .unwrap()
        != "1"
    {
        assert!(started.elapsed() < LONG, "the waiter never listened again");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let released = Instant::now();
    lock.release().await.unwrap();
    let lock = tokio::time::timeout(LONG, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < WOKEN, "{:?}", released.elapsed());
    assert!(token(&lock) > t1);
    lock.release().await.unwrap();
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_of_several_resources_is_all_or_nothing_with_one_token() {
    let pg = start().await;
    let ttl = Duration::from_secs(10);
    let a = client(&pg, ttl);
    let b = client(&pg, ttl);
    let one = a.try_acquire("m:b").await.unwrap();
    let err = b.try_acquire_many(&["m:a", "m:b"]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    // Nothing was taken: m:a is free.
    b.try_acquire("m:a").await.unwrap().release().await.unwrap();
    // A waiter for both gets both once m:b is released.
    let waiter = {
        let b = client(&pg, ttl);
        tokio::spawn(async move { b.acquire_many(&["m:b", "m:a"]).await })
    };
    until_in_line(&pg, "m:a", 1).await;
    one.release().await.unwrap();
    let mut both = tokio::time::timeout(LONG, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let tokens = pg
        .psql("SELECT string_agg(DISTINCT token::text, ',') FROM fencelock_locks WHERE resource IN ('m:a', 'm:b')")
        .unwrap();
    assert_eq!(tokens, token(&both).to_string(), "one token for every row");
    for r in ["m:a", "m:b"] {
        assert_eq!(
            a.try_acquire(r).await.unwrap_err().kind(),
            ErrorKind::Contention
        );
    }
    both.extend().await.unwrap();
    both.release().await.unwrap();
    assert_eq!(
        pg.psql("SELECT count(*) FROM fencelock_locks WHERE resource IN ('m:a', 'm:b')")
            .unwrap(),
        "0"
    );

    // Overlapping sets in opposite orders beside single resources: no deadlock, no overlap.
    let busy: Arc<[AtomicBool; 2]> = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for set in [vec![0, 1], vec![1, 0], vec![0], vec![1]] {
        let c = client(&pg, ttl);
        let (busy, overlaps) = (busy.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            let names: Vec<String> = set.iter().map(|i| format!("xy:{i}")).collect();
            for _ in 0..6 {
                let lock = c.acquire_many(&names).await.unwrap();
                for &i in &set {
                    if busy[i].swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                for &i in &set {
                    busy[i].store(false, Ordering::SeqCst);
                }
                lock.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(LONG, t)
            .await
            .expect("no deadlock")
            .unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_racing_for_one_resource_never_hold_it_together() {
    let pg = start().await;
    let busy = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    // Four clients from a fresh database: their first requests also race to create the table.
    for _ in 0..4 {
        let c = client(&pg, Duration::from_secs(10));
        let busy = busy.clone();
        let overlaps = overlaps.clone();
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..8 {
                let lock = c.acquire("shared").await.unwrap();
                if busy.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokens.push(token(&lock));
                tokio::time::sleep(Duration::from_millis(15)).await;
                busy.store(false, Ordering::SeqCst);
                lock.release().await.unwrap();
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "a token was handed out twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_holders_and_a_server_crash() {
    let pg = start().await;
    let clients = [
        client(&pg, Duration::from_secs(10)),
        client(&pg, Duration::from_secs(10)),
    ];
    let mut last = 0;
    for i in 0..20 {
        let lock = clients[i % 2].try_acquire("ledger").await.unwrap();
        let t = token(&lock);
        assert!(t > last, "holder {i}: token {t} after {last}");
        last = t;
        lock.release().await.unwrap();
    }
    // An immediate shutdown (no checkpoint) and crash recovery: the sequence comes back at or
    // past every committed token.
    let pg = tokio::task::spawn_blocking(move || {
        pg.kill().unwrap();
        pg.restart().unwrap();
        pg
    })
    .await
    .unwrap();
    let c = client(&pg, Duration::from_secs(10));
    let lock = c.acquire("ledger").await.unwrap();
    assert!(token(&lock) > last, "{} after {last}", token(&lock));
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lock_is_not_revived_and_is_taken_over_with_a_larger_token() {
    let pg = start().await;
    let ttl = Duration::from_secs(2);
    let a = client(&pg, ttl);
    let b = client(&pg, ttl);

    let mut first = a.try_acquire("job").await.unwrap();
    let t1 = token(&first);
    assert!(first.validity_deadline() <= Instant::now() + ttl);
    assert_eq!(
        b.try_acquire("job").await.unwrap_err().kind(),
        ErrorKind::Contention
    );
    // Past the TTL by the database's clock, the row is still there but expired: no extension
    // revives it, and nobody has taken it yet.
    tokio::time::sleep(ttl + Duration::from_millis(700)).await;
    let err = first.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    let err = a.extend_by_owner("job", first.owner()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");

    let second = b.try_acquire("job").await.unwrap();
    assert!(token(&second) > t1, "{} after {t1}", token(&second));
    // The first holder's release finds it lost, and leaves the second holder's row.
    let err = first.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    assert_eq!(
        a.try_acquire("job").await.unwrap_err().kind(),
        ErrorKind::Contention
    );
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_keeps_the_lock_past_its_ttl() {
    let pg = start().await;
    let ttl = Duration::from_secs(2);
    let a = client(&pg, ttl);
    let b = client(&pg, ttl);

    let mut lock = a.try_acquire("report").await.unwrap();
    let started = Instant::now();
    while started.elapsed() < 2 * ttl + Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = lock.validity_deadline();
        lock.extend().await.unwrap();
        assert!(lock.validity_deadline() > before);
        let err = b.try_acquire("report").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    }
    lock.release().await.unwrap();
    b.try_acquire("report")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_or_extension_by_the_wrong_owner_does_nothing() {
    let pg = start().await;
    let a = client(&pg, Duration::from_secs(10));
    let b = client(&pg, Duration::from_secs(10));

    let lock = a.try_acquire("account:7").await.unwrap();
    let wrong = "0123456789abcdef0123456789abcdef";
    let err = b.release_by_owner("account:7", wrong).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    let err = b.extend_by_owner("account:7", wrong).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    assert_eq!(
        b.try_acquire("account:7").await.unwrap_err().kind(),
        ErrorKind::Contention
    );
    // The right owner, from another client: the owner value is the capability.
    b.extend_by_owner("account:7", lock.owner()).await.unwrap();
    b.release_by_owner("account:7", lock.owner()).await.unwrap();
    b.try_acquire("account:7")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(lock.release().await.unwrap_err().kind(), ErrorKind::Lost);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_connection_is_reopened_and_the_lock_still_extends() {
    let pg = start().await;
    let a = client(&pg, Duration::from_secs(5));
    let mut lock = a.try_acquire("sync").await.unwrap();
    let killed = pg
        .psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = 'postgres' AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
        )
        .unwrap();
    assert_eq!(killed, "1", "the client's one connection");
    // The first try finds the connection closed; the retry within the validity reconnects.
    lock.extend().await.unwrap();
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_blocked_behind_a_row_lock_gives_up_within_the_request_timeout() {
    let pg = Arc::new(start().await);
    let a = client(&pg, Duration::from_secs(20));
    let b = client(&pg, Duration::from_secs(20));
    let mut lock = a.try_acquire("stuck").await.unwrap();
    // Another session holds the row's lock and the resource's advisory lock for 6 s (a long
    // transaction on the lock table).
    let holder = {
        let pg = pg.clone();
        tokio::task::spawn_blocking(move || {
            pg.psql(
                "BEGIN; SELECT 1 FROM fencelock_locks WHERE resource = 'stuck' FOR UPDATE; \
                 SELECT pg_advisory_xact_lock(hashtextextended('stuck', 0)); \
                 SELECT pg_sleep(6); COMMIT;",
            )
        })
    };
    let started = Instant::now();
    loop {
        let sleeping = pg
            .psql(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE query LIKE '%pg_sleep(6)%' AND state = 'active' AND pid <> pg_backend_pid()",
            )
            .unwrap();
        if sleeping == "1" {
            break;
        }
        assert!(
            started.elapsed() < LONG,
            "the blocking session never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The acquisition waits on the advisory lock: it gives up after the request timeout (1 s, the
    // client's and the session's statement_timeout), not when the other transaction ends.
    let asked = Instant::now();
    let err = b.try_acquire("stuck").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "gave up after {:?}",
        asked.elapsed()
    );
    // The holder's extension retries within its validity and gets through once the row is free.
    lock.extend().await.unwrap();
    holder.await.unwrap().unwrap();
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_extension_holds_the_lock_and_the_lost_signal_fires_when_the_server_stops() {
    let pg = start().await;
    let ttl = Duration::from_secs(3);
    let a = client(&pg, ttl);
    let b = client(&pg, ttl);

    let guard = a
        .try_acquire("daemon")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    let lost = guard.lost();
    tokio::time::sleep(ttl + Duration::from_secs(1)).await;
    assert!(!lost.is_fired(), "the engine extends the lock");
    assert_eq!(
        b.try_acquire("daemon").await.unwrap_err().kind(),
        ErrorKind::Contention
    );

    let stopped_at = Instant::now();
    let last_deadline = guard.validity_deadline();
    let _pg = tokio::task::spawn_blocking(move || {
        pg.stop().unwrap();
        pg
    })
    .await
    .unwrap();
    tokio::time::timeout(LONG, lost.fired())
        .await
        .expect("the lost signal fires");
    // No later than the validity deadline the extensions had reached (plus scheduling slack on
    // a loaded machine), and for the database's silence, not for an answer.
    assert!(
        Instant::now() <= guard.validity_deadline().max(last_deadline) + Duration::from_secs(1),
        "fired {:?} after the stop",
        stopped_at.elapsed()
    );
    assert_eq!(lost.cause(), Some(LostCause::Unreachable));
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_unavailable_with_the_reason() {
    // A port nothing listens on (the server was stopped).
    let pg = start().await;
    let url = pg.url();
    tokio::task::spawn_blocking(move || pg.stop().map(|()| pg))
        .await
        .unwrap()
        .unwrap();
    let c = Client::new(
        Config::new([url.replace("postgres@", "postgres:hunter2@")])
            .with_retry(RetryPolicy::once()),
    )
    .unwrap();
    let votes = c.connect().await;
    assert_eq!(votes.len(), 1);
    assert_eq!(votes.failed(), 1, "{votes}");
    let err = c.try_acquire("x").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let text = err.to_string();
    assert!(text.contains("refused"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

#[tokio::test]
async fn bad_urls_are_refused_clearly_and_every_primitive_is_offered() {
    // No server: every refusal here comes before any I/O.
    let url = "postgres://app:hunter2@127.0.0.1:1/shop";
    for (nodes, why) in [
        (
            vec![url, "postgresql://app@127.0.0.1:2/shop"],
            "exactly one URL",
        ),
        (vec![url, "redis://127.0.0.1:6379"], "are mixed"),
        (vec!["postgres://h:port/db"], "port"),
        (vec!["postgres:///db"], "host is missing"),
    ] {
        let err = Client::new(Config::new(nodes.clone())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{nodes:?}");
        let text = err.to_string();
        assert!(text.contains(why), "{nodes:?}: {text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
    let c = Client::new(Config::new([url])).unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
    // Every primitive is offered: making one does no I/O and is not refused.
    c.semaphore("pool", 3).unwrap();
    c.rwlock("doc").unwrap();
    c.election("leader").unwrap();
}

/// The semaphore's contract, written against `Client` only (any backend): `clients` take
/// permits of a semaphore of `n` concurrently, hold each a moment and release it; never more
/// than `n` at once, and no token handed out twice. Returns the most permits seen held at once.
async fn a_semaphore_never_grants_more_than_its_permits(
    clients: Vec<Client>,
    name: &str,
    n: u32,
) -> usize {
    let held = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in clients {
        let sem = c.semaphore(name, n).unwrap();
        let (held, most) = (held.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..5 {
                let permit = sem.acquire().await.unwrap();
                let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokens.push(token(&permit));
                tokio::time::sleep(Duration::from_millis(20)).await;
                held.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(tokio::time::timeout(LONG, t).await.unwrap().unwrap());
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= n as usize, "{most} permits of {n} held at once");
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "a token was handed out twice");
    most
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_of_three_grants_three_permits_never_four_and_wakes_its_waiters() {
    let pg = start().await;
    let c = client(&pg, LINE_TTL);
    let sem = c.semaphore("encoders", 3).unwrap();
    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(sem.try_acquire().await.unwrap());
    }
    let mut slots: Vec<&str> = permits.iter().map(|p| p.resource()).collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 3, "three slots: {slots:?}");
    // Another client (this task holds every permit through `c`).
    let other = client(&pg, LINE_TTL).semaphore("encoders", 3).unwrap();
    let err = other.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    assert!(err.to_string().contains("encoders"), "{err}");

    // Two waiters, in line in turn: each is woken by a release, in line order.
    let mut waiters = Vec::new();
    for i in 0..2 {
        let sem = client(&pg, LINE_TTL).semaphore("encoders", 3).unwrap();
        waiters.push(tokio::spawn(async move { (i, sem.acquire().await) }));
        until_in_line(&pg, "fencelock:permits:encoders", i + 1).await;
    }
    // A try never passes them.
    let err = other.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    let mut got = Vec::new();
    for w in waiters {
        let released = Instant::now();
        permits.pop().unwrap().release().await.unwrap();
        let (i, permit) = tokio::time::timeout(LONG, w).await.unwrap().unwrap();
        assert!(released.elapsed() < WOKEN, "{:?}", released.elapsed());
        got.push(i);
        permits.push(permit.unwrap());
    }
    assert_eq!(got, [0, 1]);
    for p in permits {
        p.release().await.unwrap();
    }
    // A place that makes no attempt (a paused waiter): every permit is free, yet a try is
    // refused until the place is left.
    let place = pg
        .psql("SELECT fencelock_enter_v1(ARRAY['fencelock:permits:encoders'], 'paused', 30000)")
        .unwrap();
    let err = other.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    pg.psql(&format!(
        "SELECT fencelock_leave_v1(ARRAY['fencelock:permits:encoders'], {place})"
    ))
    .unwrap();
    other.try_acquire().await.unwrap().release().await.unwrap();

    // Six clients at once on three permits.
    let clients = (0..6).map(|_| client(&pg, LINE_TTL)).collect();
    let most = a_semaphore_never_grants_more_than_its_permits(clients, "pool", 3).await;
    assert!(most >= 2, "the permits were used together: {most}");
}

/// The read-write lock's contract, written against `Client` only (any backend): half the
/// `clients` read, half write, concurrently, several times each; a writer never holds the lock
/// with a reader or another writer. Returns the most readers seen holding it at once.
async fn a_rwlock_never_lets_a_writer_in_with_anyone(clients: Vec<Client>, name: &str) -> usize {
    let readers = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let rw = c.rwlock(name).unwrap();
        let (readers, most) = (readers.clone(), most.clone());
        let (writing, violations) = (writing.clone(), violations.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                if i % 2 == 0 {
                    let lock = rw.read().await.unwrap();
                    if writing.load(Ordering::SeqCst) {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    lock.release().await.unwrap();
                } else {
                    let lock = rw.write().await.unwrap();
                    if writing.swap(true, Ordering::SeqCst) || readers.load(Ordering::SeqCst) > 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    writing.store(false, Ordering::SeqCst);
                    lock.release().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(LONG, t).await.unwrap().unwrap();
    }
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "a writer held {name} with someone else"
    );
    most.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_a_writer_excludes_them_and_a_waiting_writer_goes_before_later_readers() {
    let pg = start().await;
    let rw = |c: &Client| c.rwlock("doc").unwrap();
    let (a, b) = (client(&pg, LINE_TTL), client(&pg, LINE_TTL));
    // A writer excludes readers.
    let written = rw(&a).try_write().await.unwrap();
    let err = rw(&b).try_read().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    written.release().await.unwrap();

    let first = rw(&a).try_read().await.unwrap();
    let second = rw(&b).try_read().await.unwrap();
    assert!(first.fencing_token().is_none(), "a read lock has no token");
    let err = rw(&client(&pg, LINE_TTL)).try_write().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    // The plain mutex of the same name is the write side.
    let err = client(&pg, LINE_TTL).try_acquire("doc").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");

    // A writer waits; the readers that come after it wait for it.
    let writer = {
        let rw = rw(&client(&pg, LINE_TTL));
        tokio::spawn(async move { rw.write().await })
    };
    until_in_line(&pg, "doc", 1).await;
    let err = rw(&client(&pg, LINE_TTL)).try_read().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    let late = {
        let rw = rw(&client(&pg, LINE_TTL));
        tokio::spawn(async move { rw.read().await })
    };
    until_in_line(&pg, "doc", 2).await;
    first.release().await.unwrap();
    let released = Instant::now();
    second.release().await.unwrap();
    let written = tokio::time::timeout(LONG, writer)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < WOKEN, "{:?}", released.elapsed());
    let t = token(&written);
    // The late reader still waits, behind the writer's lock.
    assert!(!late.is_finished());
    assert_eq!(in_line(&pg, "doc"), 1);
    let released = Instant::now();
    written.release().await.unwrap();
    let read = tokio::time::timeout(LONG, late)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < WOKEN, "{:?}", released.elapsed());
    let last = read
        .last_writer_token()
        .expect("a read lock has the last writer's token");
    assert!(last >= t, "last writer {last}, the writer had {t}");
    read.release().await.unwrap();

    // Three readers and three writers at once.
    let clients = (0..6).map(|_| client(&pg, LINE_TTL)).collect();
    a_rwlock_never_lets_a_writer_in_with_anyone(clients, "shared-doc").await;
}

/// The election's contract, written against `Client` only (any backend): each client
/// campaigns `rounds` times, holds leadership a moment and resigns; never two leaders at once,
/// and every term is larger than the one before it. Returns the terms in the order they led.
async fn an_election_has_one_leader_at_a_time(clients: Vec<Client>, name: &str) -> Vec<u64> {
    let leading = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let election = c.election(name).unwrap();
        let (leading, violations, terms) = (leading.clone(), violations.clone(), terms.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let leader = election.campaign(&format!("node-{i}")).await.unwrap();
                if leading.swap(true, Ordering::SeqCst) {
                    violations.fetch_add(1, Ordering::SeqCst);
                }
                terms.lock().unwrap().push(leader.term());
                tokio::time::sleep(Duration::from_millis(10)).await;
                leading.store(false, Ordering::SeqCst);
                leader.resign().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(LONG, t).await.unwrap().unwrap();
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0, "two leaders at once");
    let terms = terms.lock().unwrap().clone();
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms out of order: {terms:?}"
    );
    terms
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_has_one_leader_per_term_observers_see_each_in_order_and_a_lost_leader_is_signalled(
) {
    let pg = start().await;
    let ttl = Duration::from_secs(3);
    let (a, b) = (client(&pg, ttl), client(&pg, ttl));
    let election = a.election("primary").unwrap();
    let mut observer = b.election("primary").unwrap().observe();
    let first = election.campaign("node-a").await.unwrap();
    let seen = tokio::time::timeout(LONG, observer.next()).await.unwrap();
    assert_eq!((seen.term(), seen.value()), (first.term(), "node-a"));

    // A second candidate waits in line and leads once the first resigns, in a later term,
    // which the observer sees next.
    let candidate = {
        let election = b.election("primary").unwrap();
        tokio::spawn(async move { election.campaign("node-b").await })
    };
    until_in_line(&pg, "election:primary", 1).await;
    let t1 = first.term();
    let resigned = Instant::now();
    first.resign().await.unwrap();
    let second = tokio::time::timeout(LONG, candidate)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(second.term() > t1, "{} after {t1}", second.term());
    let seen = tokio::time::timeout(LONG, observer.next()).await.unwrap();
    assert!(resigned.elapsed() < WOKEN, "{:?}", resigned.elapsed());
    assert_eq!((seen.term(), seen.value()), (second.term(), "node-b"));

    // The leader's row deleted behind its back (an operator's DELETE): the next extension
    // finds it gone and the lost signal fires; the old leader's announcement is refused.
    let lost = second.lost();
    pg.psql("DELETE FROM fencelock_locks WHERE resource = 'election:primary'")
        .unwrap();
    tokio::time::timeout(LONG, lost.fired())
        .await
        .expect("the lost signal fires");
    assert_eq!(lost.cause(), Some(LostCause::NotHeld));
    drop(second);

    // Three candidates at once: one leader at a time, terms in order, and the observer reports
    // each of them in term order.
    let clients = (0..3).map(|_| client(&pg, ttl)).collect();
    let terms = an_election_has_one_leader_at_a_time(clients, "primary").await;
    let mut reported = Vec::new();
    while reported.last() != terms.last() {
        let leader = tokio::time::timeout(LONG, observer.next()).await.unwrap();
        reported.push(leader.term());
    }
    assert_eq!(reported, terms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_checks_the_lock_in_its_own_transaction_fails_once_the_lock_was_taken_over() {
    let pg = start().await;
    let ttl = Duration::from_secs(2);
    let (a, b) = (client(&pg, ttl), client(&pg, ttl));
    assert_eq!(a.connect().await.granted(), 1);
    pg.psql("CREATE TABLE accounts (id int PRIMARY KEY, balance int); INSERT INTO accounts VALUES (7, 100);")
        .unwrap();
    // The guide's statement: the data changes only while the lease row is the holder's, live,
    // with its token; FOR SHARE keeps a takeover out until the write commits.
    let write = |lock: &fencelock::Lock, amount: i32| {
        format!(
            "UPDATE accounts SET balance = balance + {amount} WHERE id = 7 AND EXISTS ( \
               SELECT 1 FROM fencelock_locks WHERE resource = 'account:7' AND owner = '{}' \
               AND token = {} AND expires_at > clock_timestamp() FOR SHARE) RETURNING balance",
            lock.owner(),
            token(lock)
        )
    };
    let first = a.try_acquire("account:7").await.unwrap();
    assert_eq!(pg.psql(&write(&first, 10)).unwrap(), "110");
    // The holder pauses past its TTL; another client takes the lock. The paused holder's
    // write changes nothing; the new holder's goes through.
    tokio::time::sleep(ttl + Duration::from_millis(700)).await;
    let second = b.try_acquire("account:7").await.unwrap();
    assert_eq!(pg.psql(&write(&first, 10)).unwrap(), "");
    assert_eq!(pg.psql(&write(&second, 5)).unwrap(), "115");
    let after_release = write(&second, 5);
    second.release().await.unwrap();
    // Released: no write under it any more.
    assert_eq!(pg.psql(&after_release).unwrap(), "");
    assert_eq!(
        pg.psql("SELECT balance FROM accounts WHERE id = 7")
            .unwrap(),
        "115"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_outlives_its_connection_being_terminated_and_a_quick_server_restart() {
    let pg = start().await;
    // Generous: the restart must fit in the validity on a loaded machine.
    let ttl = Duration::from_secs(6);
    let (a, b) = (client(&pg, ttl), client(&pg, ttl));
    let guard = a
        .try_acquire("daemon")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    let lost = guard.lost();
    // The lease is a row, not the session: terminating the holder's connection loses nothing.
    pg.psql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = 'postgres' AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
    )
    .unwrap();
    // A fast shutdown and a start: the row is durable, the extension reconnects in time.
    let _pg = tokio::task::spawn_blocking(move || {
        pg.stop().unwrap();
        pg.restart().unwrap();
        pg
    })
    .await
    .unwrap();
    tokio::time::sleep(ttl).await;
    assert!(!lost.is_fired(), "lost: {:?}", lost.cause());
    assert_eq!(
        b.try_acquire("daemon").await.unwrap_err().kind(),
        ErrorKind::Contention
    );
    let t = guard.fencing_token().unwrap().value();
    guard.release().await.unwrap();
    let next = b.try_acquire("daemon").await.unwrap();
    assert!(token(&next) > t);
    next.release().await.unwrap();
}
