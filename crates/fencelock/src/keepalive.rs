//! The extension engine: auto-extension settings, the state a guard shares with whatever
//! extends it (deadline, lost flag and its cause, the last failure), the lost signal that fires
//! before the lock can have expired on a majority, and the engine: one task per client that
//! extends every auto-extended lock of that client, the locks that fall due together in one
//! batch, under one rule (`pure/extension.rs`). A backend only says how to extend a batch once
//! ([`Extends`]): Redis sends one pipeline per node through its round engine, etcd renews the
//! leases together. `fencelock run` holds a `LockGuard`, so its command's lock follows the same
//! rule.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::error::LostCause;
use crate::pure::extension::{self, Attempt, Next, Schedule};
use crate::pure::vote::Votes;
use crate::telemetry::{self, ResourceLabel};

/// Auto-extension settings for [`Lock::auto_extend`](crate::Lock::auto_extend).
///
/// By default the lock is extended every TTL/3, for as long as it is held. An attempt that
/// fails because too few nodes answered is retried (every TTL/10, between 10 ms and 1 s) within
/// the validity left; the lost signal fires when an attempt shows that no quorum holds the lock
/// any more, or a safety margin of TTL/10 before the local validity deadline if no extension
/// succeeded by then.
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

    /// The engine's schedule for a lock of `ttl` whose auto-extension starts at `now`.
    pub(crate) fn schedule(&self, ttl: Duration, now: Instant) -> Schedule {
        Schedule {
            interval: self
                .interval
                .unwrap_or(ttl / 3)
                .max(Duration::from_millis(1)),
            retry: extension::retry_delay(ttl),
            margin: self.margin.unwrap_or(ttl / 10),
            until: self.max_hold.map(|m| now + m),
        }
    }
}

/// What a guard's extensions have come to so far: its deadline, and while extensions fail,
/// why the last one did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtensionState {
    deadline: Instant,
    failing: Option<Arc<str>>,
}

impl ExtensionState {
    /// The validity deadline: it moves forward with each successful extension.
    pub fn validity_deadline(&self) -> Instant {
        self.deadline
    }

    /// While the latest extension attempt failed and the engine retries within the validity
    /// left: why it failed (which nodes, what they said). `None` once an attempt succeeds.
    pub fn failing(&self) -> Option<&str> {
        self.failing.as_deref()
    }
}

/// Watches a guard's extensions: each change of its [`ExtensionState`]. Made by
/// [`LockGuard::extensions`](crate::LockGuard::extensions); a watcher sees the latest state
/// after each change (states in between may be skipped, as with a `watch` channel).
#[derive(Debug, Clone)]
pub struct Extensions {
    rx: watch::Receiver<ExtensionState>,
}

impl Extensions {
    /// The latest state.
    pub fn latest(&self) -> ExtensionState {
        self.rx.borrow().clone()
    }

    /// Waits for the next change and returns the state it made; `None` once the guard is gone
    /// (released or dropped).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a change that happens while no call waits is reported by the next call.
    pub async fn changed(&mut self) -> Option<ExtensionState> {
        self.rx.changed().await.ok()?;
        Some(self.rx.borrow_and_update().clone())
    }
}

/// Shared between a guard, its lost signals, and whatever extends it.
#[derive(Debug)]
pub(crate) struct GuardState {
    health: watch::Sender<ExtensionState>,
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
            health: watch::Sender::new(ExtensionState {
                deadline,
                failing: None,
            }),
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
    fn extended(&self, deadline: Instant) {
        telemetry::extension(&self.label, true, "auto");
        self.set_deadline(deadline);
    }

    /// A failed extension attempt, which the engine retries: why, for whoever watches.
    fn attempt_failed(&self, why: Arc<str>) {
        telemetry::extension(&self.label, false, "auto");
        self.set_failing(why);
    }

