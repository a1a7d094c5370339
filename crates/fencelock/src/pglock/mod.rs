//! The PostgreSQL backend (feature `postgres-lock`): a lease row per locked resource in one
//! database, whose fencing token comes from a sequence of that database.
//!
//! # What the database stores
//!
//! On first use the client creates, if missing (under an advisory lock, so that clients
//! starting together do not race on the catalog; when all exist nothing is created, so a user
//! granted them without the right to create in the schema works):
//!
//! - the table `fencelock_locks(resource text primary key, owner text, token bigint,
//!   expires_at timestamptz)`: a row is a lease, the resource held by `owner` (a random 128-bit
//!   value only its holder knows) until `expires_at`. A lock of several resources has a row for
//!   each, with one owner and one token;
//! - the sequence `fencelock_tokens`: the tokens;
//! - the table `fencelock_waiters(resource, seq, owner, expires_at)`: the places in line, one
//!   row per waiter and resource, `seq` from the sequence `fencelock_line`;
//! - the functions `fencelock_*_v1` and `fencelock_*_v2` (`sql::SETUP`): take, enter, leave,
//!   release, each one transaction. Version 2 replaces the take and the release (see "Protocol
//!   version 2"); their version 1 stays installed for clients of version 1.
//!
//! Nothing deletes expired leases but the next take of the resource, which overwrites them, and
//! releases; expired places are deleted by the next take of their resource.
//!
//! # One clock: the database's
//!
//! A take (`sql::TAKE`) writes the rows, or overwrites them where they have expired by the
//! database's `clock_timestamp()`, with an expiry of `clock_timestamp() + TTL`; it returns the
//! token, or none when another owner holds a live lease or a waiter is ahead. Extension
//! (`sql::EXTEND`) moves the expiry of rows that are ours and still live; release
//! (`sql::RELEASE`) deletes rows that are ours. Every comparison of times happens in the
//! database, against its own clock, so two clients never compare clocks with each other.
//!
//! The client keeps its own validity as the Redis backend does: counted from before it sent
//! the request, `ttl - elapsed - drift`. The server reads its clock after the request arrived,
//! so the row's expiry is at least as late as the client's deadline as long as the database's
//! clock runs at the rate of the client's within the drift allowance. A step of the database's
//! clock (an NTP jump forward) shortens every lease by the step: that is not covered, as a
//! step of a Redis node's clock is not.
//!
//! A lock whose row has expired but was not yet overwritten is free: the acquisition's
//! `WHERE` takes it, extension refuses to revive it (another client may already have seen it
//! expired, and the holder's own validity ran out before it), and its holder's release reports
//! it lost. TTLs are sent in whole milliseconds; `timestamptz` keeps microseconds.
//!
//! # Serialized per resource (the protocol since the line)
//!
//! Every function that writes a resource's rows first takes the transaction-level advisory
//! lock of each of its resources, in the order of their hashes (`fencelock_serialize_v1`; since
//! version 2 the release too, and a single resource's lock without the loop), and
//! a plpgsql function reads a fresh snapshot per statement: it sees every commit of those who
//! held those locks before it. This is what the line and the locks of several resources rest
//! on:
//!
//! - *Exclusion.* A take checks that no live lease and no waiter ahead exists on any of its
//!   resources, then writes a row for each. Two takes that share a resource run one after the
//!   other, and the second sees the first's rows. The write keeps its own `WHERE` on the
//!   expiry, and a row count short of the resources rolls the whole take back: all or nothing.
//!   Short and long TTLs mix: each row has its own expiry, read against the one clock.
//! - *No deadlock.* Advisory locks are taken in one global order, so `{a, b}` and `{b, a}` do
//!   not wait on each other; the line does not deadlock either: the waiter with the smallest
//!   place anywhere waits only for leases, which expire.
//! - *Line order.* A place's number is drawn under the same locks, so on each resource the
//!   numbers follow the commit order of the places. A waiter's take looks for places with
//!   smaller numbers; a try for any place: it never passes the line.
//! - *Restarts.* Leases, places and both sequences are durable; advisory locks live for one
//!   transaction, and `LISTEN`s are redone by the waiters when their connection ends.
//!
//! Clients of the protocol before the line (one `INSERT ... ON CONFLICT` statement, no advisory
//! lock, no line) must not share a database with these: they would pass the line.
//!
//! # Protocol version 2: a release wakes only a line with someone in it
//!
//! Version 1 sent a `NOTIFY` on every release, and a `NOTIFY` takes a database-wide lock at
//! commit; every try also cleaned the line. Version 2 (`fencelock_take_v2`,
//! `fencelock_release_v2`) changes what the release does, so it has names of its own:
//!
//! - A release takes the advisory locks of its resources (and, for a semaphore's slot
//!   `<name>:permit:<i>`, of the semaphore's line `fencelock:permits:<name>`), deletes its rows,
//!   and sends a resource's `NOTIFY` only when a place stands in its line (or in the slot's
//!   semaphore's line).
//! - A try (no place) takes the lock of a single resource without the loop, does not delete
//!   expired places (the next waiter's take does) and counts only live places.
//!
//! *No lost wake-up.* A waiter listens, then enters the line (under the resource's lock), then
//! takes again (under it). The release's look for places is a statement after it took that
//! lock, and the lock is held until its commit; in READ COMMITTED each statement of a plpgsql
//! function reads a snapshot taken when it starts. Either the waiter's place committed before
//! the release took the lock: the look sees it, and the `NOTIFY` commits after the waiter's
//! `LISTEN`. Or the release took the lock first: the waiter's entry waits for the release's
//! commit, and the take after it sees the rows deleted. Without the lock a waiter could enter
//! after the look and take again before the commit, see the old row and sleep until its
//! heartbeat (the test that holds a release's commit open shows it: mutant
//! `pg-release-unserialized`). Exclusion, token order and line order are unchanged: the take
//! checks and writes as before, under the same locks.
//!
//! *Version 1 beside version 2.* Both versions take the same advisory locks and read the same
//! tables: a version 1 release still notifies every time (more wake-ups, never fewer), a
//! version 1 waiter enters and takes again under the lock as above, and a version 1 try cleans
//! the line before counting it, which counts the same live places. The setup of version 2 adds
//! its functions and keeps version 1's (with the same text), so a running client of version 1
//! keeps calling the functions it knows.
//!
//! *Plans.* The session runs with `plan_cache_mode = force_generic_plan` (`sql::SESSION`):
//! the functions' statements take arrays, whose custom plans PostgreSQL would otherwise make
//! again on every call (most of a cycle's time before version 2, `docs/performance.md`).
//!
//! # Waiting
//!
//! A waiter tries once; when refused, it subscribes to the channels of its resources
//! (`listen.rs`: `LISTEN fencelock_<md5 of the resource>`, as channel names are identifiers of
//! at most 63 bytes), enters the line (`sql::ENTER`), and takes again at once. After that it
//! takes again when woken: by a release, whose `pg_notify` is in the release's transaction (a
//! notification is delivered on commit only; sent when the release saw a place in the line), or
//! by a waiter leaving the line; when the row in
//! its way expires by itself (the take returns how long until then); and at a third of the TTL,
//! its heartbeat, when the take refreshes its place's expiry. A release wakes every waiter of
//! the resource; the first in line takes it, the others find it taken and wait again. There is
//! no polling: the heartbeat is also the safety net for a notification lost while the listening
//! connection was down (its end wakes every waiter, which re-checks and listens again).
//!
//! A place is a row rather than an advisory lock or a session's state because it must survive
//! the waiter's connection dropping (the waiter reconnects and keeps its place) and must expire
//! when the waiter dies (the heartbeat stops). A cancelled wait deletes its place through a
//! task (`Drop` does no I/O); a timed-out one deletes it in the call.
//!
//! # Tokens
//!
//! The token is `nextval('fencelock_tokens')`, drawn in the take's own transaction, under the
//! advisory locks, and committed with the rows. A later holder's take sees the earlier holder's
//! rows committed (it overwrites them only once expired, or finds them deleted), so its
//! `nextval` runs after the earlier one and returns more; for a lock of several resources, more
//! than the token of every earlier holder of any of them. Across a crash: `nextval` writes the sequence's WAL record
//! (logging values ahead) before the transaction's commit record, and a commit is durable only
//! once the WAL up to its record is flushed, so recovery restores the sequence at or past
//! every token a committed row holds; values handed to transactions that did not commit may be
//! skipped, never reused below a committed one. This holds with `synchronous_commit = on`
//! (the default): with it off, a commit acknowledged to a client may be lost in a crash with
//! its sequence record, and the lost holder's token may be handed out again. A failover to an
//! asynchronous replica loses committed rows the same way (a lease that the old primary
//! granted is gone on the new one): a data loss this backend does not cover.
//!
//! # Failures
//!
//! Each request gets at most the node timeout (at least [`MIN_REQUEST_TIMEOUT`], a commit
//! waits for a WAL flush); the session's `statement_timeout` is set to the same, so the server
//! gives up on a statement blocked behind someone's lock too. A request that timed out or lost
//! its connection may still have committed: an acquisition reports [`Error::Unavailable`] and
//! its row expires after the TTL; an extension is retried within the validity left
//! (`keepalive.rs`), and the lost signal fires when none succeeded before the deadline minus
//! the margin; a release reports [`Error::Unavailable`]. The connection is opened on first use
//! and again after it failed or timed out.
//!
//! # The family
//!
//! A semaphore of N permits is N slots, each an ordinary resource with its lease row
//! (`sql::TAKE_PERMIT`): under the advisory lock of the semaphore's line it counts the slots'
//! live rows and takes the first free one, so two takes never count the same free slot: N are
//! never N+1. Its waiters stand in one line (the line's resource), woken by the release of any
//! slot and by the waiter ahead taking one.
//!
//! A read-write lock's write side is the mutex of its resource; a reader is an entry in
//! `fencelock_readers` (`sql::READ`), with its own expiry. A take of the mutex counts live
//! readers as holders; a reader is refused by a live lease row and by any place ahead in the
//! resource's one line, so a waiting writer keeps the later readers out. A read lock's
//! `last_writer_token` is the token sequence's `last_value` when it was granted: every writer
//! granted before drew its token from the sequence earlier, so it is at least theirs.
//!
//! An election is the mutex of `election:<name>`, the term its token (`election.rs`). The
//! leader announces itself in `fencelock_leaders (election, term, value)` under the lock's
//! advisory lock and only while its lease row is live and its own, so announcements commit in
//! term order; observers read the table after the last term they reported, woken by the
//! announcement's `NOTIFY`.
//!
//! # Not yet
//!
//! TLS is not offered.

