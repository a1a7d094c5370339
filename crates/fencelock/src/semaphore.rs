//! A counting semaphore (N permits) over Redlock: N independent slots, each a Redlock mutex.
//!
//! A quorum of per-node counters is not enough on independent nodes: with N = 2 on 3 nodes, A
//! admitted on {1,2}, B on {2,3} and C on {1,3} each hold a majority while no node ever counted
//! more than 2 (`tests/semaphore_model.rs` finds this trace). Here a permit is one slot's lock,
//! the key `<resource>:permit:<i>` ([`crate::protocol::permit_key`]) taken on a quorum like any
//! mutex. Two holders of one slot would need two quorums of one key: the mutex's argument, per
//! slot. So at most one holder per slot and at most N holders, under the mutex's conditions
//! (the model checks it with pauses, honest expiry and quarantined restarts, and shows it
//! breaking, as the mutex does, on a clock jump or a restart without quarantine).
//!
//! A permit is a [`Lock`] on its slot: its fencing token is the slot's (in fencing mode), it
//! auto-extends and signals its loss as any lock, and it is released like one. Tokens of two
//! slots are not comparable: fence storage per slot (the issued token names the slot's key).
//!
//! Fairness: no first-come order among permit waiters. A waiter tries the slots from a random
//! one onwards; when all are taken it marks every slot as waited for and sleeps until any slot
//! is released (or its retry delay passes), then tries again. Waiters race for a freed slot, as
//! waiters of several keys do for the mutex; a stream of new arrivals can overtake a waiter.

use std::sync::Arc;
use std::time::Instant;

use crate::client::Client;
use crate::context::LockContext;
use crate::error::{Error, LostCause, Result};
use crate::keepalive::AutoExtend;
use crate::lock::Lock;
use crate::pure::retry::RetryPolicy;
use crate::pure::vote::Votes;
use crate::redis::Wait;

/// The most permits a semaphore may have: a full pass over the slots takes one round per slot
/// while they are all taken.
pub const MAX_PERMITS: u32 = 256;

/// The key of slot `i` of the semaphore `resource`: an ordinary lock key (any Redlock client
/// that takes it excludes the permit's holder).
pub fn permit_key(resource: &str, i: u32) -> String {
    format!("{resource}:permit:{i}")
}

/// A semaphore of N permits on the client's nodes. Made by [`Client::semaphore`]; cheap to
/// clone. Every client of one semaphore must use the same N: a client that uses a larger N
/// also takes the extra slots.
#[derive(Debug, Clone)]
pub struct Semaphore {
    client: Client,
    resource: String,
    keys: Arc<[String]>,
}

impl Client {
    /// The semaphore `resource` with `permits` permits, on Redis nodes (one node or Redlock).
    /// No I/O happens here.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a resource name a lock would refuse, `permits` outside
    /// 1..=[`MAX_PERMITS`], or an etcd client (not supported yet: etcd's own order of creation
    /// revisions would be the right design there, and is not built).
    pub fn semaphore(&self, resource: &str, permits: u32) -> Result<Semaphore> {
        crate::client::check_resources(&[resource])?;
        if !(1..=MAX_PERMITS).contains(&permits) {
            return Err(Error::config(
                "permits",
                format!("{permits} permits: a semaphore has 1 to {MAX_PERMITS} permits"),
            ));
        }
        if self.backend().redis("a semaphore").is_err() {
            return Err(Error::config(
                "backend",
                "semaphores work on Redis nodes only; on etcd they are not built yet (use Redis nodes, or a mutex)",
            ));
        }
        let keys: Vec<String> = (0..permits).map(|i| permit_key(resource, i)).collect();
        crate::client::check_resources(&keys)?;
        Ok(Semaphore {
            client: self.clone(),
            resource: resource.to_string(),
            keys: keys.into(),
        })
    }
}

impl Semaphore {
    /// The semaphore's name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// How many permits it has.
    pub fn permits(&self) -> u32 {
        self.keys.len() as u32
    }

    /// One pass over the slots, from a random one: the first slot granted is the permit.
    ///
    /// # Errors
    ///
    /// [`Error::Contention`] (naming the semaphore, with the last slot's votes) when every slot
    /// is held; [`Error::Unavailable`] when too many nodes failed; [`Error::AlreadyHeld`] when
    /// the calling task holds every permit through this client.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a cancelled attempt may leave a slot's keys that expire after the TTL.
    pub async fn try_acquire(&self) -> Result<Lock> {
        self.pass(Wait::No).await
    }

    /// Takes a permit, waiting per the client's [`RetryPolicy`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] (naming the semaphore, holding the last pass's error) when the wait or
    /// the attempt count ran out; otherwise as [`Semaphore::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: see [`Semaphore::try_acquire`].
    pub async fn acquire(&self) -> Result<Lock> {
        let policy = self.client.config().retry().clone();
        self.acquire_with(&policy).await
    }