    /// The guard was released or dropped. A lock whose validity ran out with nobody awake to
    /// fire the signal is reported lost now.
    pub(crate) fn end(&self) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        if self.is_lost() && self.cause.set(self.clock_cause()).is_ok() {
            telemetry::lost(&self.resource, &self.label, self.clock_cause());
        }
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.health.borrow().deadline
    }

    pub(crate) fn set_deadline(&self, deadline: Instant) {
        self.health.send_replace(ExtensionState {
            deadline,
            failing: None,
        });
    }

    /// Records why the latest extension attempt failed (the engine retries).
    fn set_failing(&self, why: Arc<str>) {
        self.health.send_modify(|h| h.failing = Some(why));
    }

    pub(crate) fn extensions(&self) -> Extensions {
        Extensions {
            rx: self.health.subscribe(),
        }
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
            _ => self.is_lost().then(|| self.clock_cause()),
        }
    }

    /// The cause of a loss found by the clock (the deadline minus the margin came): the nodes'
    /// doing when the latest extension attempt had failed (the engine was retrying), else
    /// the validity simply ran out.
    pub(crate) fn clock_cause(&self) -> LostCause {
        if self.health.borrow().failing.is_some() {
            LostCause::Unreachable
        } else {
            LostCause::Expired
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
        let mut rx = self.state.health.subscribe();
        loop {
            let deadline = rx.borrow_and_update().deadline;
            let at = deadline.checked_sub(self.state.margin).unwrap_or(deadline);
            tokio::select! {
                biased;
                () = self.state.lost.cancelled() => return,
                () = tokio::time::sleep_until(at.into()) => {
                    if self.state.deadline() == deadline {
                        self.state.fire_because(self.state.clock_cause());
                        return;
                    }
                }
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The guard is gone: nothing extends any more.
                        tokio::time::sleep_until(at.into()).await;
                        self.state.fire_because(self.state.clock_cause());
                        return;
                    }
                }
            }
        }
    }
}

/// A backend's side of the engine: one attempt to extend each lock of a batch.
pub(crate) trait Extends: Send + Sync + 'static {
    /// What the engine keeps of one lock to extend it (Redis: its keys and owner value; etcd:
    /// its lease).
    type Lock: Send + Sync + 'static;

    /// Extends every lock of `locks` once, together, within `budget` (the validity the
    /// soonest-lost lock of the batch has left). One outcome per lock, in order.
    fn extend_batch(
        self: Arc<Self>,
        locks: Vec<Arc<Self::Lock>>,
        budget: Duration,
    ) -> impl Future<Output = Vec<Outcome>> + Send;
}

/// What one attempt found for one lock, and in words why it failed if it did.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) attempt: Attempt,
    pub(crate) why: Option<Arc<str>>,
}

impl Outcome {
    pub(crate) fn extended(deadline: Instant) -> Outcome {
        Outcome {
            attempt: Attempt::Extended(deadline),
            why: None,
        }
    }

    pub(crate) fn failed(attempt: Attempt, why: impl Into<Arc<str>>) -> Outcome {
        Outcome {
            attempt,
            why: Some(why.into()),
        }
    }
}

/// How a guard stops whatever extends its lock: the engine hands it over with the registration.
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

/// One client's engine for one backend: a task, spawned on first use, that extends every lock
/// registered with it. Cheap to keep in the backend: nothing runs until a lock registers.
pub(crate) struct Engine<L> {
    tx: OnceLock<mpsc::UnboundedSender<Msg<L>>>,
    next_id: AtomicU64,
}

impl<L> std::fmt::Debug for Engine<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("started", &self.tx.get().is_some())
            .finish()
    }
}

impl<L> Default for Engine<L> {
    fn default() -> Engine<L> {
        Engine {
            tx: OnceLock::new(),
            next_id: AtomicU64::new(0),
        }
    }
}

/// A lock under auto-extension.
struct Entry<L> {
    lock: Arc<L>,
    state: Arc<GuardState>,
    schedule: Schedule,
    /// For the warning when it is lost.
    name: Arc<str>,
}

enum Msg<L> {
    Register(u64, Entry<L>),
    Unregister(u64),
}

struct Slot<L> {
    entry: Entry<L>,
    /// `None` while an attempt for this lock is in flight, or after extensions stopped.
    next_due: Option<Instant>,
}