mod election;
mod listen;
mod sql;

pub(crate) use self::election::PgLeaders;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row, Statement};

use crate::config::Config;
use crate::error::{Error, ErrorKind, LostCause, Result};
use crate::keepalive::{Engine, Extends, GuardState, Outcome, Stop};
use crate::node::NodeAddr;
use crate::pure::extension::{Attempt, Schedule};
use crate::pure::node_error::{FailureCause, NodeError};
use crate::pure::retry::RetryPolicy;
use crate::pure::token::OwnerToken;
use crate::pure::validity;
use crate::pure::vote::{NodeVote, VoteOutcome, Votes};

use self::sql::Released;

/// The least time a request gets, whatever the node timeout: a commit waits for a WAL flush,
/// which on a busy disk takes longer than the tens of milliseconds a Redis node needs.
pub(crate) const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// One PostgreSQL database, reached through one connection (opened on first use).
pub(crate) struct PgBackend {
    /// The driver's settings parsed from the URL (with its password: never printed).
    pg_config: tokio_postgres::Config,
    /// The redacted URL, for votes and logs.
    label: Arc<str>,
    ttl: Duration,
    drift: Duration,
    request_timeout: Duration,
    connect_timeout: Duration,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    /// The connection that listens for releases, opened on the first wait.
    listener: tokio::sync::Mutex<Option<Arc<listen::Listener>>>,
    engine: Engine<PgHeld>,
    /// Places of cancelled waits whose deletion runs in a task, and its wake-up when one ends.
    leaving: AtomicUsize,
    left: tokio::sync::Notify,
}

