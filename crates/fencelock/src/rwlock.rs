//! The read-write lock: many readers or one writer, fair to writers, writers fenced. The
//! design, and what it guarantees, is in [`RwLock`]'s docs; its Redis side is
//! `redis/rwlock.rs`, its etcd side `etcd/rwlock.rs`, its model `tests/rwlock_model.rs`.

use std::sync::Arc;

use crate::client::{check_resources, Client};
use crate::context::LockContext;
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::pure::retry::RetryPolicy;
use crate::scoped::Scoped;

/// A read-write lock on one resource: many readers or one writer, fair to writers, writers
/// fenced. Made by [`Client::rwlock`]; cheap to clone.
///
/// # On Redis (one node or Redlock)
///
/// The **write side is the mutex**: [`RwLock::write`] takes the ordinary lock key `resource`
/// (the key [`Client::acquire`] takes), waits in the mutex's line, and in fencing mode gets its
/// fencing token from the same node counter under the same amnesia guard, so write tokens
/// follow the mutex's order (`docs/fencing.md`). A mutex holder and a writer of the same name
/// are the same lock: each excludes the other and the readers, and `fencelock run R` and
/// `fencelock run --shared R` share one resource as `flock` and `flock -s` do.
///
/// **Readers** hold the same key on a quorum, with the value `fencelock:readers` (the marker)
/// instead of an owner value: every `SET NX` (fencelock's, or any Redlock client's) is refused
/// while it is there, and a compare-and-delete of an owner value leaves it alone. Beside it, the
/// sorted set [`readers_key`](crate::protocol::readers_key) (`fencelock:readers:<resource>`) holds each reader's own owner
/// token, scored by the node time until which its entry lives. The scripts keep the marker and
/// the set alive exactly as long as the longest live entry: a reader that dies stops counting
/// after its own TTL, and the key is free once the last live reader is gone. A node grants a
/// reader while its key is free or holds the marker; a node holding a writer's token refuses.
/// A writer and a reader granted on two quorums would meet on a node that granted both while
/// both keys lived: the mutex's argument, unchanged. `tests/rwlock_model.rs` checks it
/// (pauses, honest expiry, a restart with quarantine) and shows it breaking where the mutex
/// breaks (a clock jump, a restart without quarantine).
///
/// **Fairness.** A waiting reader or writer takes a place in the mutex's waiting line of the
/// key (tickets by start time, see `pure/queue.rs`). A node refuses a reader while a writer with
/// a running lease waits in line ahead of it (anywhere in line, for a reader's first attempt),
/// so a stream of readers cannot starve a waiting writer: the readers that queued before the
/// writer go first, the ones after it wait for it. The last reader to leave wakes the writer
/// first in line; a writer's release wakes every waiting reader. The line orders fencelock's
/// waiters only (see [`Client::acquire`]): a first attempt can still slip in once per
/// hand-over, and a reader that arrives between a writer's first refusal and its place in line
/// gets in ahead of it.
///
/// **The last writer's token.** In fencing mode, a write lock, once its token is issued, records
/// it in the key [`writer_key`](crate::protocol::writer_key) (`fencelock:writer:<resource>`) on every node where it
/// still owns the lock key; a quorum must take it before the write lock is granted. The record
/// lives [`RECORD_LIFETIME_TTLS`](crate::protocol::RECORD_LIFETIME_TTLS) lock TTLs after its
/// last write, so that node state does not grow with the names used; each record also raises
/// the node's largest record ([`WRITER_MAX_KEY`](crate::protocol::WRITER_MAX_KEY), one key per
/// node, no TTL), which a reader reads where its resource's record expired. A reader's
/// acquisition reads the record on each node that grants it, and
/// [`Lock::last_writer_token`] is the largest its granting quorum reported. What it
/// guarantees, while the nodes keep their data (no restart without persistence, no eviction) and
/// no node's clock jumps: it is **at least the fencing token of every write lock of the resource
/// that was granted before this read lock's acquisition began** (that writer's quorum and the
/// reader's meet on a node that recorded it before granting the reader), and it is the token of
/// a writer that had been issued one before the read lock was granted (0 if none was recorded);
/// that writer may be one whose write lock then failed after recording on a minority of nodes,
/// or, once the resource's record expired on a granting node, a writer of another resource.
/// So data read under the lock whose fence row carries at least that token is no older than
/// every write made under those write locks. A node that restarts without its data forgets the
/// records: a reader it grants may then report an older token (never a newer one), which the
/// model shows (`a_restart_without_persistence_can_lose_the_last_writer_record`). A plain mutex
/// holder ([`Client::acquire`] on the same name) records nothing unless it calls
/// [`RwLock::record_write`]: take writes through [`RwLock::write`] for readers to learn them.
///
/// # On etcd
///
/// Every waiter is a key under the resource's queue prefix, as for the etcd mutex (a writer's
/// key is the mutex's: the lease id in hex; a reader's has an `r` before it). A writer holds
/// when no key older than its own exists (it waits for the readers and writers ahead); a reader
/// holds when no *writer's* key older than its own exists. So readers share, writers exclude
/// everyone, and waiters are served in creation-revision order: a reader behind a waiting writer
/// waits for it. A writer's fencing token is its key's create revision, as for the mutex, and it
/// records it (a transaction, only while its key exists) in `fencelock/<resource>.last-writer`
/// before the write lock is granted; a reader reads the record when it is granted, so its
/// last-writer token is exactly the last write lock's token before it (etcd's consensus orders
/// every step). The etcd mutex and the write side are the same lock.
///
/// # Auto-extension, scoped forms, the lost signal
///
/// A read or write lock is a [`Lock`]: [`Lock::extend`], [`Lock::auto_extend`] and its
/// [`LostSignal`](crate::LostSignal), [`Lock::release`], and the background release on drop
/// work as for the mutex. [`RwLock::with_read`] and [`RwLock::with_write`] run work under an
/// auto-extended lock, as [`Client::with_lock`] does.
///
/// Reentrancy: none, as for the mutex. A task that holds a read or write lock of a resource
/// through a client and asks the same client for either again gets
/// [`Error::AlreadyHeld`](crate::Error::AlreadyHeld) at once (a second read would deadlock
/// behind a writer waiting for the first).
///
/// # Example
///
/// ```no_run
/// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
/// let prices = client.rwlock("price-list")?;
///
/// let read = prices.read().await?; // shared with other readers
/// // ... read the price list ...
/// read.release().await?;
///
/// prices
///     .with_write(async |lock| {
///         // ... alone: no reader, no other writer ...
///         println!("writing under token {:?}", lock.fencing_token().map(|t| t.value()));
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    client: Client,
    keys: Arc<[String]>,
}