/// A batch's outcome, back at the engine.
struct Done {
    started: Instant,
    ids: Vec<u64>,
    outcomes: Vec<Outcome>,
}

/// How close together due times must be to share a batch, as a fraction of the interval.
const COALESCE_DIVISOR: u32 = 4;

impl<L: Send + Sync + 'static> Engine<L> {
    /// Registers a lock (`name`: its resource, for the log) to be extended on `schedule` until
    /// the returned [`Stop`] takes it out. `backend` is held weakly: the engine does not keep a
    /// dropped client alive. Must be called within a tokio runtime.
    pub(crate) fn register<B: Extends<Lock = L>>(
        &self,
        backend: &Arc<B>,
        name: &str,
        lock: L,
        state: Arc<GuardState>,
        schedule: Schedule,
    ) -> Stop {
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(run(rx, Arc::downgrade(backend)));
            tx
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = Entry {
            lock: Arc::new(lock),
            state,
            schedule,
            name: Arc::from(name),
        };
        let _ = tx.send(Msg::Register(id, entry));
        let tx = tx.clone();
        Stop::new(move || {
            let _ = tx.send(Msg::Unregister(id));
        })
    }
}

/// The engine's task: runs until every sender is gone (the client was dropped) or the backend
/// is.
async fn run<B: Extends>(mut rx: mpsc::UnboundedReceiver<Msg<B::Lock>>, backend: Weak<B>) {
    // Ordered by registration, so a batch's commands go out in one order: the simulation's
    // runs then depend on their seed alone (a `HashMap`'s order differs from map to map).
    let mut slots: BTreeMap<u64, Slot<B::Lock>> = BTreeMap::new();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    loop {
        let next = slots.values().filter_map(|s| s.next_due).min();
        let sleep = async {
            match next {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            msg = rx.recv() => match msg {
                None => break,
                Some(Msg::Register(id, entry)) => {
                    let next_due = Some(Instant::now() + entry.schedule.interval);
                    slots.insert(id, Slot { entry, next_due });
                }
                Some(Msg::Unregister(id)) => {
                    slots.remove(&id);
                }
            },
            Some(done) = done_rx.recv() => apply(&mut slots, done),
            () = sleep => {
                let Some(backend) = backend.upgrade() else { break };
                let Some((ids, locks, budget)) = due_batch(&mut slots) else { continue };
                let done_tx = done_tx.clone();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let outcomes = backend.extend_batch(locks, budget).await;
                    tracing::debug!(locks = ids.len(), took = ?started.elapsed(), "batch extended");
                    let _ = done_tx.send(Done { started, ids, outcomes });
                });
            }
        }
    }
}

/// Takes the locks that are due (or nearly: within a fraction of their interval) out of the
/// schedule: their ids, their locks, and the budget of the batch (the least validity left).
#[allow(clippy::type_complexity)]
fn due_batch<L>(slots: &mut BTreeMap<u64, Slot<L>>) -> Option<(Vec<u64>, Vec<Arc<L>>, Duration)> {
    let now = Instant::now();
    let mut ids = Vec::new();
    let mut locks = Vec::new();
    let mut budget = Duration::MAX;
    slots.retain(|id, slot| {
        let Some(due) = slot.next_due else {
            return true;
        };
        if due > now + slot.entry.schedule.interval / COALESCE_DIVISOR {
            return true;
        }
        slot.next_due = None;
        if slot.entry.state.is_lost() {
            // Its time came while it waited: the signal says so; nothing more to extend.
            return false;
        }
        ids.push(*id);
        locks.push(slot.entry.lock.clone());
        budget = budget.min(slot.entry.state.time_to_lost());
        true
    });
    (!ids.is_empty()).then_some((ids, locks, budget))
}