impl std::fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgBackend")
            .field("database", &self.label)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// A connection with the backend's statements prepared on it.
struct Conn {
    client: tokio_postgres::Client,
    take: Statement,
    take_permit: Statement,
    read: Statement,
    extend_reader: Statement,
    release_reader: Statement,
    announce: Statement,
    withdraw: Statement,
    leaders: Statement,
    enter: Statement,
    leave: Statement,
    extend: Statement,
    release: Statement,
}

/// Which statement a request runs.
#[derive(Debug, Clone, Copy)]
enum Stmt {
    Take,
    TakePermit,
    Read,
    ExtendReader,
    ReleaseReader,
    Announce,
    Withdraw,
    Leaders,
    Enter,
    Leave,
    Extend,
    Release,
}

impl Conn {
    fn statement(&self, which: Stmt) -> &Statement {
        match which {
            Stmt::Take => &self.take,
            Stmt::TakePermit => &self.take_permit,
            Stmt::Read => &self.read,
            Stmt::ExtendReader => &self.extend_reader,
            Stmt::ReleaseReader => &self.release_reader,
            Stmt::Announce => &self.announce,
            Stmt::Withdraw => &self.withdraw,
            Stmt::Leaders => &self.leaders,
            Stmt::Enter => &self.enter,
            Stmt::Leave => &self.leave,
            Stmt::Extend => &self.extend,
            Stmt::Release => &self.release,
        }
    }
}

/// A lock held in the database: its resources (a row each, all with the one owner value and
/// token), owner value and token.
#[derive(Clone)]
pub(crate) struct PgHeld {
    /// The first resource: the lock's name in errors and in the extension engine.
    pub(crate) resource: Arc<str>,
    resources: Arc<[String]>,
    owner: Arc<str>,
    /// The lock's token; for a read lock, the last writer's token it read.
    pub(crate) token: u64,
    /// A read lock: an entry in `fencelock_readers`, not a lease row.
    pub(crate) shared: bool,
}

impl PgHeld {
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// The lock of `keys` that `owner` may hold (an owner value handed between processes).
    fn by_owner(keys: &[String], owner: &str) -> PgHeld {
        PgHeld {
            resource: Arc::from(keys[0].as_str()),
            resources: Arc::from(keys),
            owner: Arc::from(owner),
            token: 0,
            shared: false,
        }
    }
}

impl std::fmt::Debug for PgHeld {
    // The owner value is a capability (whoever knows it can release the lock): a prefix only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: String = self.owner.chars().take(8).collect();
        f.debug_struct("PgHeld")
            .field("resources", &self.resources)
            .field("owner", &format_args!("{shown}…"))
            .field("token", &self.token)
            .finish()
    }
}

/// A lock just taken.
#[derive(Debug)]
pub(crate) struct PgGrant {
    pub(crate) held: PgHeld,
    pub(crate) deadline: Instant,
    pub(crate) votes: Votes,
}

impl PgBackend {
    /// A backend for the database at `addr`. No I/O.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when the driver cannot parse the URL.
    pub(crate) fn new(addr: &NodeAddr, config: &Config) -> Result<PgBackend> {
        let mut pg_config = addr
            .secret_url()
            .parse::<tokio_postgres::Config>()
            .map_err(|e| {
                Error::config(
                    format!("node URL {addr}"),
                    format!("PostgreSQL cannot use it: {e}"),
                )
            })?;
        if pg_config.get_connect_timeout().is_none() {
            pg_config.connect_timeout(config.connect_timeout());
        }
        Ok(PgBackend {
            pg_config,
            label: Arc::from(addr.redacted()),
            ttl: config.ttl(),
            drift: config.drift(),
            request_timeout: config.node_timeout().max(MIN_REQUEST_TIMEOUT),
            connect_timeout: config.connect_timeout(),
            conn: tokio::sync::Mutex::default(),
            listener: tokio::sync::Mutex::default(),
            engine: Engine::default(),
            leaving: AtomicUsize::new(0),
            left: tokio::sync::Notify::new(),
        })
    }