impl Client {
    /// The read-write lock on `resource`. No I/O happens here.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a resource name a lock would refuse, or on a backend
    /// without read-write locks (`zk://`).
    pub fn rwlock(&self, resource: &str) -> Result<RwLock> {
        Ok(RwLock {
            client: self.clone(),
            keys: check_resources(&[resource])?,
        })
    }
}

impl RwLock {
    /// The resource.
    pub fn resource(&self) -> &str {
        &self.keys[0]
    }

    /// One attempt to take a read lock.
    ///
    /// # Errors
    ///
    /// [`Error::Contention`] when a writer holds the resource, or waits in line for it;
    /// [`Error::Unavailable`] when too many nodes failed; [`Error::TooSlow`] when no validity
    /// was left; [`Error::AlreadyHeld`] (before any I/O) when the calling task holds a read or
    /// write lock of the resource through this client. Whatever the error, the reader's
    /// entries have been released on every node.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a call dropped before it returns releases its reader entries in the
    /// background (by its own owner value), as [`Client::try_acquire`] does.
    pub async fn try_read(&self) -> Result<Lock> {
        self.client.holdings().check(&self.keys)?;
        let grant = self.client.backend().try_read(&self.keys[0]).await?;
        Ok(Lock::new(self.client.clone(), self.keys.clone(), grant))
    }

    /// Takes a read lock, waiting per the client's [`RetryPolicy`]: in line behind the writers
    /// that wait ahead of it, woken by their releases.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] (holding the last attempt's error) when the wait or the attempt
    /// count ran out; otherwise as [`RwLock::try_read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: see [`RwLock::try_read`]; the reader leaves the line in the background.
    pub async fn read(&self) -> Result<Lock> {
        let policy = self.client.config().retry().clone();
        self.read_with(&policy).await
    }

    /// [`RwLock::read`] with a retry policy for this call only.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::read`].
    pub async fn read_with(&self, policy: &RetryPolicy) -> Result<Lock> {
        self.client.holdings().check(&self.keys)?;
        let grant = self.client.backend().read(&self.keys[0], policy).await?;
        Ok(Lock::new(self.client.clone(), self.keys.clone(), grant))
    }

    /// One attempt to take the write lock: the mutex's attempt ([`Client::try_acquire`]), and in
    /// fencing mode the record of its token for readers.
    ///
    /// # Errors
    ///
    /// As [`Client::try_acquire`] ([`Error::Contention`] also while readers hold); when the
    /// record does not reach a quorum before the validity runs out, [`Error::Unavailable`] (too
    /// many nodes failed) or [`Error::TooSlow`], and the lock is released.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: see [`Client::try_acquire`]; a cancelled record leaves the lock to be
    /// released in the background.
    pub async fn try_write(&self) -> Result<Lock> {
        let lock = self.client.try_acquire(self.resource()).await?;
        self.record(lock).await
    }

