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
//! README's table and `docs/guarantees.md` say which faults each mode survives.
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use fencelock::{Client, Config};
//!
//! # async fn run() -> fencelock::Result<()> {
//! let client = Client::new(
//!     Config::new([
//!         "redis://10.0.0.1:6379/0",
//!         "redis://10.0.0.2:6379/0",
//!         "redis://10.0.0.3:6379/0",
//!     ])
//!     .with_ttl(Duration::from_secs(10))
//!     .with_fencing(true),
//! )?;
//!
//! let lock = client.acquire("lock:sku:42").await?;
//! // The token and the lock that issued it: a fence row takes tokens of one lock only.
//! let token = lock.issued_token().expect("fencing mode");
//! // ... write to storage with `token`, before lock.validity_deadline() ...
//! lock.release().await?;
//!
//! // Long work: extended in the background, cancelled if the lock is lost.
//! let n = client
//!     .with_lock("nightly-report", async |lost| {
//!         // check lost.is_fired() before each irreversible step
//!         42
//!     })
//!     .await?;
//! # let _ = (token, n);
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`Client`] (`client.rs`) takes locks; [`Lock`] (`lock.rs`) is the handle;
//!   [`LockGuard`] and [`LostSignal`] (`keepalive.rs`) keep a lock alive for long work.
//! - [`Config`] and [`RetryPolicy`] are plain values checked before any I/O.
//! - Pure logic, without I/O and unit-tested beside the code: `quorum.rs` (majority and the
//!   early decision of a round), `validity.rs` (drift and validity), `retry.rs` (jittered
//!   delays), [`fencing`] (token derivation), `queue.rs` (the waiting line: tickets and
//!   leases), `node.rs` (URLs and redaction).
//! - `redis/`: the Redis backend: one multiplexed connection per node (`conn.rs`), the requests
//!   of a round in flight together (`inflight.rs`), the Lua scripts (`scripts.rs`), the batch
//!   extender (`extender.rs`) and wake-ups on release and on a waiter's turn (`watch.rs`).
//! - `etcd/` (feature `etcd`): the etcd backend; `fence/`: fenced storage.
//! - One error type, [`Error`], whose variants carry the per-node [`Votes`] that explain them.
//!
//! # Feature flags
//!
//! - The Redis backend is always built.
//! - `sqlite` (default): [`fence::SqliteFence`], SQLite bundled.
//! - `postgres`: `fence::PostgresFence` over tokio-postgres.
//! - `etcd`: `etcd://` node URLs, locks on an etcd cluster whose revisions are the fencing
//!   tokens.
//! - `tls`: `rediss://` node URLs.
#![warn(missing_docs)]

mod client;
mod config;
mod error;
#[cfg(feature = "etcd")]
mod etcd;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub mod fence;
pub mod fencing;
mod issued;
mod keepalive;
mod lock;
mod node;
pub mod protocol;
mod queue;
pub mod quorum;
mod redis;
mod retry;
mod token;
mod validity;
mod vote;

pub use crate::client::Client;
pub use crate::config::Config;
pub use crate::error::{Error, ErrorKind, Result};
pub use crate::issued::IssuedToken;
pub use crate::keepalive::{AutoExtend, LockGuard, LostSignal};
pub use crate::lock::Lock;
pub use crate::node::{NodeAddr, Scheme};
pub use crate::retry::RetryPolicy;
pub use crate::vote::{NodeVote, VoteOutcome, Votes};
