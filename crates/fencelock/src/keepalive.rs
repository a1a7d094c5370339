//! The extension engine: auto-extension settings, the state a guard shares with whatever
//! extends it (deadline, lost flag and its cause), the lost signal that fires before the lock can
//! have expired on a majority, and the keeper task that extends one lock (etcd; the Redis
//! backend batches its locks in `redis/extender.rs` under the same rule).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, LostCause};
use crate::telemetry::{self, ResourceLabel};

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
    /// The lock's resource and its metrics label, for the lost event (`telemetry.rs`).
    resource: Arc<str>,
    label: ResourceLabel,
    /// Released (or dropped): a signal that fires afterwards reports nothing.
    ended: AtomicBool,
}

impl GuardState {
    pub(crate) fn new(deadline: Instant, margin: Duration) -> GuardState {
        GuardState {
            deadline: watch::Sender::new(deadline),
            lost: CancellationToken::new(),
            cause: OnceLock::new(),
            margin,
            resource: Arc::from(""),
            label: ResourceLabel::default(),
            ended: AtomicBool::new(false),
        }
    }

    /// Names the lock's resource for the lost event and its metric.
    pub(crate) fn about(mut self, resource: &str, label: ResourceLabel) -> GuardState {
        self.resource = Arc::from(resource);
        self.label = label;
        self
    }

    /// A successful extension: the new deadline.
    pub(crate) fn extended(&self, deadline: Instant) {
        telemetry::extension(&self.label, true, "auto");
        self.set_deadline(deadline);
    }

    /// An extension that failed for `cause`: the signal fires.
    pub(crate) fn extension_failed(&self, cause: LostCause) {
        telemetry::extension(&self.label, false, "auto");
        self.fire_because(cause);
    }

    /// The guard was released or dropped. A lock whose validity ran out with nobody awake to
    /// fire the signal is reported lost now.
    pub(crate) fn end(&self) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        if self.is_lost() && self.cause.set(LostCause::Expired).is_ok() {
            telemetry::lost(&self.resource, &self.label, LostCause::Expired);
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
        let first = self.cause.set(cause).is_ok();
        self.lost.cancel();
        if first && !self.ended.load(Ordering::Acquire) {
            telemetry::lost(&self.resource, &self.label, cause);
        }
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
    pub(crate) fn new(state: Arc<GuardState>) -> LostSignal {
        LostSignal { state }
    }

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

/// How a guard stops whatever extends its lock (a registration with the Redis batch extender,
/// a keeper task): the backend hands it over with the extension it started.
pub(crate) struct Stop(Box<dyn Fn() + Send + Sync>);

impl Stop {
    pub(crate) fn new(stop: impl Fn() + Send + Sync + 'static) -> Stop {
        Stop(Box::new(stop))
    }

    pub(crate) fn stop(&self) {
        (self.0)();
    }
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stop")
    }
}

/// Keeps one lock extended: every `interval`, `extend` is called with the validity left; its
/// new deadline moves the guard's. The first error fires the lost signal with its cause (a
/// backend's `extend` retries within the validity left before it gives up), and so does the
/// deadline minus the margin, through the signal itself. Stops after `until`.
// Only the etcd backend keeps one lock alone: a build without it has no caller.
#[allow(dead_code)]
pub(crate) fn spawn_keeper<F, Fut>(
    state: Arc<GuardState>,
    interval: Duration,
    until: Option<Instant>,
    extend: F,
) -> Stop
where
    F: Fn(Duration) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = crate::Result<Instant>> + Send,
{
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            if until.is_some_and(|u| Instant::now() >= u) {
                return;
            }
            let budget = state.deadline().saturating_duration_since(Instant::now());
            match extend(budget).await {
                Ok(deadline) => state.extended(deadline),
                Err(e) => {
                    state.extension_failed(match e {
                        Error::Lost { cause, .. } => cause,
                        _ => LostCause::Unreachable,
                    });
                    return;
                }
            }
        }
    });
    let handle = task.abort_handle();
    Stop::new(move || handle.abort())
}