    /// Takes the write lock, waiting per the client's [`RetryPolicy`] in the mutex's line (the
    /// readers that queued after it wait for it).
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`] and [`RwLock::try_write`].
    ///
    /// # Cancel safety
    ///
    /// As [`Client::acquire`].
    pub async fn write(&self) -> Result<Lock> {
        let policy = self.client.config().retry().clone();
        self.write_with(&policy).await
    }

    /// [`RwLock::write`] with a retry policy for this call only.
    ///
    /// # Errors
    ///
    /// As [`RwLock::write`].
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::write`].
    pub async fn write_with(&self, policy: &RetryPolicy) -> Result<Lock> {
        let lock = self.client.acquire_with(self.resource(), policy).await?;
        self.record(lock).await
    }

    /// Records the fencing token of `lock`, a lock of this resource taken through the mutex's
    /// API ([`Client::acquire`], a [`Waiter`](crate::Waiter)), for readers, as
    /// [`RwLock::write`] does before it returns: readers then learn it as the last writer's.
    /// Does nothing outside fencing mode.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when `lock` is not an exclusive lock of this resource alone;
    /// [`Error::Unavailable`] when too many nodes failed, [`Error::TooSlow`] (Redis) or
    /// [`Error::Lost`] (etcd) when the lock was no longer held on a quorum or its validity ran
    /// out first. The lock is still yours: release it.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a cancelled record may have reached some nodes (the record only grows).
    pub async fn record_write(&self, lock: &Lock) -> Result<()> {
        let Some(token) = lock.fencing_token().map(|t| t.value()) else {
            return Ok(());
        };
        if lock.resources() != [self.resource()] {
            return Err(Error::config(
                "lock",
                format!(
                    "{:?} is not a lock of {:?} alone: only such a write lock's token can be recorded for its readers",
                    lock.resources(),
                    self.resource()
                ),
            ));
        }
        lock.held()
            .record_writer(self.resource(), token, lock.validity_deadline())
            .await
    }

    /// In fencing mode, records the write lock's token for readers before handing it out.
    async fn record(&self, lock: Lock) -> Result<Lock> {
        match self.record_write(&lock).await {
            Ok(()) => Ok(lock),
            Err(e) => {
                let _ = lock.release().await;
                Err(e)
            }
        }
    }

    /// Runs `work` under a read lock: acquires (waiting per the retry policy), keeps it
    /// extended while `work` runs, hands it a [`LockContext`] (with
    /// [`LockContext::last_writer_token`]), and releases in every case. If the lock is lost
    /// first, `work` is dropped and the call returns [`Error::Lost`], as
    /// [`Client::with_lock`] does.
    ///
    /// # Errors
    ///
    /// Errors of [`RwLock::read`]; [`Error::Lost`] when the lock was lost before `work`
    /// finished.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the lock in the background.
    pub async fn with_read<T, F>(&self, work: F) -> Result<T>
    where
        F: AsyncFnOnce(LockContext) -> T,
    {
        Scoped::run(self.read().await?, work).await?.into_output()
    }

    /// Runs `work` under the write lock, as [`RwLock::with_read`] does under a read lock (the
    /// context carries the write lock's fencing token).
    ///
    /// # Errors
    ///
    /// Errors of [`RwLock::write`]; [`Error::Lost`] when the lock was lost before `work`
    /// finished.
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::with_read`].
    pub async fn with_write<T, F>(&self, work: F) -> Result<T>
    where
        F: AsyncFnOnce(LockContext) -> T,
    {
        Scoped::run(self.write().await?, work).await?.into_output()
    }

    /// [`RwLock::with_read`] for work that can fail: its `Result` comes back as it is (see
    /// [`Client::try_with_lock`]).
    ///
    /// # Errors
    ///
    /// `work`'s own error (after the release), when it returned one; otherwise as
    /// [`RwLock::with_read`], converted into `E`.
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::with_read`].
    pub async fn try_with_read<T, E, F>(&self, work: F) -> Result<T, E>
    where
        F: AsyncFnOnce(LockContext) -> Result<T, E>,
        E: From<Error>,
    {
        Scoped::run(self.read().await?, work).await?.into_result()
    }

    /// [`RwLock::with_write`] for work that can fail (see [`RwLock::try_with_read`]).
    ///
    /// # Errors
    ///
    /// As [`RwLock::try_with_read`], with [`RwLock::write`]'s errors.
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::with_read`].
    pub async fn try_with_write<T, E, F>(&self, work: F) -> Result<T, E>
    where
        F: AsyncFnOnce(LockContext) -> Result<T, E>,
        E: From<Error>,
    {
        Scoped::run(self.write().await?, work).await?.into_result()
    }
}
