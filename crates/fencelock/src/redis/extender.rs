//! Auto-extension of many locks by one task per client: locks that fall due together are
//! extended in one pipeline per node, so the traffic grows with the number of batches, not the
//! number of locks.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{RedisBackend, RedisHeld};
use crate::error::LostCause;
use crate::keepalive::{GuardState, Stop};

impl RedisBackend {
    /// Registers a lock with the client's batch extender (spawned on first use); the returned
    /// [`Stop`] takes it out.
    pub(crate) fn keep_alive(
        self: &Arc<Self>,
        keys: Arc<[String]>,
        held: &RedisHeld,
        state: Arc<GuardState>,
        interval: Duration,
        until: Option<Instant>,
    ) -> Stop {
        let tx = self.extender.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let timing = Timing {
                ttl: self.settings.ttl,
                drift: self.settings.drift,
                node_timeout: self.settings.node_timeout,
                quorum: self.quorum,
                nodes: self.nodes.len(),
            };
            tokio::spawn(run(rx, Arc::downgrade(self), timing));
            tx
        });
        let id = self.next_guard.fetch_add(1, Ordering::Relaxed);
        let entry = Entry {
            keys,
            token: Arc::from(held.token()),
            state,
            interval,
            until,
        };
        let _ = tx.send(Msg::Register(id, entry));
        let tx = tx.clone();
        Stop::new(move || {
            let _ = tx.send(Msg::Unregister(id));
        })
    }
}

/// How close together due times must be to share a batch, as a fraction of the interval.
const COALESCE_DIVISOR: u32 = 4;

/// A lock under auto-extension.
pub(super) struct Entry {
    keys: Arc<[String]>,
    token: Arc<str>,
    state: Arc<GuardState>,
    interval: Duration,
    /// Extensions stop after this instant (the optional cap on holding).
    until: Option<Instant>,
}

pub(super) enum Msg {
    Register(u64, Entry),
    Unregister(u64),
}

struct Slot {
    entry: Entry,
    /// `None` while an extension of this lock is in flight or after extensions stopped.
    next_due: Option<Instant>,
}

struct Done {
    started: Instant,
    ids: Vec<u64>,
    counts: Vec<Count>,
}

/// How the nodes answered the extension of one lock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Count {
    /// Nodes that extended it.
    pub(crate) extended: usize,
    /// Nodes that answered that they do not hold it (key gone or another owner's).
    pub(crate) not_held: usize,
}

/// Settings the extender task needs from the backend.
#[derive(Clone, Copy)]
struct Timing {
    ttl: Duration,
    drift: Duration,
    node_timeout: Duration,
    quorum: usize,
    nodes: usize,
}

/// Runs until every sender is gone. `backend` is a weak handle so that the task does not keep a
/// dropped client alive.
async fn run(mut rx: mpsc::UnboundedReceiver<Msg>, backend: Weak<RedisBackend>, timing: Timing) {
    let mut slots: HashMap<u64, Slot> = HashMap::new();
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
            msg = rx.recv() => match msg {
                None => break,
                Some(Msg::Register(id, entry)) => {
                    let next_due = Some(Instant::now() + entry.interval);
                    slots.insert(id, Slot { entry, next_due });
                }
                Some(Msg::Unregister(id)) => {
                    slots.remove(&id);
                }
            },
            Some(done) = done_rx.recv() => apply(&mut slots, done, timing),
            () = sleep => {
                let Some(be) = backend.upgrade() else { break };
                let now = Instant::now();
                let mut ids = Vec::new();
                let mut locks = Vec::new();
                // An extension may take as long as the validity it protects allows.
                let mut budget = Duration::MAX;
                for (id, slot) in slots.iter_mut() {
                    let Some(due) = slot.next_due else { continue };
                    if due <= now + slot.entry.interval / COALESCE_DIVISOR {
                        slot.next_due = None;
                        if slot.entry.state.is_lost() {
                            continue;
                        }
                        ids.push(*id);
                        locks.push((slot.entry.keys.clone(), slot.entry.token.clone()));
                        budget = budget.min(slot.entry.state.time_to_lost());
                    }
                }
                if ids.is_empty() {
                    continue;
                }
                let done_tx = done_tx.clone();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let timeout = budget.max(timing.node_timeout);
                    let counts = be.extend_batch(&locks, timeout).await;
                    tracing::debug!(locks = ids.len(), took = ?started.elapsed(), "batch extended");
                    let _ = done_tx.send(Done { started, ids, counts });
                });
            }
        }
    }
}

fn apply(slots: &mut HashMap<u64, Slot>, done: Done, t: Timing) {
    let now = Instant::now();
    for (id, count) in done.ids.into_iter().zip(done.counts) {
        let Some(slot) = slots.get_mut(&id) else {
            continue;
        };
        let state = &slot.entry.state;
        let new_deadline =
            crate::pure::validity::validity(t.ttl, now - done.started, t.drift).map(|v| now + v);
        match new_deadline {
            // Once the signal has fired (or its time has come) it stays fired: a late success
            // must not revive a lock the holder was told it lost.
            Some(deadline) if count.extended >= t.quorum && !state.is_lost() => {
                state.extended(deadline);
                let next = done.started + slot.entry.interval;
                slot.next_due = match slot.entry.until {
                    Some(until) if next >= until => None,
                    _ => Some(next),
                };
            }
            _ => {
                let cause = if t.nodes - count.not_held < t.quorum {
                    LostCause::NotHeld
                } else if new_deadline.is_none() || state.is_lost() {
                    LostCause::Expired
                } else {
                    LostCause::Unreachable
                };
                tracing::debug!(
                    keys = ?slot.entry.keys,
                    extended_on = count.extended,
                    not_held_on = count.not_held,
                    quorum = t.quorum,
                    %cause,
                    "auto-extension failed: lock lost"
                );
                state.extension_failed(cause);
                slots.remove(&id);
            }
        }
    }
}
