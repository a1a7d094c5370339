//! Waiting for a Redis lock: the retry loop, the waiting line of one key (see `pure/queue.rs`),
//! and the wake-ups that end a wait early (see `watch.rs`).

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tracing::Instrument;

use super::ops::Wait;
use super::watch::Subscription;
use super::{Grant, RedisBackend};
use crate::error::{Error, Result};
use crate::pure::queue::{self, Ticket};
use crate::pure::retry::RetryPolicy;
use crate::telemetry::{self, ResourceLabel};

impl RedisBackend {
    /// Takes `keys`, retrying as `policy` allows. One key waits in line: it takes its place
    /// after its first refusal, or at once if this client just released the key while others
    /// waited; its ticket dates from the start of the wait either way. `resumed`: when a wait
    /// split over several calls began (every call of it takes the same place in line).
    ///
    /// # Errors
    ///
    /// As `Client::acquire`.
    pub(crate) async fn acquire_waiting(
        self: &Arc<Self>,
        keys: &Arc<[String]>,
        policy: &RetryPolicy,
        resumed: Option<SystemTime>,
    ) -> Result<Grant> {
        let started = Instant::now();
        let mut attempts = 0u32;
        // The wake-up the next attempt follows, for the hand-over metric.
        let mut woken: Option<Instant> = None;
        let label = ResourceLabel::of(self.settings.resource_label, &keys[0]);
        let mut subscription = None;
        // Quick retries since the last wake-up (see below).
        let mut quick = 0u32;
        // Whether the next attempt is the first since this waiter took its place in line (or
        // subscribed): it races a release as a woken attempt does (see below).
        let mut joined = false;
        let single = keys.len() == 1;
        let wall_start = resumed.unwrap_or_else(SystemTime::now);
        let lease = queue::lease(policy.max_delay(), self.settings.node_timeout);
        // A wait split over several calls keeps one name in line: derived from when it began.
        let new_ticket = || {
            let wait = resumed.map_or_else(
                || fastrand::u64(..),
                |t| {
                    t.duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64)
                },
            );
            Ticket::new(wall_start, self.watch.waiter_id(wait), lease)
        };
        // In line from the first attempt when resuming a wait, or right after our own release
        // reached waiters.
        let in_line_now = single && (resumed.is_some() || self.others_waited(&keys[0]));
        let mut ticket = in_line_now.then(new_ticket);
        // However this call ends (an error, a timeout, the future dropped), a waiter that did not
        // get the lock leaves the line; one that did leaves it with its release.
        let mut line = LeaveLine {
            backend: self,
            key: &keys[0],
            ticket: None,
        };
        line.ticket.clone_from(&ticket);
        if ticket.is_some() {
            // Straight to the end of the line: listen for our turn before taking a place.
            subscription = Some(self.listen(keys, ticket.as_ref()).await);
            joined = true;
        }
        loop {
            attempts += 1;
            let span = tracing::debug_span!("acquire", resource = %keys[0], attempt = attempts);
            let wait = match (&ticket, &subscription) {
                (Some(t), _) => Wait::InLine(t),
                // Several keys: no line, but the keys are marked as waited for.
                (None, Some(_)) => Wait::Marked(lease),
                (None, None) => Wait::No,
            };
            let err = match self.attempt(keys, wait).instrument(span).await {
                Ok(grant) => {
                    line.ticket = None;
                    if attempts > 1 {
                        telemetry::waited(&label, started.elapsed(), "granted");
                    }
                    if let Some(at) = woken {
                        telemetry::handed_over(&label, at.elapsed());
                    }
                    return Ok(grant);
                }
                Err(e) if !e.is_retryable() => {
                    if attempts > 1 {
                        telemetry::waited(&label, started.elapsed(), "error");
                    }
                    return Err(e);
                }
                Err(e) => e,
            };
            let wake = woken.take();
            let first_in_line = std::mem::take(&mut joined);
            let elapsed = started.elapsed();
            if !policy.may_retry(attempts, elapsed) {
                if attempts > 1 {
                    telemetry::waited(&label, elapsed, "timeout");
                }
                if resumed.is_some() {
                    // The caller resumes this wait with its next call: keep the place (for at
                    // most a lease if it does not come back).
                    line.ticket = None;
                }
                return Err(Error::Timeout {
                    resource: keys[0].clone(),
                    attempts,
                    last: Box::new(err),
                });
            }
            if err.kind() == crate::ErrorKind::Contention && subscription.is_none() {
                // From now on a release (or our turn in line) wakes us. Subscribing took a
                // round trip, during which the holder may have released: try again at once,
                // in line.
                if single {
                    ticket = Some(new_ticket());
                    line.ticket.clone_from(&ticket);
                }
                subscription = Some(self.listen(keys, ticket.as_ref()).await);
                joined = true;
                continue;
            }
            let delay = policy
                .delay(attempts, fastrand::f64())
                .min(policy.wait().saturating_sub(elapsed));
            tracing::debug!(resource = %keys[0], attempts, ?delay, error = %err, "waiting");
            match &subscription {
                Some(s) if !sets_off_its_own_wake(&err) => {
                    quick = 0;
                    if s.wait(delay).await {
                        woken = Some(Instant::now());
                    }
                }
                // Woken by a release, the attempt found the key free on some nodes and still
                // held on others: the release was still on its way to them (each node wakes the
                // line when its own copy of the release runs, the first one at once). Its
                // failure set off a wake of its own, so no wake-up can be trusted; but waiting
                // the full delay leaves the lock free that long while this waiter is first in
                // line (the contended hand-over's tail was 185-420 ms). Retry after the round's
                // own time, a few times, then serve the delays. The first attempt after taking a
                // place in line races a release just as well (it follows the refusal that sent
                // it there by a round trip): it was granted on the nodes the release had reached
                // and refused on the others, and the full delay left the lock free 100-200 ms
                // behind this waiter at the head of the line (`contended`'s stalls, issue 33).
                Some(_) if (wake.is_some() || first_in_line) && quick < QUICK_RETRIES => {
                    quick += 1;
                    woken = wake;
                    joined = first_in_line;
                    tokio::time::sleep(round_time(&err).min(delay)).await;
                }
                _ => {
                    quick = 0;
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// Subscribes to the wake-ups of a waiter: its turn in line, or any release of `keys`.
    async fn listen(&self, keys: &[String], ticket: Option<&Ticket>) -> Subscription {
        let timeout = self.settings.node_timeout;
        match ticket {
            Some(t) => self.watch.await_turn(&t.id, timeout).await,
            None => self.watch.subscribe(keys, timeout).await,
        }
    }

    /// Whether this client recently released `resource` while others waited for it (and
    /// forgets it: the hint serves one acquisition).
    fn others_waited(&self, resource: &str) -> bool {
        let mut map = self.waited_for.lock().expect("hint mutex poisoned");
        map.remove(resource)
            .is_some_and(|until| Instant::now() < until)
    }

    /// Notes that a release of `resource` reached waiters.
    pub(super) fn note_waiters(&self, resource: &str) {
        let ttl = self.settings.ttl;
        let now = Instant::now();
        let mut map = self.waited_for.lock().expect("hint mutex poisoned");
        if map.len() >= 1024 {
            map.retain(|_, until| now < *until);
        }
        map.insert(resource.to_string(), now + ttl);
    }
}

/// How many times a waiter woken by a release retries at the pace of its rounds before it serves
/// its retry delays again.
const QUICK_RETRIES: u32 = 3;

/// How long the failed attempt's round took (its slowest answer), at least a millisecond.
fn round_time(err: &Error) -> std::time::Duration {
    let slowest = err
        .votes()
        .and_then(|votes| votes.iter().map(|v| v.latency).max())
        .unwrap_or_default();
    slowest.max(std::time::Duration::from_millis(1))
}

/// Whether a failed attempt set keys on some node (granted there, or not yet answered): its
/// release deleted them, and a release wakes the first in line and the key's listeners, which
/// may be this very waiter. Such a wake-up says nothing about the holder, so the next delay is
/// served in full; otherwise a key held on all but one node made a retry per round trip
/// (374 attempts in a 300 ms wait), not per retry delay.
pub(super) fn sets_off_its_own_wake(err: &Error) -> bool {
    err.votes().is_some_and(|votes| {
        votes.iter().any(|v| {
            matches!(
                v.outcome,
                crate::pure::vote::VoteOutcome::Granted | crate::pure::vote::VoteOutcome::Pending
            )
        })
    })
}

/// Takes a waiter that did not get the lock out of the line when dropped (in the background:
/// `Drop` does no I/O; a registration left behind anyway only lasts its lease).
struct LeaveLine<'a> {
    backend: &'a Arc<RedisBackend>,
    key: &'a str,
    ticket: Option<Ticket>,
}

impl Drop for LeaveLine<'_> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        self.backend.leave_in_background(self.key, ticket);
    }
}

impl RedisBackend {
    /// Takes `ticket` out of `key`'s line in the background (for a waiter that gave up, from a
    /// `Drop`: no I/O here), counted as a release is, so that `Client::close` waits for it: a
    /// program that gives up a wait and exits (`fencelock run` on a signal) leaves no place in
    /// line behind.
    pub(super) fn leave_in_background(self: &Arc<Self>, key: &str, ticket: Ticket) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let counted = super::round::Background::count(&self.background);
        let (backend, key) = (self.clone(), key.to_string());
        runtime.spawn(async move {
            backend.leave_queue(&key, &ticket).await;
            drop(counted);
        });
    }
}