    /// The connection, opened (with the table created if missing and the statements prepared)
    /// if there is none or the last one failed.
    async fn conn(&self) -> std::result::Result<Arc<Conn>, VoteOutcome> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref().filter(|c| !c.client.is_closed()) {
            return Ok(conn.clone());
        }
        *slot = None;
        let conn =
            tokio::time::timeout(self.connect_timeout + self.request_timeout, self.connect())
                .await
                .map_err(|_| VoteOutcome::TimedOut)?
                .map_err(|e| VoteOutcome::Failed(node_error(&e)))?;
        let conn = Arc::new(conn);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    async fn connect(&self) -> std::result::Result<Conn, tokio_postgres::Error> {
        let (client, connection) = self.pg_config.connect(NoTls).await?;
        let label = self.label.clone();
        // The connection object does the I/O; it ends when the client is dropped.
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(database = %label, %error, "PostgreSQL lock connection ended");
            }
        });
        let ms = self.request_timeout.as_millis();
        client
            .batch_execute(&format!("SET statement_timeout = {ms}; {}", sql::SESSION))
            .await?;
        client.batch_execute(sql::SETUP).await?;
        Ok(Conn {
            take: client.prepare(sql::TAKE).await?,
            take_permit: client.prepare(sql::TAKE_PERMIT).await?,
            read: client.prepare(sql::READ).await?,
            extend_reader: client.prepare(sql::EXTEND_READER).await?,
            release_reader: client.prepare(sql::RELEASE_READER).await?,
            announce: client.prepare(sql::ANNOUNCE).await?,
            withdraw: client.prepare(sql::WITHDRAW).await?,
            leaders: client.prepare(sql::LEADERS).await?,
            enter: client.prepare(sql::ENTER).await?,
            leave: client.prepare(sql::LEAVE).await?,
            extend: client.prepare(sql::EXTEND).await?,
            release: client.prepare(sql::RELEASE).await?,
            client,
        })
    }

    /// Drops `conn` if it is still the current one: the next request opens a new connection.
    async fn forget(&self, conn: &Arc<Conn>) {
        let mut slot = self.conn.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *slot = None;
        }
    }

    /// Opens the connection now (creating the table if missing): the database's vote.
    pub(crate) async fn connect_now(&self) -> Votes {
        let started = Instant::now();
        let outcome = match self.conn().await {
            Ok(_) => VoteOutcome::Granted,
            Err(outcome) => outcome,
        };
        self.votes(outcome, started.elapsed())
    }

    /// Runs one statement within `limit` (and the request timeout): its one row or none, or the
    /// failure as a vote.
    async fn request(
        &self,
        which: Stmt,
        params: &[&(dyn ToSql + Sync)],
        limit: Duration,
    ) -> std::result::Result<Vec<Row>, VoteOutcome> {
        let conn = self.conn().await?;
        let limit = limit.min(self.request_timeout);
        match tokio::time::timeout(limit, conn.client.query(conn.statement(which), params)).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(e)) => {
                // A FATAL answer (a terminated backend, a shutdown) ends the session: the
                // client may not have seen its connection close yet.
                let fatal = e
                    .as_db_error()
                    .is_some_and(|d| matches!(d.severity(), "FATAL" | "PANIC"));
                if fatal || conn.client.is_closed() {
                    self.forget(&conn).await;
                }
                Err(VoteOutcome::Failed(node_error(&e)))
            }
            Err(_elapsed) => {
                // The statement may still run (and commit): a new connection for the next
                // request, rather than queueing behind it.
                self.forget(&conn).await;
                Err(VoteOutcome::TimedOut)
            }
        }
    }

    fn votes(&self, outcome: VoteOutcome, latency: Duration) -> Votes {
        Votes::from(vec![NodeVote::new(self.label.clone(), outcome, latency)])
    }

    fn ttl_millis(&self) -> i64 {
        i64::try_from(validity::ttl_millis(self.ttl)).unwrap_or(i64::MAX)
    }

    /// A fresh owner value: a random 128-bit value only the holder knows.
    fn new_owner() -> Result<String> {
        OwnerToken::generate()
            .map(|o| o.as_str().to_string())
            .map_err(|e| {
                Error::config(
                    "random source",
                    format!("the OS random number generator failed: {e}"),
                )
            })
    }

    /// One attempt (`sql::TAKE`) to take `keys` for `owner`: a try when `place` is `None`, else
    /// the attempt of the waiter at `place` in line.
    async fn take(&self, keys: &[String], owner: &str, place: Option<i64>) -> Result<Take> {
        let started = Instant::now();
        let ttl = self.ttl_millis();
        let row = self
            .request(
                Stmt::Take,
                &[&keys, &owner, &ttl, &place],
                self.request_timeout,
            )
            .await;
        self.answer(
            Claim {
                name: &keys[0],
                resources: keys,
                owner,
                shared: false,
            },
            row,
            0,
            started,
        )
        .await
    }

    /// One attempt (`sql::TAKE_PERMIT`) to take a permit of the semaphore `name` (its line
    /// `line`, its slots `slots`) for `owner`: a try when `place` is `None`, else the attempt of
    /// the waiter at `place`. Returns the slot with the grant.
    async fn take_permit(
        &self,
        name: &str,
        line: &str,
        slots: &[String],
        owner: &str,
        place: Option<i64>,
    ) -> Result<Take<(usize, PgGrant)>> {
        let started = Instant::now();
        let ttl = self.ttl_millis();
        let row = self
            .request(
                Stmt::TakePermit,
                &[&line, &slots, &owner, &ttl, &place],
                self.request_timeout,
            )
            .await;
        let slot = match &row {
            Ok(rows) if rows.len() == 1 => rows[0].get::<_, Option<i32>>(0),
            _ => None,
        };
        let slot = slot
            .and_then(|i| usize::try_from(i).ok())
            .filter(|i| *i < slots.len());
        let granted = slot.map_or(&[][..], |i| std::slice::from_ref(&slots[i]));
        Ok(
            match self
                .answer(
                    Claim {
                        name,
                        resources: granted,
                        owner,
                        shared: false,
                    },
                    row,
                    1,
                    started,
                )
                .await?
            {
                Take::Granted(grant) => Take::Granted((slot.unwrap_or(0), grant)),
                Take::Blocked { wait, refusal } => Take::Blocked { wait, refusal },
                Take::OutOfLine => Take::OutOfLine,
            },
        )
    }

    /// Reads a take's answer, whose `(token, wait_ms, in_line)` start at column `at`: the grant
    /// of `resources` (none: the database answered out of protocol), the refusal naming `name`,
    /// or the lost place.
    async fn answer(
        &self,
        claim: Claim<'_>,
        rows: std::result::Result<Vec<Row>, VoteOutcome>,
        at: usize,
        started: Instant,
    ) -> Result<Take> {
        let Claim {
            name,
            resources,
            owner,
            shared,
        } = claim;
        let elapsed = started.elapsed();
        let unavailable = |outcome| Error::Unavailable {
            resource: name.to_string(),
            votes: self.votes(outcome, elapsed),
        };
        let row = match rows {
            Ok(rows) if rows.len() == 1 => rows.into_iter().next().expect("one row"),
            Ok(rows) => {
                let why = format!("the attempt returned {} rows, not 1", rows.len());
                return Err(unavailable(VoteOutcome::Failed(NodeError::other(why))));
            }
            Err(outcome) => return Err(unavailable(outcome)),
        };
        let (token, wait_ms, in_line): (Option<i64>, Option<i64>, Option<bool>) =
            (row.get(at), row.get(at + 1), row.get(at + 2));
        if in_line == Some(false) {
            return Ok(Take::OutOfLine);
        }
        let Some(token) = token else {
            let wait = Duration::from_millis(u64::try_from(wait_ms.unwrap_or(0)).unwrap_or(0));
            return Ok(Take::Blocked {
                wait,
                refusal: Error::Contention {
                    resource: name.to_string(),
                    votes: self.votes(VoteOutcome::HeldByOther, elapsed),
                },
            });
        };
        if resources.is_empty() {
            let why = NodeError::other("a grant named no slot of the semaphore");
            return Err(unavailable(VoteOutcome::Failed(why)));
        }
        let held = PgHeld {
            resource: Arc::from(resources[0].as_str()),
            resources: Arc::from(resources),
            owner: Arc::from(owner),
            token: 0,
            shared,
        };
        let Some(token) = sql::token(token) else {
            let _ = self.release_rows(&held, self.request_timeout).await;
            let why = NodeError::other("the token sequence returned a value below 1");
            return Err(unavailable(VoteOutcome::Failed(why)));
        };
        let held = PgHeld { token, ..held };
        let votes = self.votes(VoteOutcome::Granted, elapsed);
        match validity::validity(self.ttl, elapsed, self.drift) {
            Some(_) => Ok(Take::Granted(PgGrant {
                held,
                // As Redis: the validity counts from before the request was sent.
                deadline: started + self.ttl.saturating_sub(self.drift),
                votes,
            })),
            None => {
                let _ = self.release_rows(&held, self.request_timeout).await;
                Err(Error::TooSlow {
                    resource: name.to_string(),
                    votes,
                })
            }
        }
    }

    /// One attempt (`sql::READ`) to take a read lock of `resource` for `owner`: a try when
    /// `place` is `None`, else the attempt of the waiter at `place`.
    async fn take_read(&self, resource: &str, owner: &str, place: Option<i64>) -> Result<Take> {
        let started = Instant::now();
        let ttl = self.ttl_millis();
        let row = self
            .request(
                Stmt::Read,
                &[&resource, &owner, &ttl, &place],
                self.request_timeout,
            )
            .await;
        let keys = [resource.to_string()];
        self.answer(
            Claim {
                name: resource,
                resources: &keys,
                owner,
                shared: true,
            },
            row,
            0,
            started,
        )
        .await
    }

    /// Takes a read lock of `resource`: one try when `policy` is `None`, else waiting in the
    /// resource's line (the same line as its writers) as it allows. Granted while no writer
    /// holds the resource and nobody waits ahead; the grant's token is the sequence's last
    /// value, at least the token of every writer granted before (the last writer's token).
    ///
    /// # Errors
    ///
    /// [`Error::Contention`] while a writer holds the resource or anyone waits ahead;
    /// [`Error::Timeout`] when the policy ran out; otherwise as [`PgBackend::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`PgBackend::acquire`].
    pub(crate) async fn read(
        self: &Arc<Self>,
        resource: &str,
        policy: Option<&RetryPolicy>,
    ) -> Result<PgGrant> {
        let owner = Self::new_owner()?;
        let (this, who): (&PgBackend, &str) = (self, &owner);
        let attempt = move |place| this.take_read(resource, who, place);
        let Some(policy) = policy else {
            return match attempt(None).await? {
                Take::Granted(grant) => Ok(grant),
                Take::Blocked { refusal, .. } => Err(refusal),
                Take::OutOfLine => Err(Error::Unavailable {
                    resource: resource.to_string(),
                    votes: self.votes(
                        VoteOutcome::Failed(NodeError::other("a try was answered as out of line")),
                        Duration::ZERO,
                    ),
                }),
            };
        };
        let keys = [resource.to_string()];
        self.wait_in_line(resource, &keys, &keys, policy, who, attempt)
            .await
    }

    /// Takes a permit of the semaphore `name`, whose waiters stand in the line of `line` and
    /// whose slots are `slots`: one try when `policy` is `None`, else waiting in line as it
    /// allows (woken by the release of any slot, and by the waiter ahead taking one). Returns
    /// the slot's index with the grant. A permit is a lease row on its slot, as a lock is.
    ///
    /// # Errors
    ///
    /// [`Error::Contention`] (naming the semaphore) when every permit is held or a waiter is in
    /// line; [`Error::Timeout`] when the policy ran out; otherwise as
    /// [`PgBackend::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`PgBackend::acquire`].
    pub(crate) async fn acquire_permit(
        self: &Arc<Self>,
        name: &str,
        line: &str,
        slots: &[String],
        policy: Option<&RetryPolicy>,
    ) -> Result<(usize, PgGrant)> {
        let owner = Self::new_owner()?;
        let (this, who): (&PgBackend, &str) = (self, &owner);
        let attempt = move |place| this.take_permit(name, line, slots, who, place);
        let Some(policy) = policy else {
            return match attempt(None).await? {
                Take::Granted(grant) => Ok(grant),
                Take::Blocked { refusal, .. } => Err(refusal),
                Take::OutOfLine => Err(Error::Unavailable {
                    resource: name.to_string(),
                    votes: self.votes(
                        VoteOutcome::Failed(NodeError::other("a try was answered as out of line")),
                        Duration::ZERO,
                    ),
                }),
            };
        };
        let line = [line.to_string()];
        let mut wake = slots.to_vec();
        wake.extend(line.iter().cloned());
        self.wait_in_line(name, &line, &wake, policy, who, attempt)
            .await
    }

    /// One attempt to take `keys` (every resource, or none), which never passes a waiter in
    /// line.
    ///
    /// # Errors
    ///
    /// [`Error::Contention`] when another owner holds a live lease on one of the resources, or
    /// a waiter is in line for one; [`Error::Unavailable`] when the database did not answer in
    /// time or failed (the rows, if the transaction committed after all, expire after the TTL);
    /// [`Error::TooSlow`] when the answer came too late to leave any validity (the rows are
    /// deleted again).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a cancelled attempt may have taken the rows, which then expire after
    /// the TTL.
    pub(crate) async fn try_acquire(&self, keys: &[String]) -> Result<PgGrant> {
        let owner = Self::new_owner()?;
        match self.take(keys, &owner, None).await? {
            Take::Granted(grant) => Ok(grant),
            Take::Blocked { refusal, .. } => Err(refusal),
            // A try has no place in line: the database answered out of protocol.
            Take::OutOfLine => Err(Error::Unavailable {
                resource: keys[0].clone(),
                votes: self.votes(
                    VoteOutcome::Failed(NodeError::other("a try was answered as out of line")),
                    Duration::ZERO,
                ),
            }),
        }
    }

    /// Takes `keys`, waiting in line as `policy` allows: a try first; when refused, a place in
    /// the line of every resource (`sql::ENTER`), then an attempt each time a release or a
    /// waiter leaving wakes it (`listen.rs`), when the row in its way expires by itself, or at
    /// a third of the TTL, when it also refreshes its place. Grants follow the places.
    ///
    /// # Errors
    ///
    /// As [`PgBackend::try_acquire`]; [`Error::Timeout`] when the policy ran out (the place is
    /// left), holding the last attempt's error.
    ///
    /// # Cancel safety
    ///
    /// A cancelled wait leaves the line: its place is deleted by a task (or expires after the
    /// TTL if no runtime is left to run it; `Client::close` waits for the task). An attempt
    /// cancelled in flight may have taken the rows, which then expire after the TTL.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        keys: &[String],
        policy: &RetryPolicy,
    ) -> Result<PgGrant> {
        let owner = Self::new_owner()?;
        let (this, who): (&PgBackend, &str) = (self, &owner);
        self.wait_in_line(&keys[0], keys, keys, policy, who, move |place| {
            this.take(keys, who, place)
        })
        .await
    }

    /// The waiting loop of every primitive (`name` in errors): `attempt(place)` once as a try
    /// (`None`), then, while it is refused, with a place in the line of `line` (entered for
    /// `owner`), woken by the notifications of `wake` (their channels).
    async fn wait_in_line<T, F, Fut>(
        self: &Arc<Self>,
        name: &str,
        line: &[String],
        wake: &[String],
        policy: &RetryPolicy,
        owner: &str,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut(Option<i64>) -> Fut,
        Fut: std::future::Future<Output = Result<Take<T>>>,
    {
        let started = Instant::now();
        let mut attempts = 0;
        let mut place: Option<Place> = None;
        let mut subscription: Option<listen::Subscription> = None;
        loop {
            attempts += 1;
            let at = place.as_ref().map(|p| p.seq);
            let (last, mut nap) = match attempt(at).await {
                Ok(Take::Granted(grant)) => {
                    if let Some(p) = place.as_mut() {
                        p.disarm();
                    }
                    return Ok(grant);
                }
                Ok(Take::Blocked { wait, refusal }) => (refusal, wait + WAKE_SLACK),
                Ok(Take::OutOfLine) => {
                    // The place expired (this waiter was paused past the TTL): the back of
                    // the line.
                    if let Some(p) = place.as_mut() {
                        p.disarm();
                    }
                    place = None;
                    continue;
                }
                Err(e) if matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::TooSlow) => {
                    (e, policy.delay(attempts, fastrand::f64()))
                }
                Err(e) => return Err(e),
            };
            let elapsed = started.elapsed();
            if !policy.may_retry(attempts, elapsed) {
                if let Some(mut p) = place.take() {
                    p.disarm();
                    let left = policy
                        .wait()
                        .saturating_sub(elapsed)
                        .max(MIN_REQUEST_TIMEOUT);
                    let _ = self.leave(line, p.seq, left).await;
                }
                return Err(Error::Timeout {
                    resource: name.to_string(),
                    attempts,
                    last: Box::new(last),
                });
            }
            if last.kind() == ErrorKind::Contention {
                // Listen first, then take a place, then attempt again at once: that attempt
                // comes after both, so no release after it goes unnoticed (the refused one may
                // have come before the `LISTEN`, or before the place existed).
                let mut fresh = false;
                if subscription.is_none() {
                    subscription = self.subscribe(wake).await;
                    fresh = subscription.is_some();
                }
                if place.is_none() {
                    match self.enter(line, owner).await {
                        Ok(seq) => {
                            place = Some(Place {
                                backend: Some(self.clone()),
                                resources: line.to_vec(),
                                seq,
                            });
                            fresh = true;
                        }
                        Err(_) => nap = policy.delay(attempts, fastrand::f64()),
                    }
                }
                if fresh {
                    continue;
                }
            }
            nap = nap
                .min(self.ttl / 3)
                .min(policy.wait().saturating_sub(elapsed));
            match &subscription {
                Some(s) => {
                    if !s.wait(nap).await {
                        // The listening connection ended: notifications may have been lost.
                        // Re-check now and listen again through a new connection.
                        subscription = None;
                    }
                }
                None => tokio::time::sleep(nap).await,
            }
        }
    }

    /// Waits, at most `bound`, until the places of cancelled waits are deleted. Returns whether
    /// they are.
    pub(crate) async fn settle_leaves(&self, bound: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let left = self.left.notified();
            tokio::pin!(left);
            left.as_mut().enable();
            if self.leaving.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, left).await.is_err() {
                return self.leaving.load(Ordering::SeqCst) == 0;
            }
        }
    }

    /// How many places of cancelled waits are still being deleted.
    pub(crate) fn leaves_pending(&self) -> usize {
        self.leaving.load(Ordering::SeqCst)
    }

    /// A subscription to the releases of `keys`, or `None` when the listening connection
    /// cannot be opened (the waiter then wakes at the heartbeat only).
    async fn subscribe(&self, keys: &[String]) -> Option<listen::Subscription> {
        let listener = {
            let mut slot = self.listener.lock().await;
            match slot.as_ref().filter(|l| !l.is_closed()) {
                Some(l) => l.clone(),
                None => {
                    let opened = tokio::time::timeout(
                        self.connect_timeout + self.request_timeout,
                        listen::Listener::open(
                            &self.pg_config,
                            self.request_timeout,
                            self.label.clone(),
                        ),
                    )
                    .await;
                    match opened {
                        Ok(Ok(l)) => {
                            *slot = Some(l.clone());
                            l
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(database = %self.label, %error, "cannot listen for releases");
                            return None;
                        }
                        Err(_) => return None,
                    }
                }
            }
        };
        match listener.subscribe(keys).await {
            Ok(s) => Some(s),
            Err(error) => {
                tracing::debug!(database = %self.label, %error, "cannot listen for releases");
                None
            }
        }
    }

    /// Enters the line of every resource of `keys`; returns the place.
    async fn enter(&self, keys: &[String], owner: &str) -> std::result::Result<i64, VoteOutcome> {
        let ttl = self.ttl_millis();
        let rows = self
            .request(Stmt::Enter, &[&keys, &owner, &ttl], self.request_timeout)
            .await?;
        rows.first()
            .and_then(|r| r.get::<_, Option<i64>>(0))
            .ok_or_else(|| {
                VoteOutcome::Failed(NodeError::other("entering the line returned no place"))
            })
    }

    /// Leaves the line of `keys` at `seq`, waking the waiters behind.
    async fn leave(
        &self,
        keys: &[String],
        seq: i64,
        limit: Duration,
    ) -> std::result::Result<(), VoteOutcome> {
        self.request(Stmt::Leave, &[&keys, &seq], limit)
            .await
            .map(|_| ())
    }

    /// Extends the lock before `deadline`, retrying failures within the validity left.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the row is gone, expired or another owner's, or when no extension
    /// succeeded before `deadline`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a cancelled extension leaves the expiry as it was or moved.
    pub(crate) async fn extend(
        &self,
        held: &PgHeld,
        deadline: Instant,
    ) -> Result<(Instant, Votes)> {
        let retry = crate::pure::extension::retry_delay(self.ttl);
        crate::keepalive::extend_within(deadline, retry, |budget| self.extend_once(held, budget))
            .await
            .map_err(|(cause, votes)| Error::lost(held.resource.to_string(), votes, cause))
    }

    /// One extension within `budget`: what it found, with the database's vote.
    async fn extend_once(&self, held: &PgHeld, budget: Duration) -> (Outcome, Votes) {
        if budget.is_zero() {
            let outcome = Outcome::failed(
                Attempt::TooLate,
                "the validity ran out before an extension was sent",
            );
            return (outcome, Votes::default());
        }
        let started = Instant::now();
        let ttl = self.ttl_millis();
        let resources: &[String] = &held.resources;
        let owner: &str = &held.owner;
        let rows = if held.shared {
            let resource: &str = &held.resource;
            self.request(Stmt::ExtendReader, &[&resource, &owner, &ttl], budget)
                .await
        } else {
            self.request(Stmt::Extend, &[&resources, &owner, &ttl], budget)
                .await
        };
        let elapsed = started.elapsed();
        let all = if held.shared { 1 } else { distinct(resources) };
        match rows {
            Ok(rows) if rows.len() == all => {
                let outcome = match validity::validity(self.ttl, elapsed, self.drift) {
                    Some(_) => Outcome::extended(started + self.ttl.saturating_sub(self.drift)),
                    None => Outcome::failed(Attempt::TooLate, "the extension left no validity"),
                };
                (outcome, self.votes(VoteOutcome::Granted, elapsed))
            }
            Ok(_) => (
                Outcome::failed(
                    Attempt::Impossible,
                    "a row of the lock is gone, expired or another owner's",
                ),
                self.votes(VoteOutcome::NotHeld, elapsed),
            ),
            Err(outcome) => (
                Outcome::failed(Attempt::Failed, outcome.to_string()),
                self.votes(outcome, elapsed),
            ),
        }
    }

    /// Extends `keys` once to a fresh TTL if `owner` holds them.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when `owner` does not hold a live lease; [`Error::Unavailable`] when the
    /// database did not answer.
    pub(crate) async fn extend_by_owner(&self, keys: &[String], owner: &str) -> Result<Votes> {
        let held = PgHeld::by_owner(keys, owner);
        let (outcome, votes) = self.extend_once(&held, self.request_timeout).await;
        match outcome.attempt {
            Attempt::Extended(_) => Ok(votes),
            Attempt::Impossible => Err(Error::lost(keys[0].clone(), votes, LostCause::NotHeld)),
            Attempt::TooLate => Err(Error::lost(keys[0].clone(), votes, LostCause::Expired)),
            Attempt::Failed => Err(Error::Unavailable {
                resource: keys[0].clone(),
                votes,
            }),
        }
    }

    async fn release_rows(
        &self,
        held: &PgHeld,
        limit: Duration,
    ) -> std::result::Result<Released, VoteOutcome> {
        let resources: &[String] = &held.resources;
        let owner: &str = &held.owner;
        let rows = if held.shared {
            let resource: &str = &held.resource;
            self.request(Stmt::ReleaseReader, &[&resource, &owner], limit)
                .await?
        } else {
            self.request(Stmt::Release, &[&resources, &owner], limit)
                .await?
        };
        Ok(Released::from_row(
            rows.first().and_then(|r| r.get::<_, Option<bool>>(0)),
        ))
    }

    /// Deletes the lock's rows that are ours, and wakes the waiters of their resources (the
    /// `NOTIFY` commits with the deletion).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the row was gone, another owner's, or expired by the database's
    /// clock (work done since was unprotected); [`Error::Unavailable`] when the database did not
    /// answer (the row, if not deleted after all, expires after the TTL).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a cancelled release leaves the row to expire after the TTL.
    pub(crate) async fn release(&self, held: &PgHeld) -> Result<Votes> {
        let started = Instant::now();
        let resource = held.resource.to_string();
        let mut released = self.release_rows(held, self.request_timeout).await;
        if matches!(released, Err(VoteOutcome::Failed(_))) {
            // The statement failed (a backend terminated under it, a connection closed before
            // the client noticed): once more, on a new connection if the old one is gone. Only
            // a live row deleted by the retry counts; anything else keeps the first answer (the
            // first statement may have run, so "gone" would not be the truth).
            if let Ok(Released::Live) = self.release_rows(held, self.request_timeout).await {
                released = Ok(Released::Live);
            }
        }
        match released {
            Ok(Released::Live) => Ok(self.votes(VoteOutcome::Granted, started.elapsed())),
            Ok(Released::Expired | Released::NotOurs) => Err(Error::lost(
                resource,
                self.votes(VoteOutcome::NotHeld, started.elapsed()),
                LostCause::NotHeld,
            )),
            Err(outcome) => Err(Error::Unavailable {
                resource,
                votes: self.votes(outcome, started.elapsed()),
            }),
        }
    }

    /// Releases `keys` if `owner` holds them (an owner value handed between processes).
    ///
    /// # Errors
    ///
    /// As [`PgBackend::release`].
    pub(crate) async fn release_by_owner(&self, keys: &[String], owner: &str) -> Result<Votes> {
        let held = PgHeld::by_owner(keys, owner);
        self.release(&held).await
    }

    /// Registers the lock with the client's extension engine; the returned [`Stop`] takes it
    /// out.
    pub(crate) fn keep_alive_held(
        self: &Arc<Self>,
        held: &PgHeld,
        state: Arc<GuardState>,
        schedule: Schedule,
    ) -> Stop {
        self.engine
            .register(self, &held.resource, held.clone(), state, schedule)
    }
}

