//! fencelock: distributed locks that are fast and honest about their safety.
//!
//! One API takes a lock on a single Redis node (an *efficiency* lock: `SET key token NX PX ttl`,
//! released by a Lua compare-and-delete), on a majority of N independent Redis nodes
//! (*Redlock*: parallel fan-out, quorum N/2+1, validity = ttl - elapsed - drift), or on an etcd
//! cluster. In *fencing mode* every lock also carries a `u64` fencing token that strictly
//! increases from one holder to the next (on Redis, under the conditions of
//! `docs/fencing.md`: counters kept, no clock jump; see [`Lock::fencing_token`]), and the
//! [`fence`] module ships storage adapters
//! (SQLite, PostgreSQL) that refuse a write carrying an older token.
//!
//! # Which mode protects what
//!
//! No lock with a TTL survives a process pause or a clock jump on its own: a holder that is
//! paused past its TTL wakes up still believing it holds the lock. An efficiency lock (one node)
//! or Redlock is enough when two holders at once only cost duplicate work (a cron job, a cache
//! rebuild). When two holders at once would corrupt data, take the lock in fencing mode and
//! write through fenced storage: the storage, not the lock, then rejects the stale holder. The
//! README's table and `docs/guarantees.md` say which faults each mode survives; the guides in
//! `docs/guide/` show each primitive in a complete program.
//!
//! # Quick start
//!
//! Start local nodes with the `fencelock` command (`fencelock up`, then
//! `eval "$(fencelock nodes --export)"` sets `FENCELOCK_NODES`), and run
//! `cargo run -p fencelock --features sqlite --example quickstart`: the program below, which is
//! `examples/quickstart.rs` (the test suite runs it against real nodes).
//!
//! ```no_run
//! use std::process::ExitCode;
//! use std::time::Duration;
//!
//! use fencelock::fence::SqliteFence;
//! use fencelock::{Client, Config};
//!
//! #[tokio::main]
//! async fn main() -> ExitCode {
//!     // FENCELOCK_NODES holds the node URLs: redis://127.0.0.1:7001,redis://127.0.0.1:7002,...
//!     let result = match Config::from_env().and_then(|c| Client::new(c.with_fencing(true))) {
//!         Ok(client) => {
//!             let result = run(&client).await;
//!             // A lock dropped by an early return (`?`) is released by a background task: let it
//!             // finish before the runtime stops, or the lock stays taken until its TTL runs out.
//!             client.close().await;
//!             result
//!         }
//!         Err(e) => Err(e.into()),
//!     };
//!     match result {
//!         Ok(()) => ExitCode::SUCCESS,
//!         Err(e) => {
//!             eprintln!("quickstart: {e}");
//!             ExitCode::FAILURE
//!         }
//!     }
//! }
//!
//! async fn run(client: &Client) -> Result<(), Box<dyn std::error::Error>> {
//!     // Acquire, work, release. `acquire` waits in line while another client holds the lock.
//!     let lock = client.acquire("report:daily").await?;
//!     println!("holding {} for {:?}", lock.resource(), lock.remaining());
//!     tokio::time::sleep(Duration::from_millis(100)).await; // the work: done before the TTL ends
//!     lock.release().await?;
//!
//!     // Fencing: the lock's token goes with the write, and the storage refuses a write whose
//!     // token is older than one it already accepted (a holder that was paused past its TTL).
//!     let path = std::env::temp_dir().join("fencelock-quickstart.db");
//!     let stock = SqliteFence::open(&path)?;
//!     stock.unfenced(|db| {
//!         db.execute_batch(
//!             "CREATE TABLE IF NOT EXISTS inventory (sku TEXT PRIMARY KEY, stock INTEGER NOT NULL);
//!              INSERT OR IGNORE INTO inventory VALUES ('sku:42', 1000);
//!              CREATE TABLE IF NOT EXISTS report (step INTEGER NOT NULL);",
//!         )
//!     })?;
//!     let lock = client.acquire("sku:42").await?;
//!     // The token and the lock that issued it: the fence row remembers which lock it follows.
//!     let token = lock.fencing_token().expect("the client is in fencing mode");
//!     let left: i64 = stock
//!         .write_async("sku:42", token.clone(), |tx| {
//!             tx.execute(
//!                 "UPDATE inventory SET stock = stock - 1 WHERE sku = 'sku:42'",
//!                 [],
//!             )?;
//!             Ok(tx.query_row(
//!                 "SELECT stock FROM inventory WHERE sku = 'sku:42'",
//!                 [],
//!                 |r| r.get(0),
//!             )?)
//!         })
//!         .await?;
//!     lock.release().await?;
//!     println!(
//!         "reserved one of sku:42 with fencing token {}; {left} left",
//!         token.value()
//!     );
//!
//!     nightly_report(client, &stock).await
//! }
//! # async fn nightly_report(_: &Client, _: &SqliteFence) -> Result<(), Box<dyn std::error::Error>> {
//! #     Ok(()) // the README's second block, in examples/quickstart.rs
//! # }
//! ```
//!
//! - [`Client`] takes locks: [`Client::acquire`] waits in line, [`Client::try_acquire`] makes
//!   one attempt, a [`Waiter`] waits in slices and keeps its place in line between them. [`Config`] and [`RetryPolicy`] are plain values, checked before any I/O;
//!   [`Config::from_env`] reads the `FENCELOCK_*` variables the command reads too.
//! - [`Lock`] is the handle: release it, extend it, or [`Lock::auto_extend`] it into a
//!   [`LockGuard`] whose [`LostSignal`] fires before the lock can have expired.
//! - [`Client::with_lock`] and [`Client::try_with_lock`] run long work under an auto-extended
//!   lock and hand it a [`LockContext`] (resource, fencing token, deadline, lost signal).
//! - [`Client::close`] waits for the background release of locks dropped without
//!   [`Lock::release`]; call it before `main` returns.
//! - [`Client::semaphore`] makes a [`Semaphore`] of N permits (N independent slots, each a
//!   Redlock mutex: a permit is a [`Lock`] on its slot).
//! - [`Client::rwlock`] makes a [`RwLock`]: many readers or one writer, fair to waiting
//!   writers; the write side is the mutex (fenced like it), and a reader learns the last
//!   writer's fencing token ([`Lock::last_writer_token`]).
//! - [`Client::election`] makes an [`Election`]: [`Election::campaign`] holds leadership
//!   (the term is the fencing token), [`Election::observe`] reports each new leader in order.
//! - [`fence`]: fenced storage (SQLite, PostgreSQL) that refuses a stale holder's write.
//! - [`protocol`]: the keys and the release script, for tools and other clients that share
//!   locks with fencelock.
//! - [`Holder`] (with [`Config::with_holder`]): who holds a lock, stored beside it for
//!   `fencelock inspect`.
//! - Every error is an [`Error`]; lock errors carry the per-node [`Votes`] that explain them.
//!
//! # Reentrancy
//!
//! Locks are not reentrant. Reentrancy is per thread in Redisson and Hazelcast, but an async
//! task has no thread of its own and a [`Lock`] moves between tasks, and a second handle on the
//! same lock would hand out its fencing token twice with no say in when protection ends. Pass
//! the held [`Lock`] (or its [`LockContext`]) to the code that needs it. A task that asks again,
//! through the same client, for a resource it holds gets [`Error::AlreadyHeld`] at once, instead
//! of waiting on itself for its whole wait budget; other tasks wait as for any holder. The
//! task recorded is the one that acquired (a lock moved to another task still counts as the
//! acquirer's). Tested on real nodes: `tests/reentrancy.rs`.
//!
//! # Layout
//!
//! The source is layered; each layer uses only those below it.
//!
//! - `pure/`: the rules without I/O (quorum, validity, retry delays, fencing tokens, the
//!   waiting line's order, votes).
//! - `keepalive.rs`: the extension engine (one task per client, one rule for every backend:
//!   `pure/extension.rs`) and the [`LostSignal`].
//! - `redis/` and `etcd/`: the backends, each self-contained (`redis/round.rs` owns the round,
//!   `redis/redlock.rs` an attempt and the fencing write-back, `redis/line.rs` the waiting
//!   line, `redis/extender.rs` the Redis batch of the extension engine, `redis/scripts.rs` and
//!   `redis/lua/` the Lua scripts), `pglock/` (PostgreSQL) and `zk/` (ZooKeeper: `zk/line.rs`
//!   the line of waiters' nodes, `zk/timing.rs` the session's deadline).
//! - `backend.rs`: the one place that dispatches to a backend.
//! - `client.rs`, `lock.rs`, `acquire.rs`, `waiter.rs`, `guard.rs`, `scoped.rs`: the public
//!   handles, which call `backend.rs` and never match on a backend.
//!
//! `docs/architecture.md` in the repository is the contributor's map: which file a change goes
//! to.
//!
//! # Feature flags
//!
//! - The Redis backend is always built.
//! - No feature is on by default: the Redis backend alone, with no SQLite and no database
//!   driver to build.
//! - `sqlite`: [`fence::SqliteFence`], SQLite bundled, over rusqlite 0.32
//!   (re-exported as `fencelock::rusqlite`: use it for the transaction the fenced write hands
//!   you, so that your build links one SQLite). 0.32 because it links the libsqlite3-sys that
//!   sqlx 0.8's SQLite driver links (0.30): one build can link only one, so with a newer
//!   rusqlite no program could use fencelock and sqlx 0.8 on SQLite together.
//! - `postgres`: `fence::PostgresFence` over tokio-postgres 0.7 (re-exported as
//!   `fencelock::tokio_postgres`); with `blocking`, also `blocking::PostgresFence` over its
//!   synchronous client, the `postgres` crate 0.19 (re-exported as `fencelock::postgres`).
//! - `sqlx-postgres`: `fence::SqlxPostgresFence`, the fence check inside your own sqlx 0.8
//!   transaction on PostgreSQL (re-exported as `fencelock::sqlx`).
//! - `sqlx-sqlite`: `fence::SqlxSqliteFence`, the same on SQLite.
//! - `sqlx-mysql`: `fence::SqlxMySqlFence`, the same inside your own sqlx 0.8 transaction on
//!   MySQL or MariaDB (InnoDB).
//! - `etcd`: `etcd://` node URLs, locks on an etcd cluster whose revisions are the fencing
//!   tokens.
//! - `postgres-lock`: `postgres://` (or `postgresql://`) node URLs, locks as lease rows in one
//!   PostgreSQL database whose sequence gives the fencing tokens (mutexes only so far).
//! - `zookeeper`: `zk://host:2181,host:2181/chroot` node URLs, locks as Curator's
//!   InterProcessMutex on a ZooKeeper ensemble, whose nodes' creation zxids are the fencing
//!   tokens; semaphores, read-write locks, elections and locks of several resources as Curator's
//!   recipes.
//! - `tls`: `rediss://` node URLs, and `etcds://` with `etcd` (rustls with the ring provider);
//!   [`TlsConfig`] sets a CA and a client certificate.
//! - `blocking`: `fencelock::blocking`, the same client, lock, guard and lost signal with
//!   blocking calls, on a runtime thread of its own, and with `postgres` the blocking
//!   PostgreSQL fence (the SQLite fence is blocking already).
//! - `metrics`: records lock metrics through the `metrics` facade (no exporter; install your
//!   recorder before taking locks); [`telemetry`] names them. Without it nothing is recorded.
//!   The warnings an operator acts on (a lost lock, a node that stops answering, a node in
//!   quarantine) go through `tracing` in every build.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod backend;
#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;
mod client;
mod config;
mod context;
mod election;
mod env;
mod error;
#[cfg(feature = "etcd")]
mod etcd;
#[cfg(any(
    feature = "sqlite",
    feature = "postgres",
    feature = "sqlx-postgres",
    feature = "sqlx-mysql"
))]
pub mod fence;
mod fencing_token;
mod guard;
mod holder;
mod keepalive;
mod lock;
mod node;
#[cfg(feature = "postgres-lock")]
mod pglock;
pub mod protocol;
mod pure;
mod redis;
mod reentry;
mod reseed;
mod rwlock;
mod scoped;
mod semaphore;
#[doc(hidden)]
pub mod sim;
pub mod telemetry;
mod tls;
mod waiter;
#[cfg(feature = "zookeeper")]
mod zk;

