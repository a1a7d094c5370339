//! Holding a lock for long work: auto-extension in the background, and a lost signal that fires
//! before the lock can have expired on a majority.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::context::LockContext;
use crate::error::{Error, LostCause, Result};
use crate::lock::Lock;
use crate::vote::Votes;

/// Auto-extension settings for [`Lock::auto_extend`].
///
/// By default the lock is extended every TTL/3, for as long as it is held, and the lost signal
/// fires a safety margin of TTL/10 before the local validity deadline if no extension succeeded
/// by then.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoExtend {
    interval: Option<Duration>,
    max_hold: Option<Duration>,
    margin: Option<Duration>,
}

impl AutoExtend {
    /// Default settings.
    pub fn new() -> AutoExtend {
        AutoExtend::default()
    }

    /// How often to extend (default: TTL/3). Must leave room for a retry before expiry.
    pub fn with_interval(mut self, interval: Duration) -> AutoExtend {
        self.interval = Some(interval);
        self
    }

    /// Stop extending this long after auto-extension starts; the lock then runs out and the
    /// lost signal fires (a cap for jobs that must not hold a lock forever).
    pub fn with_max_hold(mut self, max: Duration) -> AutoExtend {
        self.max_hold = Some(max);
        self
    }

    /// How long before the validity deadline the lost signal fires if no extension has
    /// succeeded (default: TTL/10). Work that reacts to the signal (stopping a child process,
    /// aborting a transaction) must fit in this margin.
    pub fn with_safety_margin(mut self, margin: Duration) -> AutoExtend {
        self.margin = Some(margin);
        self
    }

    pub(crate) fn interval(&self, ttl: Duration) -> Duration {
        self.interval
            .unwrap_or(ttl / 3)
            .max(Duration::from_millis(1))
    }

    pub(crate) fn margin(&self, ttl: Duration) -> Duration {
        self.margin.unwrap_or(ttl / 10)
    }

    pub(crate) fn max_hold(&self) -> Option<Duration> {
        self.max_hold
    }
}

/// Shared between a guard, its lost signals, and whatever extends it.
#[derive(Debug)]
pub(crate) struct GuardState {
    deadline: watch::Sender<Instant>,
    lost: CancellationToken,
    /// Why the signal fired, set once by whoever fired it first.
    cause: OnceLock<LostCause>,
    margin: Duration,
}

impl GuardState {
    pub(crate) fn new(deadline: Instant, margin: Duration) -> GuardState {
        GuardState {
            deadline: watch::Sender::new(deadline),
            lost: CancellationToken::new(),
            cause: OnceLock::new(),
            margin,
        }
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.borrow()
    }

    pub(crate) fn set_deadline(&self, deadline: Instant) {
        self.deadline.send_replace(deadline);
    }

    /// Fires the signal; the first cause given is the one reported.
    pub(crate) fn fire_because(&self, cause: LostCause) {
        let _ = self.cause.set(cause);
        self.lost.cancel();
    }

    /// Why the lock is lost, if it is: the recorded cause, else (lost by the clock alone, with
    /// nobody awake to fire the signal) the validity running out.
    pub(crate) fn lost_cause(&self) -> Option<LostCause> {
        match self.cause.get() {
            Some(cause) if self.lost.is_cancelled() => Some(*cause),
            _ => self.is_lost().then_some(LostCause::Expired),
        }
    }

    /// Time until the signal fires by the deadline, unless an extension succeeds first.
    pub(crate) fn time_to_lost(&self) -> Duration {
        self.deadline()
            .checked_sub(self.margin)
            .map_or(Duration::ZERO, |t| {
                t.saturating_duration_since(Instant::now())
            })
    }

    /// Lost: fired, or within the safety margin of the deadline.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.is_cancelled() || Instant::now() + self.margin >= self.deadline()
    }
}

/// Fires when the lock is lost: an extension failed to reach a quorum, or the validity deadline
/// (minus the safety margin) came without a successful extension, even if an extension is
/// still hanging on a slow node. Cheap to clone; every clone fires together.
#[derive(Debug, Clone)]
pub struct LostSignal {
    state: Arc<GuardState>,
}

impl LostSignal {
    /// Whether the signal has fired (or its time has come).
    pub fn is_fired(&self) -> bool {
        self.state.is_lost()
    }

    /// Why the lock was lost, once it is (see [`LostSignal::is_fired`]).
    pub fn cause(&self) -> Option<LostCause> {
        self.state.lost_cause()
    }

    pub(crate) fn validity_deadline(&self) -> Instant {
        self.state.deadline()
    }

    /// Completes when the lock is lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future changes nothing.
    pub async fn fired(&self) {
        let mut rx = self.state.deadline.subscribe();
        loop {
            let deadline = *rx.borrow_and_update();
            let at = deadline.checked_sub(self.state.margin).unwrap_or(deadline);
            tokio::select! {
                () = self.state.lost.cancelled() => return,
                () = tokio::time::sleep_until(at.into()) => {
                    if self.state.deadline() == deadline {
                        self.state.fire_because(LostCause::Expired);
                        return;
                    }
                }
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The guard is gone: nothing extends any more.
                        tokio::time::sleep_until(at.into()).await;
                        self.state.fire_because(LostCause::Expired);
                        return;
                    }
                }
            }
        }
    }
}

/// How a guard stops its extension.
#[derive(Debug)]
pub(crate) enum Stop {
    Extender {
        id: u64,
        tx: tokio::sync::mpsc::UnboundedSender<crate::redis::extender::Msg>,
    },
    #[cfg(feature = "etcd")]
    Task(tokio::task::AbortHandle),
}

impl Stop {
    fn stop(&self) {
        match self {
            Stop::Extender { id, tx } => {
                let _ = tx.send(crate::redis::extender::Msg::Unregister(*id));
            }
            #[cfg(feature = "etcd")]
            Stop::Task(handle) => handle.abort(),
        }
    }
}

/// A lock kept alive in the background. Made by [`Lock::auto_extend`].
///
/// Extension stops on [`LockGuard::release`] or drop (drop releases in the background, like
/// [`Lock`]). Watch [`LockGuard::lost`] to learn at once when the lock is lost.
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

    /// The owner token (see [`Lock::token`]).
    pub fn token(&self) -> &str {
        self.lock().token()
    }

    /// The fencing token, in fencing mode (see [`Lock::fencing_token`]).
    pub fn fencing_token(&self) -> Option<u64> {
        self.lock().fencing_token()
    }

    /// The fencing token with its issuer (see [`Lock::issued_token`]), and the guard's live
    /// state: a fenced storage that refuses it while the lost signal has not fired reports
    /// [`Error::CounterReset`](crate::Error::CounterReset), after it [`Error::StaleToken`](crate::Error::StaleToken).
    pub fn issued_token(&self) -> Option<crate::IssuedToken> {
        self.lock()
            .issued_token()
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

    /// The lost signal.
    pub fn lost(&self) -> LostSignal {
        LostSignal {
            state: self.state.clone(),
        }
    }

    /// Whether the lock is lost (see [`LostSignal::is_fired`]).
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    /// What work under this lock needs to know about it, to move into other tasks.
    pub fn context(&self) -> LockContext {
        LockContext::new(self.lock().keys().clone(), self.issued_token(), self.lost())
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
    /// Not cancel-safe: see [`Lock::release`].
    pub async fn release(mut self) -> Result<Votes> {
        self.stop.stop();
        let lock = self
            .lock
            .take()
            .expect("a guard holds its lock until release");
        let lost = self.state.lost_cause();
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
        // The lock's own Drop hands it to the client's background release.
    }
}