impl Extends for PgBackend {
    type Lock = PgHeld;

    /// Extends every lock of the batch once; the statements share the one connection, which
    /// pipelines them.
    async fn extend_batch(
        self: Arc<Self>,
        locks: Vec<Arc<PgHeld>>,
        budget: Duration,
    ) -> Vec<Outcome> {
        let attempts = locks.iter().map(|held| self.extend_once(held, budget));
        futures_util::future::join_all(attempts)
            .await
            .into_iter()
            .map(|(outcome, _)| outcome)
            .collect()
    }
}

/// How many distinct resources `keys` names (the statements count rows per distinct resource).
fn distinct(keys: &[String]) -> usize {
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    sorted.dedup();
    sorted.len()
}

/// A wake-up set for a row's expiry comes this much after it, so that the attempt finds it
/// expired by the database's clock.
const WAKE_SLACK: Duration = Duration::from_millis(20);

/// What an attempt asked for: the name in errors, the resources granted, by whom, and whether
/// as a reader.
#[derive(Clone, Copy)]
struct Claim<'a> {
    name: &'a str,
    resources: &'a [String],
    owner: &'a str,
    shared: bool,
}

/// What one attempt found.
enum Take<T = PgGrant> {
    Granted(T),
    /// Held by another owner, or a waiter ahead in line: `wait` until the first row in the
    /// way expires by itself (unless refreshed).
    Blocked {
        wait: Duration,
        refusal: Error,
    },
    /// The waiter's place in line had expired.
    OutOfLine,
}