/// Carries out the rule for each lock of a finished batch.
fn apply<L>(slots: &mut BTreeMap<u64, Slot<L>>, done: Done) {
    let now = Instant::now();
    for (id, outcome) in done.ids.into_iter().zip(done.outcomes) {
        let Some(slot) = slots.get_mut(&id) else {
            continue;
        };
        let state = &slot.entry.state;
        // Once the signal has fired it stays fired: a late success must not revive a lock the
        // holder was told it lost.
        let next = if state.lost.is_cancelled() {
            Next::Lost(state.lost_cause().unwrap_or(LostCause::Expired))
        } else {
            extension::after(
                outcome.attempt,
                &slot.entry.schedule,
                done.started,
                now,
                state.deadline(),
            )
        };
        match next {
            Next::At { due, deadline } => {
                match deadline {
                    Some(deadline) => state.extended(deadline),
                    None => {
                        let why = outcome.why.unwrap_or_else(|| Arc::from("no quorum"));
                        tracing::debug!(resource = %slot.entry.name, %why, retry_at = ?due, "extension failed; retrying within the validity left");
                        state.attempt_failed(why);
                    }
                }
                slot.next_due = Some(due);
            }
            Next::Stop { deadline } => {
                if let Some(deadline) = deadline {
                    state.extended(deadline);
                }
                slot.next_due = None;
            }
            Next::Lost(cause) => {
                if let Some(why) = &outcome.why {
                    // What the last attempt saw, for whoever reports the loss.
                    state.attempt_failed(why.clone());
                }
                // The warning, with what to do, comes from the signal (`telemetry::lost`).
                tracing::debug!(
                    resource = %slot.entry.name,
                    %cause,
                    why = outcome.why.as_deref().unwrap_or(""),
                    "auto-extension failed: lock lost"
                );
                state.fire_because(cause);
                slots.remove(&id);
            }
        }
    }
}

