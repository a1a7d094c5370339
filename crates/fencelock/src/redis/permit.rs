//! A semaphore's permit on Redis nodes: N independent slots, each a Redlock mutex (see
//! `semaphore.rs` for why that, and not a quorum of counters, keeps at most N holders), and one
//! waiting line for the semaphore that every slot's grant consults.
//!
//! The line is the waiting line of the reserved resource `fencelock:permits:<name>`
//! ([`crate::protocol::permit_line`]), with the mutex's tickets and leases (`pure/queue.rs`): a
//! ticket dates from the start of the wait, so every node orders the waiters alike. The first
//! pass of a wait does not queue; after a refusal the waiter takes its ticket and every later
//! request registers it (or renews its lease) on the node it reaches. A node grants a slot only
//! if it is free and fewer live waiters wait ahead than slots are free (`acquire_permit.lua`):
//! every earlier waiter can still have a slot, so a later one never takes the last. A request
//! without a ticket (a first pass, `try_acquire`) counts every live waiter as ahead: it never
//! passes anyone in line. The rule only adds refusals, so each slot is still exactly a Redlock
//! mutex; the model checker explores both properties (`tests/semaphore_model.rs`).
//!
//! A waiter stays in line until it holds: then (and when it gives up, times out or is dropped)
//! it leaves the line on every node in the background; a registration left behind lasts its
//! lease. Wake-ups: a waiter listens to the release channel of every slot, so a release wakes
//! every waiter of the semaphore; only those the rule admits are granted.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::ops::{PermitAsk, Wait};
use super::{Grant, RedisBackend};
use crate::error::{Error, Result};
use crate::pure::queue::{self, Ticket};
use crate::pure::retry::RetryPolicy;
use crate::pure::vote::Votes;

/// One semaphore as the Redis backend takes it.
#[derive(Debug)]
pub(crate) struct PermitSlots<'a> {
    /// The semaphore's name, for errors.
    pub(crate) name: &'a str,
    /// The resource whose waiting line orders the semaphore's waiters.
    pub(crate) line: &'a str,
    /// Each slot's lock key.
    pub(crate) slots: &'a [Arc<[String]>],
    /// The slots the calling task holds already through this client: not asked again.
    pub(crate) mine: &'a [bool],
}

impl RedisBackend {
    /// Takes a permit: one pass over the slots with `policy` `None`, else passes until one
    /// grants or the policy runs out. Returns the slot and its grant.
    ///
    /// # Errors
    ///
    /// As `Semaphore::acquire_with` (without a policy: as `Semaphore::try_acquire`).
    pub(crate) async fn acquire_permit(
        self: &Arc<Self>,
        p: &PermitSlots<'_>,
        policy: Option<&RetryPolicy>,
    ) -> Result<(usize, Grant)> {
        let mut ask = PermitAsk {
            line: p.line.to_string(),
            slots: p.slots.iter().map(|s| s[0].clone()).collect(),
            ticket: None,
        };
        let Some(policy) = policy else {
            return self.permit_pass(p, &ask).await;
        };
        let lease = queue::lease(policy.max_delay(), self.settings.node_timeout);
        let started = Instant::now();
        let wall_start = SystemTime::now();
        let mut attempts = 0u32;
        let mut subscription = None;
        // However this call ends (a grant, an error, a timeout, the future dropped), a waiter
        // that queued leaves the line.
        let mut leave = LeaveLine {
            backend: self,
            line: p.line,
            ticket: None,
        };
        loop {
            attempts += 1;
            let err = match self.permit_pass(p, &ask).await {
                Ok(permit) => return Ok(permit),
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            let elapsed = started.elapsed();
            if !policy.may_retry(attempts, elapsed) {
                return Err(Error::Timeout {
                    resource: p.name.to_string(),
                    attempts,
                    last: Box::new(err),
                });
            }
            if ask.ticket.is_none() {
                // From now on in line, with a ticket from the start of the wait, and woken by
                // the release of any slot; try again at once, since a slot may have been freed
                // while we subscribed.
                let ticket =
                    Ticket::new(wall_start, self.watch.waiter_id(fastrand::u64(..)), lease);
                leave.ticket = Some(ticket.clone());
                ask.ticket = Some(ticket);
                subscription = Some(
                    self.watch
                        .subscribe(&ask.slots, self.settings.node_timeout)
                        .await,
                );
                continue;
            }
            let delay = policy
                .delay(attempts, fastrand::f64())
                .min(policy.wait().saturating_sub(elapsed));
            match &subscription {
                Some(s) if !super::line::sets_off_its_own_wake(&err) => {
                    s.wait(delay).await;
                }
                _ => tokio::time::sleep(delay).await,
            }
        }
    }

    /// One try of every slot the task does not hold, from a random one: the first slot granted
    /// is the permit.
    async fn permit_pass(
        self: &Arc<Self>,
        p: &PermitSlots<'_>,
        ask: &PermitAsk,
    ) -> Result<(usize, Grant)> {
        let n = p.slots.len();
        let mut last: Option<Error> = None;
        let offset = fastrand::usize(..n);
        for k in 0..n {
            let i = (offset + k) % n;
            if p.mine[i] {
                continue;
            }
            match self.attempt(&p.slots[i], Wait::Permit(ask)).await {
                Ok(grant) => return Ok((i, grant)),
                Err(e) if !e.is_retryable() => return Err(e),
                // Unavailability says more than a busy slot: keep it.
                Err(e) => match &last {
                    Some(prev) if prev.kind() == crate::ErrorKind::Unavailable => {}
                    _ => last = Some(e),
                },
            }
        }
        let resource = p.name.to_string();
        Err(match last {
            Some(Error::Contention { votes, .. }) => Error::Contention { resource, votes },
            Some(Error::Unavailable { votes, .. }) => Error::Unavailable { resource, votes },
            Some(other) => other,
            None => Error::Contention {
                resource,
                votes: Votes::default(),
            },
        })
    }
}

/// Takes a waiter out of the semaphore's line when dropped (in the background: `Drop` does no
/// I/O; a registration left behind only lasts its lease).
struct LeaveLine<'a> {
    backend: &'a Arc<RedisBackend>,
    line: &'a str,
    ticket: Option<Ticket>,
}

impl Drop for LeaveLine<'_> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        self.backend.leave_in_background(self.line, ticket);
    }
}