/// A waiter's place in line. Dropped while armed (a cancelled wait), it hands the leaving to
/// a task: `Drop` does no I/O.
struct Place {
    backend: Option<Arc<PgBackend>>,
    resources: Vec<String>,
    seq: i64,
}

impl Place {
    /// The place is gone already (taken with the lock, or expired) or was left: nothing to do
    /// on drop.
    fn disarm(&mut self) {
        self.backend = None;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let Some(backend) = self.backend.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let resources = std::mem::take(&mut self.resources);
        let seq = self.seq;
        backend.leaving.fetch_add(1, Ordering::SeqCst);
        runtime.spawn(async move {
            let limit = backend.request_timeout;
            let _ = backend.leave(&resources, seq, limit).await;
            backend.leaving.fetch_sub(1, Ordering::SeqCst);
            backend.left.notify_waiters();
        });
    }
}

/// The driver's error as a vote's failure, in the words of `NodeError` (never a secret: the
/// driver's messages do not carry the password).
fn node_error(e: &tokio_postgres::Error) -> NodeError {
    if let Some(db) = e.as_db_error() {
        let cause = match db.code().code() {
            "28P01" | "28000" => FailureCause::Auth,
            "42501" => FailureCause::NoPermission,
            "25006" => FailureCause::ReadOnly,
            "3D000" => FailureCause::NoDatabase,
            "57P03" => FailureCause::Loading,
            _ => FailureCause::Other,
        };
        let detail = format!("{}: {}", db.code().code(), db.message());
        return NodeError::new(cause, detail);
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return NodeError::new(FailureCause::Refused, "");
            }
        }
        source = s.source();
    }
    NodeError::other(e.to_string())
}