/// Extends one lock by hand (`Lock::extend`) under the engine's rule: `attempt` (given the
/// validity left as its budget) is retried after failures within the validity left, until
/// `deadline`. Returns the new deadline and the last attempt's votes, or why the lock is lost
/// with those votes.
pub(crate) async fn extend_within<F, Fut>(
    deadline: Instant,
    retry: Duration,
    mut attempt: F,
) -> std::result::Result<(Instant, Votes), (LostCause, Votes)>
where
    F: FnMut(Duration) -> Fut,
    Fut: Future<Output = (Outcome, Votes)>,
{
    let schedule = Schedule {
        interval: Duration::ZERO,
        retry,
        margin: Duration::ZERO,
        until: None,
    };
    loop {
        let started = Instant::now();
        let budget = deadline.saturating_duration_since(started);
        let (outcome, votes) = attempt(budget).await;
        let now = Instant::now();
        match extension::after(outcome.attempt, &schedule, started, now, deadline) {
            Next::At {
                deadline: Some(new_deadline),
                ..
            }
            | Next::Stop {
                deadline: Some(new_deadline),
            } => return Ok((new_deadline, votes)),
            Next::At { due, .. } => {
                tracing::debug!(
                    why = outcome.why.as_deref().unwrap_or(""),
                    "extension failed; retrying within the validity left"
                );
                tokio::time::sleep_until(due.into()).await;
            }
            Next::Stop { deadline: None } => return Err((LostCause::Unreachable, votes)),
            Next::Lost(cause) => return Err((cause, votes)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A backend whose attempts follow a script: `Failed` until `fail_until`, then extended.
    struct Scripted {
        fail_until: Instant,
        impossible: bool,
        attempts: Mutex<Vec<Instant>>,
    }

    impl Extends for Scripted {
        type Lock = ();

        async fn extend_batch(self: Arc<Self>, locks: Vec<Arc<()>>, _: Duration) -> Vec<Outcome> {
            let now = Instant::now();
            self.attempts.lock().unwrap().push(now);
            locks
                .iter()
                .map(|_| {
                    if self.impossible {
                        Outcome::failed(Attempt::Impossible, "not held on 2 of 3 nodes")
                    } else if now < self.fail_until {
                        Outcome::failed(Attempt::Failed, "2 of 3 nodes timed out")
                    } else {
                        Outcome::extended(now + Duration::from_millis(900))
                    }
                })
                .collect()
        }
    }

    fn schedule() -> Schedule {
        Schedule {
            interval: Duration::from_millis(300),
            retry: Duration::from_millis(100),
            margin: Duration::from_millis(100),
            until: None,
        }
    }

    // Real time, not tokio's paused clock: the engine reads `std::time::Instant`, as every
    // deadline of the crate is one. The steps are hundreds of milliseconds apart, so that a
    // loaded machine's scheduling delays do not change what happens.

    #[tokio::test]
    async fn failed_extensions_are_retried_and_a_later_success_keeps_the_lock() {
        let t0 = Instant::now();
        let backend = Arc::new(Scripted {
            fail_until: t0 + Duration::from_millis(550),
            impossible: false,
            attempts: Mutex::new(Vec::new()),
        });
        let engine = Engine::default();
        let state = Arc::new(GuardState::new(
            t0 + Duration::from_millis(1_000),
            Duration::from_millis(100),
        ));
        let mut watch = state.extensions();
        let _stop = engine.register(&backend, "r", (), state.clone(), schedule());
        // Attempts at 300 (fails), 400, 500 (fail), 600 (extends).
        let first = watch.changed().await.unwrap();
        assert!(first.failing().is_some(), "{first:?}");
        tokio::time::sleep_until((t0 + Duration::from_millis(1_200)).into()).await;
        assert!(!state.is_lost(), "{:?}", state.lost_cause());
        assert!(state.deadline() > t0 + Duration::from_millis(1_200));
        assert_eq!(watch.latest().failing(), None);
        let attempts = backend.attempts.lock().unwrap().clone();
        assert!(attempts.len() >= 4, "{} attempts", attempts.len());
        // The failures were retried a retry delay apart, not an interval.
        assert!(attempts[1] - attempts[0] < Duration::from_millis(250));
    }

    #[tokio::test]
    async fn failures_until_the_margin_lose_the_lock_as_unreachable() {
        let t0 = Instant::now();
        let backend = Arc::new(Scripted {
            fail_until: t0 + Duration::from_secs(60),
            impossible: false,
            attempts: Mutex::new(Vec::new()),
        });
        let engine = Engine::default();
        let state = Arc::new(GuardState::new(
            t0 + Duration::from_millis(1_000),
            Duration::from_millis(100),
        ));
        let _stop = engine.register(&backend, "r", (), state.clone(), schedule());
        tokio::time::sleep_until((t0 + Duration::from_millis(1_100)).into()).await;
        assert!(state.lost.is_cancelled());
        assert_eq!(state.lost_cause(), Some(LostCause::Unreachable));
        // 300, 400, ..., 800 at best: then 900 would be at the margin.
        let attempts = backend.attempts.lock().unwrap().len();
        assert!((2..=6).contains(&attempts), "{attempts} attempts");
        assert!(state.extensions().latest().failing().is_some());
    }

    #[tokio::test]
    async fn an_impossible_quorum_loses_the_lock_at_the_first_attempt() {
        let t0 = Instant::now();
        let backend = Arc::new(Scripted {
            fail_until: t0,
            impossible: true,
            attempts: Mutex::new(Vec::new()),
        });
        let engine = Engine::default();
        let state = Arc::new(GuardState::new(
            t0 + Duration::from_millis(10_000),
            Duration::from_millis(100),
        ));
        let _stop = engine.register(&backend, "r", (), state.clone(), schedule());
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(state.lost_cause(), Some(LostCause::NotHeld));
        assert_eq!(backend.attempts.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_stopped_registration_is_not_extended_again() {
        let t0 = Instant::now();
        let backend = Arc::new(Scripted {
            fail_until: t0,
            impossible: false,
            attempts: Mutex::new(Vec::new()),
        });
        let engine = Engine::default();
        let state = Arc::new(GuardState::new(
            t0 + Duration::from_millis(1_000),
            Duration::from_millis(100),
        ));
        let stop = engine.register(&backend, "r", (), state, schedule());
        tokio::time::sleep(Duration::from_millis(400)).await;
        stop.stop();
        let before = backend.attempts.lock().unwrap().len();
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(before >= 1);
        assert_eq!(backend.attempts.lock().unwrap().len(), before);
    }
}
