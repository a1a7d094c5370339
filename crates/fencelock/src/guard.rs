//! The guard of a lock kept alive in the background: [`Lock::auto_extend`] makes it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::context::LockContext;
use crate::error::{Error, LostCause, Result};
use crate::keepalive::{AutoExtend, Extensions, GuardState, LostSignal, Stop};
use crate::lock::Lock;
use crate::pure::vote::Votes;

// `auto_extend` lives here, beside the guard it makes, so that `lock.rs` does not depend on
// this file (no cycle between the two handles).
impl Lock {
    /// Keeps the lock extended in the background until the guard is released or dropped.
    ///
    /// Locks of one Redis client are extended together: one task per client sends the due
    /// extensions as one pipeline per node, so ten thousand locks cost a few round trips per
    /// interval, not ten thousand. The guard's [`LostSignal`](crate::LostSignal) fires when an
    /// extension fails to reach a quorum, or when the validity deadline minus the safety margin
    /// comes without a successful extension.
    ///
    /// Must be called within a tokio runtime.
    pub fn auto_extend(self, settings: AutoExtend) -> LockGuard {
        let ttl = self.client().config().ttl();
        let schedule = settings.schedule(ttl, Instant::now());
        let label = self.client().telemetry().label(self.resource());
        let state = Arc::new(
            GuardState::new(self.validity_deadline(), schedule.margin)
                .about(self.resource(), label),
        );
        let stop = self
            .held()
            .keep_alive(self.keys().clone(), state.clone(), schedule);
        LockGuard::new(self, state, stop)
    }
}

/// A lock kept alive in the background. Made by [`Lock::auto_extend`].
///
/// Extension stops on [`LockGuard::release`] or drop (drop releases in the background, like
/// [`Lock`]). Watch [`LockGuard::lost`] to learn at once when the lock is lost.
///
/// # Example
///
/// ```no_run
/// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
/// use fencelock::AutoExtend;
///
/// let guard = client
///     .acquire("index:rebuild")
///     .await?
///     .auto_extend(AutoExtend::new());
/// let lost = guard.lost();
/// tokio::select! {
///     () = lost.fired() => eprintln!("lost {}: the rebuild stops", guard.resource()),
///     () = rebuild_index() => {}
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// # async fn rebuild_index() {}
/// ```
#[must_use = "the lock is released when the guard is dropped"]
#[derive(Debug)]
pub struct LockGuard {
    lock: Option<Lock>,
    state: Arc<GuardState>,
    stop: Stop,
}

impl LockGuard {
    pub(crate) fn new(lock: Lock, state: Arc<GuardState>, stop: Stop) -> LockGuard {
        LockGuard {
            lock: Some(lock),
            state,
            stop,
        }
    }

    fn lock(&self) -> &Lock {
        self.lock
            .as_ref()
            .expect("a guard holds its lock until release")
    }

    /// The (first) resource.
    pub fn resource(&self) -> &str {
        self.lock().resource()
    }

    /// The owner value (see [`Lock::owner`]).
    pub fn owner(&self) -> &str {
        self.lock().owner()
    }

    /// A read lock's last writer token (see [`Lock::last_writer_token`]).
    pub fn last_writer_token(&self) -> Option<u64> {
        self.lock().last_writer_token()
    }

    /// The fencing token with its issuer (see [`Lock::fencing_token`]), and the guard's live
    /// state: a fenced storage that refuses it while the lost signal has not fired reports
    /// [`Error::CounterReset`](crate::Error::CounterReset), after it [`Error::StaleToken`](crate::Error::StaleToken).
    pub fn fencing_token(&self) -> Option<crate::FencingToken> {
        self.lock()
            .fencing_token()
            .map(|t| t.with_guard(self.state.clone()))
    }

    /// The current validity deadline; it moves forward with each successful extension.
    pub fn validity_deadline(&self) -> Instant {
        self.state.deadline()
    }

    /// The time left until the validity deadline.
    pub fn remaining(&self) -> Duration {
        self.state
            .deadline()
            .saturating_duration_since(Instant::now())
    }

    /// A watch on the extensions: the validity deadline after each successful one, and while
    /// attempts fail (the engine retries them within the validity left), why the last did.
    /// `fencelock run` reschedules the stop of its command with it.
    pub fn extensions(&self) -> Extensions {
        self.state.extensions()
    }

    /// The lost signal.
    pub fn lost(&self) -> LostSignal {
        LostSignal::new(self.state.clone())
    }

    /// Whether the lock is lost (see [`LostSignal::is_fired`]).
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    /// What work under this lock needs to know about it, to move into other tasks.
    pub fn context(&self) -> LockContext {
        LockContext::new(
            self.lock().keys().clone(),
            self.fencing_token(),
            self.lost(),
        )
        .with_last_writer(self.lock().last_writer_token())
    }

    /// Why the lock is lost, if it is.
    pub(crate) fn lost_cause(&self) -> Option<LostCause> {
        self.state.lost_cause()
    }

    /// Stops extending and releases the lock on every node.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lock had been lost (the release is still sent; it deletes only
    /// keys that hold our token); otherwise as [`Lock::release`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: see [`Lock::release`].
    pub async fn release(mut self) -> Result<Votes> {
        self.stop.stop();
        let lock = self
            .lock
            .take()
            .expect("a guard holds its lock until release");
        let lost = self.state.lost_cause();
        self.state.end();
        let resource = lock.resource().to_string();
        let result = lock.release().await;
        match (lost, result) {
            // The release round's votes say nothing about a validity that ran out.
            (Some(LostCause::Expired), _) => {
                Err(Error::lost(resource, Votes::default(), LostCause::Expired))
            }
            (Some(cause), Ok(votes)) => Err(Error::lost(resource, votes, cause)),
            (Some(cause), Err(e)) => Err(Error::lost(
                resource,
                e.votes().cloned().unwrap_or_default(),
                cause,
            )),
            (None, other) => other,
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop.stop();
        self.state.end();
        // The lock's own Drop hands it to the client's background release.
    }
}
