//! What scoped work learns about the lock it runs under.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::LostCause;
use crate::fencing_token::FencingToken;
use crate::keepalive::LostSignal;

/// The lock that work run by [`Client::with_lock`](crate::Client::with_lock) holds: its
/// resource, its fencing token, its validity deadline (which moves forward with each
/// extension) and its lost signal. Cheap to clone, `Send` and `'static`: move a clone into a
/// task the work spawns. It cannot release or extend the lock, and it does not hold the owner
/// token.
///
/// # Example
///
/// ```no_run
/// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
/// client
///     .with_lock("report:nightly", async |lock| {
///         for step in 0..3 {
///             if lock.is_lost() {
///                 return; // another client may hold it now
///             }
///             println!("step {step} of {}, {:?} left", lock.resource(), lock.remaining());
///         }
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockContext {
    keys: Arc<[String]>,
    issued: Option<FencingToken>,
    lost: LostSignal,
    last_writer: Option<u64>,
}

impl LockContext {
    pub(crate) fn new(keys: Arc<[String]>, issued: Option<FencingToken>, lost: LostSignal) -> Self {
        LockContext {
            keys,
            issued,
            lost,
            last_writer: None,
        }
    }

    /// The context of a read lock: it carries the last writer's token.
    pub(crate) fn with_last_writer(mut self, last_writer: Option<u64>) -> Self {
        self.last_writer = last_writer;
        self
    }

    /// Under a read lock of a [`RwLock`](crate::RwLock) in fencing mode, the last write lock's
    /// fencing token (see [`Lock::last_writer_token`](crate::Lock::last_writer_token)); `None`
    /// otherwise.
    pub fn last_writer_token(&self) -> Option<u64> {
        self.last_writer
    }

    /// The resource (the first one of a multi-resource lock).
    pub fn resource(&self) -> &str {
        &self.keys[0]
    }

    /// Every resource the lock holds.
    pub fn resources(&self) -> &[String] {
        &self.keys
    }

    /// The fencing token with the lock that issued it and the lock's live state, in fencing
    /// mode: what to pass to the fenced storage (see
    /// [`LockGuard::fencing_token`](crate::LockGuard::fencing_token)).
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.issued.clone()
    }

    /// The current validity deadline, on this process's monotonic clock; it moves forward with
    /// each successful extension.
    pub fn validity_deadline(&self) -> Instant {
        self.lost.validity_deadline()
    }

    /// The time left until the validity deadline.
    pub fn remaining(&self) -> Duration {
        self.validity_deadline()
            .saturating_duration_since(Instant::now())
    }

    /// Whether the lock is lost (see [`LostSignal::is_fired`]): check it before each
    /// irreversible step.
    pub fn is_lost(&self) -> bool {
        self.lost.is_fired()
    }

    /// Why the lock was lost, once it is.
    pub fn lost_cause(&self) -> Option<LostCause> {
        self.lost.cause()
    }

    /// The lost signal, to await ([`LostSignal::fired`]) or to hand to other tasks.
    pub fn lost(&self) -> &LostSignal {
        &self.lost
    }
}
