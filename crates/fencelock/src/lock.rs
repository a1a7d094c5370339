//! The lock handle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::backend::{Grant, Held};
use crate::client::Client;
use crate::error::{Error, LostCause, Result};
use crate::pure::vote::Votes;

/// A held lock. Release it with [`Lock::release`].
///
/// The lock is only valid until [`Lock::validity_deadline`]: past it, the keys may have expired
/// on a majority of nodes and another client may hold the lock. Work that can outlast it must
/// extend the lock ([`Lock::extend`], or [`Lock::auto_extend`] in the background), and work that
/// protects data must carry the [fencing token](Lock::fencing_token) to storage that checks it.
///
/// Dropping a lock without releasing it does no I/O in `Drop`: it asks a background task of the
/// client to release it, and if there is no runtime, the keys expire after the TTL. The drop
/// of the program's last client handle (or [`Client::close`]) waits for that release, so a
/// lock dropped by an early `?` in `main` does not outlive the process.
///
/// # Example
///
/// ```no_run
/// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
/// let mut lock = client.acquire("report:daily").await?;
/// // ... a step of the work, finished before lock.validity_deadline() ...
/// lock.extend().await?; // a new TTL from now, if the lock is still held
/// // ... the next step ...
/// lock.release().await?; // an error here means the lock was lost meanwhile
/// # Ok(())
/// # }
/// ```
#[must_use = "the lock is held until release() or the TTL; dropping it releases it in the background"]
pub struct Lock {
    client: Client,
    keys: Arc<[String]>,
    held: Held,
    fencing_token: Option<u64>,
    last_writer: Option<u64>,
    deadline: Instant,
    votes: Votes,
    released: bool,
    /// The entry in the client's holdings, removed when the lock is dropped (see `reentry.rs`).
    _holding: crate::reentry::Registration,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("resources", &self.keys)
            .field("held", &self.held)
            .field("fencing_token", &self.fencing_token)
            .field("valid_for", &self.remaining())
            .field("votes", &self.votes)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(client: Client, keys: Arc<[String]>, grant: Grant) -> Lock {
        crate::telemetry::held(&client.telemetry().label(&keys[0]), 1.0);
        Lock {
            _holding: client.holdings().register(&keys),
            client,
            keys,
            held: grant.held,
            fencing_token: grant.fencing_token,
            last_writer: grant.last_writer,
            deadline: grant.deadline,
            votes: grant.votes,
            released: false,
        }
    }

    pub(crate) fn held(&self) -> &Held {
        &self.held
    }

    /// Gives up the handle without releasing: its registration in the holdings goes now, and
    /// the caller releases what it returns (a campaign cut short, `election.rs`).
    pub(crate) fn disown(mut self) -> (Client, Arc<[String]>, Held) {
        self.released = true;
        (self.client.clone(), self.keys.clone(), self.held.clone())
    }

    /// The resource name (the key on every node); the first one for a multi-resource lock.
    pub fn resource(&self) -> &str {
        &self.keys[0]
    }

    pub(crate) fn keys(&self) -> &Arc<[String]> {
        &self.keys
    }

    /// Every resource this lock holds (one, unless taken with `acquire_many`).
    pub fn resources(&self) -> &[String] {
        &self.keys
    }

    /// The value that owns the key: 128 random bits in hex, followed on Redis by a space and the
    /// holder label when the client has one (`host=.. pid=..[ label=..]`, so it may hold
    /// spaces); with etcd, the lock key's name. Whoever knows it can release or extend the
    /// lock: treat it as a secret.
    pub fn owner(&self) -> &str {
        self.held.owner()
    }

    /// On a read lock of a [`RwLock`](crate::RwLock) in fencing mode: the fencing token of the
    /// last write lock of the resource (0 when none was recorded), to check that data read
    /// under this lock is no older than that write. On Redis it is at least the token of every
    /// write lock of the resource that was granted before this read lock's acquisition began,
    /// and it is the token of a writer issued one before this read lock was granted; on etcd it
    /// is exactly the token of the last write lock granted before this one; on PostgreSQL it is
    /// the token sequence's last value, at least the token of every write lock granted before
    /// it (on PostgreSQL every read lock has it, fencing mode or not). The conditions
    /// (nodes that keep their data) are in [`RwLock`](crate::RwLock)'s docs. `None` on write
    /// locks, on mutexes and outside fencing mode.
    pub fn last_writer_token(&self) -> Option<u64> {
        self.last_writer
    }