// Public for the benches, the model checker and the CLI only: not part of the API. The key
// names that other clients need are in `protocol`.
#[doc(hidden)]
pub use crate::pure::{fencing, nodeset, quorum};

pub use crate::client::Client;
pub use crate::config::Config;
pub use crate::context::LockContext;
pub use crate::election::{Election, Leader, Leadership, Observer};
pub use crate::error::{Error, ErrorKind, LostCause, Result};
pub use crate::fencing_token::FencingToken;
pub use crate::guard::LockGuard;
pub use crate::holder::{Holder, MAX_LABEL_LEN};
pub use crate::keepalive::{AutoExtend, ExtensionState, Extensions, LostSignal};
pub use crate::lock::Lock;
pub use crate::node::{NodeAddr, Scheme};
pub use crate::pure::node_error::{FailureCause, NodeError};
pub use crate::pure::retry::RetryPolicy;
pub use crate::pure::vote::{NodeVote, VoteOutcome, Votes};
pub use crate::rwlock::RwLock;
pub use crate::semaphore::{Semaphore, MAX_PERMITS};
pub use crate::tls::TlsConfig;
pub use crate::waiter::Waiter;

#[cfg(all(feature = "blocking", feature = "postgres"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "blocking", feature = "postgres"))))]
pub use postgres;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use rusqlite;
#[cfg(any(feature = "sqlx-postgres", feature = "sqlx-mysql"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "sqlx-postgres", feature = "sqlx-mysql")))
)]
pub use sqlx;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use tokio_postgres;
