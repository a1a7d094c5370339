//! A counting semaphore (N permits): on Redis nodes N independent slots, each a Redlock mutex;
//! on etcd the first N live waiters in creation order, each in a slot of its own.
//!
//! A quorum of per-node counters is not enough on independent nodes: with N = 2 on 3 nodes, A
//! admitted on {1,2}, B on {2,3} and C on {1,3} each hold a majority while no node ever counted
//! more than 2 (`tests/semaphore_model.rs` finds this trace). On Redis a permit is one slot's
//! lock, the key `<resource>:permit:<i>` ([`crate::protocol::permit_key`]) taken on a quorum
//! like any mutex. Two holders of one slot would need two quorums of one key: the mutex's
//! argument, per slot. So at most one holder per slot and at most N holders, under the mutex's
//! conditions (the model checks it with pauses, honest expiry and quarantined restarts, and
//! shows it breaking, as the mutex does, on a clock jump or a restart without quarantine). On
//! etcd the argument is consensus: see `etcd/semaphore.rs`.
//!
//! A permit is a [`Lock`] on its slot: its fencing token is the slot's (in fencing mode; always
//! on etcd), it auto-extends and signals its loss as any lock, and it is released like one.
//! Tokens of two slots are not comparable: fence storage per slot (the fencing token names the
//! slot's resource).
//!
//! Fairness: waiters are admitted first come, first served. On etcd the line is the creation
//! order of the waiters' keys. On Redis every slot's grant consults one waiting line of the
//! semaphore (`redis/permit.rs`).

use std::sync::Arc;

use crate::backend::Permits;
use crate::client::Client;
use crate::context::LockContext;
use crate::error::{Error, LostCause, Result};
use crate::keepalive::AutoExtend;
use crate::lock::Lock;
use crate::pure::retry::RetryPolicy;
use crate::pure::vote::Votes;

/// The most permits a semaphore may have: a full pass over the slots takes one round per slot
/// while they are all taken.
pub const MAX_PERMITS: u32 = 256;

/// The key of slot `i` of the semaphore `resource`: an ordinary lock key (any Redlock client
/// that takes it excludes the permit's holder; on etcd, the resource whose queue holds the slot
/// key).
pub fn permit_key(resource: &str, i: u32) -> String {
    format!("{resource}:permit:{i}")
}

/// The resource whose waiting line orders the waiters of the semaphore `resource`:
/// `fencelock:permits:<resource>`, in fencelock's reserved name space, so that no lock shares it
/// (on Redis its line keys are [`crate::protocol::queue_key`] and
/// [`crate::protocol::lease_key`] of this name; on etcd its queue prefix).
pub fn permit_line(resource: &str) -> String {
    format!("{}permits:{resource}", crate::pure::RESERVED_PREFIX)
}

/// A semaphore of N permits on the client's nodes. Made by [`Client::semaphore`]; cheap to
/// clone. Every client of one semaphore must use the same N: a client that uses a larger N
/// also takes the extra slots.
///
/// # Example
///
/// ```no_run
/// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
/// // At most 4 encoders at once, across every client of these nodes.
/// let encoder = client.semaphore("encoder", 4)?;
/// encoder
///     .with_permit(async |permit| println!("encoding under {}", permit.resource()))
///     .await?;
///
/// let permit = encoder.acquire().await?; // or hold a permit as a Lock
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    client: Client,
    resource: String,
    line: String,
    /// Each slot's lock key, as the lock on it holds it.
    slots: Arc<[Arc<[String]>]>,
}

impl Client {
    /// The semaphore `resource` with `permits` permits, on this client's nodes (one Redis
    /// node, Redlock, or etcd). No I/O happens here.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a resource name a lock would refuse, or `permits` outside
    /// 1..=[`MAX_PERMITS`], or on a backend without semaphores (`zk://`).
    pub fn semaphore(&self, resource: &str, permits: u32) -> Result<Semaphore> {
        crate::client::check_resources(&[resource])?;
        if !(1..=MAX_PERMITS).contains(&permits) {
            return Err(Error::config(
                "permits",
                format!("{permits} permits: a semaphore has 1 to {MAX_PERMITS} permits"),
            ));
        }
        let keys: Vec<String> = (0..permits).map(|i| permit_key(resource, i)).collect();
        crate::client::check_resources(&keys)?;
        Ok(Semaphore {
            client: self.clone(),
            resource: resource.to_string(),
            line: permit_line(resource),
            slots: keys.into_iter().map(|k| Arc::from(vec![k])).collect(),
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
        self.slots.len() as u32
    }

    /// One try for a permit, without waiting: on Redis one pass over the slots from a random
    /// one (the first slot granted is the permit; a slot is granted only when fewer live waiters
    /// wait in the semaphore's line than slots are free); on etcd a place in the line, kept only
    /// if it is among the first N and a slot is free.
    ///
    /// # Errors
    ///
    /// [`Error::Contention`] (naming the semaphore) when every permit is held or waited for;
    /// [`Error::Unavailable`] when too many nodes failed; [`Error::AlreadyHeld`] when the
    /// calling task holds every permit through this client.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a call dropped before it returns releases the slot it may have set in the
    /// background (by its own owner value), as [`Client::try_acquire`] does.
    pub async fn try_acquire(&self) -> Result<Lock> {
        self.take(None).await
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
    /// Cancel-safe: see [`Semaphore::try_acquire`].
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
    /// Cancel-safe: see [`Semaphore::try_acquire`].
    pub async fn acquire_with(&self, policy: &RetryPolicy) -> Result<Lock> {
        self.take(Some(policy)).await
    }

    async fn take(&self, policy: Option<&RetryPolicy>) -> Result<Lock> {
        let holdings = self.client.holdings();
        // A task may hold several permits, but not one slot twice; one that holds every permit
        // would wait on itself.
        let mine: Vec<bool> = self
            .slots
            .iter()
            .map(|slot| holdings.check(slot).is_err())
            .collect();
        if mine.iter().all(|m| *m) {
            return Err(Error::AlreadyHeld {
                resource: self.resource.clone(),
            });
        }
        let permits = Permits {
            name: &self.resource,
            line: &self.line,
            slots: &self.slots,
            mine: &mine,
        };
        let started = std::time::Instant::now();
        let result = self.client.backend().acquire_permit(&permits, policy).await;
        // The slot index matters only with a grant.
        let (slot, result) = match result {
            Ok((i, grant)) => (i, Ok(grant)),
            Err(e) => (0, Err(e)),
        };
        // One acquisition of the semaphore, under its own name.
        let name = std::slice::from_ref(&self.resource);
        self.client
            .record_acquisition(name, policy.is_some(), started, &result);
        let grant = result?;
        Ok(Lock::new(
            self.client.clone(),
            self.slots[slot].clone(),
            grant,
        ))
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