    /// The fencing token, in fencing mode (always, with etcd): pass it to the fenced storage
    /// ([`crate::fence`]) with every write. [`FencingToken::value`](crate::FencingToken::value)
    /// is its number, e.g. for a storage of your own or a child process.
    ///
    /// The token also names the lock that issued it, so a fence row binds to this lock and
    /// refuses tokens of another. It carries the lock's validity deadline as of this call, so
    /// that a storage that refuses it can tell a stale holder ([`Error::StaleToken`]) from a
    /// counter reset ([`Error::CounterReset`]); after [`Lock::extend`], take it again.
    ///
    /// On Redis its number is strictly greater than that of every holder of the same resources
    /// whose token was issued before this lock was granted, **under the conditions
    /// `docs/fencing.md` states** ("Why a later holder's token is larger" and "The holes"): the
    /// nodes keep their counters (no restart without persistence, no eviction: `appendfsync
    /// always` and `noeviction`, which `fencelock doctor` checks) and no node's clock jumps.
    /// Outside them tokens stay unique but may be out of order. On etcd it is the revision that
    /// created the lock's keys: larger than every earlier holder's of each of its resources, by
    /// etcd's consensus. Tokens from different locks (other names, other node sets, Redis and
    /// etcd) are not comparable (two concurrent grants of different names may even get equal
    /// numbers): the fenced storage keeps one row per resource and refuses them on one row.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
    /// let lock = client.acquire("sku:42").await?;
    /// if let Some(token) = lock.fencing_token() {
    ///     println!("fencing token {}", token.value());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<crate::FencingToken> {
        let issuer = crate::FencingToken::issuer_name(self.held.backend_name(), &self.keys);
        self.fencing_token
            .map(|t| crate::FencingToken::new(t, issuer).with_valid_until(self.deadline))
    }

    /// The instant, on this process's monotonic clock, until which the lock may be considered
    /// held: acquisition start + TTL - drift.
    pub fn validity_deadline(&self) -> Instant {
        self.deadline
    }

    /// The time left until the validity deadline (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether the validity deadline is still ahead.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// The per-node answers of the acquisition (or of the last extension).
    pub fn votes(&self) -> &Votes {
        &self.votes
    }

    /// The client that took this lock.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Extends the lock to a full TTL from now, if a quorum still holds our token and answers
    /// before the current validity runs out. It never brings back a lock that has expired: the
    /// script only renews a key that still holds our token. An attempt that too few nodes
    /// answered (failed, timed out) is retried within the validity left, by the same rule as
    /// auto-extension (see [`AutoExtend`](crate::AutoExtend)), so a passing failure costs a
    /// retry, not the lock.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] with the cause: [`LostCause::NotHeld`] when no quorum holds our token
    /// any more, [`LostCause::Expired`] when the validity deadline passed (or the quorum's
    /// answer came after it), [`LostCause::Unreachable`] when too many nodes kept failing until
    /// it did. After an error the lock must be treated as lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in the sense that a cancelled extension leaves the lock as valid as before
    /// (some nodes may have extended; the local deadline is unchanged).
    pub async fn extend(&mut self) -> Result<()> {
        let span = tracing::debug_span!("extend", resource = %self.keys[0]);
        if self.deadline <= Instant::now() {
            return Err(Error::lost(
                self.keys[0].clone(),
                Votes::default(),
                LostCause::Expired,
            ));
        }
        let result = self
            .held
            .extend(&self.keys, self.deadline)
            .instrument(span)
            .await;
        let telemetry = self.client.telemetry();
        let label = telemetry.label(&self.keys[0]);
        telemetry.extended(&label, &result, result.as_ref().ok().map(|(_, v)| v));
        let (deadline, votes) = result?;
        self.deadline = deadline;
        self.votes = votes;
        Ok(())
    }

    /// Releases the lock on every node (compare-and-delete: a key that now holds another token is
    /// left alone). Returns once a quorum deleted its key, as acquisition returns at a quorum:
    /// the other nodes' requests finish in the background, each behind this lock's earlier
    /// commands on its node's connection, and [`Client::close`](crate::Client::close) waits
    /// for them. When no quorum deleted, it waits for every node's answer (within the node
    /// timeout) before it reports why. The returned votes of the nodes still answering are
    /// `Pending`.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when a quorum no longer held our token (it had expired: another client
    /// may have held the lock in the meantime, so work done since the deadline was unprotected);
    /// [`Error::Unavailable`] when too many nodes failed to answer (their keys expire by TTL).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a release dropped before it returns leaves the lock to the background
    /// release of a dropped lock (the same compare-and-delete, sent again), which
    /// [`Client::close`](crate::Client::close) waits for.
    pub async fn release(mut self) -> Result<Votes> {
        let span = tracing::debug_span!("release", resource = %self.keys[0]);
        let result = self.held.release(&self.keys).instrument(span).await;
        // Only now: a release cut short drops `self` unreleased, and `Drop` sends it again.
        self.released = true;
        let telemetry = self.client.telemetry();
        telemetry.released(
            &telemetry.label(&self.keys[0]),
            &result,
            result.as_ref().ok(),
        );
        result
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        crate::telemetry::held(&self.client.telemetry().label(&self.keys[0]), -1.0);
        if !self.released {
            crate::telemetry::dropped(&self.client.telemetry().label(&self.keys[0]));
            self.client
                .release_in_background(self.keys.clone(), self.held.clone());
        }
    }
}
