//! A semaphore's permit on Redis nodes: N independent slots, each a Redlock mutex (see
//! `semaphore.rs` for why that, and not a quorum of counters, keeps at most N holders).

use std::sync::Arc;
use std::time::Instant;

use super::ops::Wait;
use super::{Grant, RedisBackend};
use crate::error::{Error, Result};
use crate::pure::retry::RetryPolicy;
use crate::pure::vote::Votes;

/// One semaphore as the Redis backend takes it.
#[derive(Debug)]
pub(crate) struct PermitSlots<'a> {
    /// The semaphore's name, for errors.
    pub(crate) name: &'a str,
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
        let Some(policy) = policy else {
            return self.permit_pass(p, Wait::No).await;
        };
        let lease = crate::pure::queue::lease(policy.max_delay(), self.settings.node_timeout);
        let started = Instant::now();
        let mut attempts = 0u32;
        let mut subscription = None;
        loop {
            attempts += 1;
            let wait = if subscription.is_some() {
                Wait::Marked(lease)
            } else {
                Wait::No
            };
            let err = match self.permit_pass(p, wait).await {
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
            if subscription.is_none() {
                // From now on the release of any slot wakes us; try once more at once, marked,
                // since a slot may have been freed while we subscribed.
                let keys: Vec<String> = p.slots.iter().map(|s| s[0].clone()).collect();
                subscription = Some(
                    self.watch
                        .subscribe(&keys, self.settings.node_timeout)
                        .await,
                );
                continue;
            }
            let delay = policy
                .delay(attempts, fastrand::f64())
                .min(policy.wait().saturating_sub(elapsed));
            if let Some(s) = &subscription {
                s.wait(delay).await;
            }
        }
    }

    /// One try of every slot the task does not hold, from a random one: the first slot granted
    /// is the permit.
    async fn permit_pass(&self, p: &PermitSlots<'_>, wait: Wait<'_>) -> Result<(usize, Grant)> {
        let n = p.slots.len();
        let mut last: Option<Error> = None;
        let offset = fastrand::usize(..n);
        for k in 0..n {
            let i = (offset + k) % n;
            if p.mine[i] {
                continue;
            }
            match self.attempt(&p.slots[i], wait).await {
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