    /// [`Semaphore::acquire`] with a retry policy for this call only.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: see [`Semaphore::try_acquire`].
    pub async fn acquire_with(&self, policy: &RetryPolicy) -> Result<Lock> {
        let config = self.client.config();
        let lease = crate::pure::queue::lease(policy.max_delay(), config.node_timeout());
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
            let err = match self.pass(wait).await {
                Ok(lock) => return Ok(lock),
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            let elapsed = started.elapsed();
            if !policy.may_retry(attempts, elapsed) {
                return Err(Error::Timeout {
                    resource: self.resource.clone(),
                    attempts,
                    last: Box::new(err),
                });
            }
            if subscription.is_none() {
                // From now on the release of any slot wakes us; try once more at once, marked,
                // since a slot may have been freed while we subscribed.
                let backend = self.client.backend().redis("a semaphore")?;
                subscription = Some(
                    backend
                        .watch_release(&self.keys, config.node_timeout())
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

    /// One try of every slot.
    async fn pass(&self, wait: Wait<'_>) -> Result<Lock> {
        let n = self.keys.len();
        let holdings = self.client.holdings();
        let mut mine = 0;
        let mut last: Option<Error> = None;
        let offset = fastrand::usize(..n);
        for k in 0..n {
            let key = &self.keys[(offset + k) % n];
            let slot: Arc<[String]> = Arc::from(vec![key.clone()]);
            if holdings.check(&slot).is_err() {
                // Ours already: a task may hold several permits, but not one slot twice.
                mine += 1;
                continue;
            }
            let started = std::time::Instant::now();
            let attempt = self
                .client
                .backend()
                .redis_attempt("a semaphore", &slot, wait)
                .await;
            self.client
                .record_acquisition(&slot, false, started, &attempt);
            match attempt {
                Ok(grant) => return Ok(Lock::new(self.client.clone(), slot, grant)),
                Err(e) if !e.is_retryable() => return Err(e),
                // Unavailability says more than a busy slot: keep it.
                Err(e) => match &last {
                    Some(prev) if prev.kind() == crate::ErrorKind::Unavailable => {}
                    _ => last = Some(e),
                },
            }
        }
        if mine == n {
            return Err(Error::AlreadyHeld {
                resource: self.resource.clone(),
            });
        }
        let resource = self.resource.clone();
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

    /// Runs `work` under a permit: acquires (waiting per the retry policy), keeps the permit
    /// extended while `work` runs, hands it a [`LockContext`] (the slot's key as resource, the
    /// slot's fencing token, the lost signal), and releases in every case. If the permit is
    /// lost first, `work` is dropped and the call returns [`Error::Lost`].
    ///
    /// # Errors
    ///
    /// Errors of [`Semaphore::acquire`]; [`Error::Lost`] when the permit was lost before `work`
    /// finished.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the permit in the background.
    pub async fn with_permit<T, F>(&self, work: F) -> Result<T>
    where
        F: AsyncFnOnce(LockContext) -> T,
    {
        let guard = self.acquire().await?.auto_extend(AutoExtend::new());
        let lost = guard.lost();
        let slot = guard.resource().to_string();
        let output = tokio::select! {
            biased;
            () = lost.fired() => None,
            output = work(guard.context()) => Some(output),
        };
        let cause = guard.lost_cause();
        let released = guard.release().await;
        match (output, cause, released) {
            (Some(_), None, Err(err @ Error::Lost { .. })) => Err(err),
            (Some(output), None, _) => Ok(output),
            (_, cause, released) => Err(match released {
                Err(err @ Error::Lost { .. }) => err,
                _ => Error::lost(slot, Votes::default(), cause.unwrap_or(LostCause::Expired)),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_keys_are_ordinary_lock_keys() {
        assert_eq!(permit_key("jobs", 0), "jobs:permit:0");
        assert_eq!(permit_key("jobs", 255), "jobs:permit:255");
        assert!(crate::client::check_resources(&[permit_key("jobs", 3)]).is_ok());
    }

    #[test]
    fn permits_out_of_range_are_refused_before_any_io() {
        let client = Client::new(crate::Config::new(["redis://127.0.0.1:1"])).unwrap();
        for n in [0, MAX_PERMITS + 1] {
            let err = client.semaphore("jobs", n).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidConfig, "{err}");
            assert!(err.to_string().contains("permits"), "{err}");
        }
        assert!(client.semaphore("fencelock:x", 2).is_err());
        assert_eq!(client.semaphore("jobs", 3).unwrap().permits(), 3);
    }
}
