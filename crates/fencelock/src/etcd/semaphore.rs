//! A semaphore of N permits on etcd: the first N live waiters hold, each in a slot of its own.
//!
//! # How a permit is taken
//!
//! 1. Join the semaphore's line as a mutex waiter joins a queue (a lease, and a key under the
//!    line's prefix attached to it, `Cluster::enqueue`): the key's create revision is the
//!    waiter's place.
//! 2. Look (one transaction, which also checks that our key still lives): how many live keys
//!    of the line were created before ours, and which of the N slots are free. With N or more
//!    ahead, watch the line for a delete and look again; waiters are admitted in creation
//!    order, so a later arrival never overtakes an earlier one.
//! 3. Admitted (fewer than N ahead): take a free slot `i` in one transaction, "if our line key
//!    still lives and nothing lives under slot `i`'s prefix, create our key there on our lease".
//!    The slot key's create revision is the permit's fencing token, and the slot key is the
//!    lock key of the resource `<name>:permit:<i>` as a mutex would write it, so a mutex on
//!    that resource and the permit in that slot exclude each other.
//!
//! # Why at most N hold
//!
//! Twice over. Admission: no key is ever created before an existing one (revisions only grow),
//! so a waiter among the first N live keys stays among them until its lease ends, and at most
//! N keys are the first N. Slots: a slot is taken only while nothing lives under its prefix, in
//! one transaction, so each slot has at most one holder and there are N slots. Both rest on
//! etcd's consensus alone, with the validity of the lease (`held`) as for the mutex.
//!
//! # Why each slot's tokens grow
//!
//! A slot's next holder creates its key after the previous holder's key was deleted (by the
//! revoke or the expiry of its lease), so at a larger revision. Tokens of two slots are not
//! ordered between each other: fence storage per slot, as on Redis.
//!
//! # A take whose answer is lost
//!
//! A take that times out or loses its answer (its member failed) may have been applied, then
//! or later (a proposal in the raft log commits once the cluster can). The take therefore
//! writes the waiter's line key again in its transaction, and applies only while that key is
//! unmodified since it was created: at most one take of a waiter's line key ever applies, and
//! a line key modified after its creation says that one did, at the revision of its last
//! modification, which is the slot key's creation and the permit's token. Each look at the
//! line reads the waiter's line key with the rest; after a take that failed, the waiter looks
//! again (it takes no other slot meanwhile), and a look that finds the mark reads back which
//! slot holds its key and holds the permit there. A lease therefore never holds two slots,
//! and a slot its waiter does not know of is found at the next look, at the latest when the
//! lease is next renewed (a third of its TTL)
//! (`a_waiter_finds_the_slot_a_take_without_an_answer_gave_it`, tests/etcd_family.rs; mutant
//! `etcd-permit-take-unread`). A marked line key whose slot key is gone (revoked by its
//! token) is a place that can take no slot: the waiter leaves the line and joins again.
//!
//! Every admitted waiter keeps its line key with its slot (one lease holds both): the holders
//! are the first live keys of the line, and a waiter counts them ahead of it. A waiter that is
//! admitted but finds no free slot (a slot held by a mutex on the slot's resource, or by a
//! client that uses a larger N) watches the slots until one is deleted.
//!
//! Wake-ups: a waiter watches the whole line for deletes (any of the keys ahead may be the one
//! that lets it in), so every release wakes every waiter once; each then does one read.

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

use super::rwlock::Side;
use super::{gets, keys, timing, Cluster, EtcdHeld, Fail, PendingLease};
use crate::error::{Error, Result};

/// What one semaphore is on etcd: its name, the line's resource and the slots' resources.
#[derive(Debug)]
pub(crate) struct PermitKeys<'a> {
    /// The semaphore's name, for errors.
    pub(crate) name: &'a str,
    /// The resource whose queue is the line.
    pub(crate) line: &'a str,
    /// The resource of each slot, in slot order.
    pub(crate) slots: &'a [String],
}

/// Where a look at the line and the slots left us.
enum Standing {
    /// Fewer than N waiters ahead: these slots (indexes) were free; the read was at `revision`.
    Admitted { free: Vec<usize>, revision: i64 },
    /// N or more ahead; the read was at `revision`.
    Queued { revision: i64 },
    /// A take of ours was applied (our line key was modified): its slot and the slot key's
    /// create revision, or `None` when the slot key is gone (revoked by its token).
    Took { slot: Option<(usize, i64)> },
    /// Our key is gone (the lease expired while we could not renew it).
    Gone,
}

/// One waiter's state across the steps, for the timeout error.
#[derive(Debug, Default)]
struct PermitWait {
    pending: PendingLease,
    attempts: u32,
    last: Option<Error>,
}

impl Cluster {
    /// Takes a permit of the semaphore `k`, waiting up to `wait` (`None`: one look, no wait).
    /// Returns the slot and the lock on it.
    ///
    /// # Errors
    ///
    /// [`Error::Contention`] (no wait) when N waiters were ahead or no slot was free;
    /// [`Error::Timeout`] when `wait` ran out, holding the last obstacle; as
    /// `Cluster::try_acquire` otherwise. Whatever the error, our lease has been revoked.
    ///
    /// # Cancel safety
    ///
    /// As `Cluster::try_acquire`.
    pub(crate) async fn acquire_permit(
        &self,
        k: &PermitKeys<'_>,
        wait: Option<Duration>,
    ) -> Result<(usize, EtcdHeld)> {
        let started = Instant::now();
        let mut w = PermitWait::default();
        let result = match wait {
            None => self.permit_once(k, &mut w, started).await,
            Some(wait) => {
                match tokio::time::timeout(wait, self.permit_loop(k, &mut w, started)).await {
                    Ok(result) => result,
                    Err(_elapsed) => Err(Error::Timeout {
                        resource: k.name.to_string(),
                        attempts: w.attempts.max(1),
                        last: Box::new(w.last.take().unwrap_or_else(|| {
                            self.error_for(
                                k.name,
                                Fail::failed("no answer from the cluster"),
                                started,
                            )
                        })),
                    }),
                }
            }
        };
        self.settle_pending(&mut w.pending, result.is_ok()).await;
        result
    }

    /// Joins the line, looks once, and takes a free slot if admitted.
    async fn permit_once(
        &self,
        k: &PermitKeys<'_>,
        w: &mut PermitWait,
        started: Instant,
    ) -> Result<(usize, EtcdHeld)> {
        w.attempts = 1;
        let fail = |f| self.error_for(k.name, f, started);
        let (entry, _) = self
            .enqueue(
                &[k.line.to_string()],
                &mut w.pending,
                Side::Exclusive,
                false,
            )
            .await
            .map_err(fail)?;
        let free = match self.standing(k, &entry).await.map_err(fail)? {
            Standing::Admitted { free, .. } => free,
            Standing::Queued { .. } => return Err(self.contention(k.name, started)),
            Standing::Gone | Standing::Took { .. } => return Err(fail(Fail::lease_gone())),
        };
        for i in rotated(free) {
            if let Some(revision) = self.take_slot(k, i, &entry).await.map_err(fail)? {
                let mut held = entry.clone();
                held.keys.insert(0, slot_key(k, i, entry.lease));
                held.revision = revision;
                return Ok((i, self.held(&k.slots[i], &held, started)?));
            }
        }
        Err(self.contention(k.name, started))
    }

    /// Waits in line until admitted and a slot is ours; joins again if our place is lost.
    async fn permit_loop(
        &self,
        k: &PermitKeys<'_>,
        w: &mut PermitWait,
        started: Instant,
    ) -> Result<(usize, EtcdHeld)> {
        loop {
            w.attempts += 1;
            let entry = match self
                .enqueue(
                    &[k.line.to_string()],
                    &mut w.pending,
                    Side::Exclusive,
                    false,
                )
                .await
            {
                Ok((entry, _)) => entry,
                Err(fail) => {
                    w.last = Some(self.error_for(k.name, fail, started));
                    // A failed join may still have written our key: drop it with its lease.
                    self.settle_pending(&mut w.pending, false).await;
                    tokio::time::sleep(timing::RETRY_DELAY).await;
                    continue;
                }
            };
            if let Some(done) = self.permit_in_line(k, w, entry, started).await {
                return done;
            }
            // Our place is gone: join the line again (at its end).
            self.settle_pending(&mut w.pending, false).await;
        }
    }

    /// Waits from `entry` on; `None` once our place is gone.
    async fn permit_in_line(
        &self,
        k: &PermitKeys<'_>,
        w: &mut PermitWait,
        mut entry: super::Entry,
        started: Instant,
    ) -> Option<Result<(usize, EtcdHeld)>> {
        let renew_every = timing::renew_interval(entry.ttl);
        // The slot, once taken, and its key's create revision.
        let mut taken: Option<(usize, i64)> = None;
        loop {
            if taken.is_some() || entry.renewed.elapsed() >= renew_every {
                // Renew when due, and once a slot is ours, so that the permit starts with a
                // full TTL.
                match self.keep_alive(entry.lease, self.request_timeout).await {
                    Ok(sent) => entry.renewed = sent,
                    Err(fail) if fail.lease_gone => return None,
                    Err(fail) => {
                        w.last = Some(self.error_for(k.name, fail, started));
                        tokio::time::sleep(timing::RETRY_DELAY).await;
                        continue;
                    }
                }
            }
            if let Some((i, revision)) = taken {
                let mut held = entry.clone();
                held.keys.insert(0, slot_key(k, i, entry.lease));
                held.revision = revision;
                match self.held(&k.slots[i], &held, started) {
                    Ok(held) => return Some(Ok((i, held))),
                    // No validity left after the renewal: give the slot back and start over.
                    Err(e) => {
                        w.last = Some(e);
                        return None;
                    }
                }
            }
            w.attempts += 1;
            let standing = match self.standing(k, &entry).await {
                Ok(s) => s,
                Err(fail) => {
                    w.last = Some(self.error_for(k.name, fail, started));
                    tokio::time::sleep(timing::RETRY_DELAY).await;
                    continue;
                }
            };
            let wake = entry.renewed + renew_every;
            let (watch, revision) = match standing {
                Standing::Gone => return None,
                // A take of ours applied although we did not hear it (see the module docs).
                Standing::Took { slot: Some(took) } => {
                    taken = Some(took);
                    continue;
                }
                // Its slot key gone, this place can take no slot: join again.
                Standing::Took { slot: None, .. } => return None,
                Standing::Queued { revision } => (keys::queue_prefix(k.line), revision),
                Standing::Admitted { free, revision } => {
                    let mut unknown = false;
                    for i in rotated(free) {
                        match self.take_slot(k, i, &entry).await {
                            Ok(Some(rev)) => {
                                taken = Some((i, rev));
                                break;
                            }
                            Ok(None) => {}
                            Err(fail) => {
                                // It may have been applied: look again (the look finds it)
                                // rather than take another slot.
                                w.last = Some(self.error_for(k.name, fail, started));
                                unknown = true;
                                break;
                            }
                        }
                    }
                    if unknown {
                        tokio::time::sleep(timing::RETRY_DELAY).await;
                    }
                    if taken.is_some() || unknown {
                        continue;
                    }
                    // Admitted, but every slot is held: wait for one to be freed.
                    (slots_prefix(k), revision)
                }
            };
            w.last = Some(self.contention(k.name, started));
            if let Err(fail) = self.wait_delete(&watch, true, revision, wake).await {
                w.last = Some(self.error_for(k.name, fail, started));
                tokio::time::sleep(timing::RETRY_DELAY).await;
            }
        }
    }

    /// One read of our standing: whether our key lives, how many live keys are ahead of it in
    /// the line, and which slots are free.
    async fn standing(&self, k: &PermitKeys<'_>, entry: &super::Entry) -> Result<Standing, Fail> {
        let client = self.client().await?;
        let count = || GetOptions::new().with_prefix().with_count_only();
        // The keys ahead are read (at most N, keys only), not counted: etcd's count ignores the
        // create-revision bound, which it applies to the keys it returns (before the limit).
        // Our revision is at least 2 (a store's first write is revision 2): a bound of 0 would
        // mean "no bound".
        let ahead = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_max_create_revision(entry.revision - 1)
            .with_limit(k.slots.len() as i64);
        let reads = std::iter::once(TxnOp::get(keys::queue_prefix(k.line), Some(ahead)))
            .chain(
                k.slots
                    .iter()
                    .map(|s| TxnOp::get(keys::queue_prefix(s), Some(count()))),
            )
            .chain(std::iter::once(TxnOp::get(
                entry.keys[0].clone(),
                Some(GetOptions::new().with_keys_only()),
            )));
        let txn = Txn::new()
            .when([Compare::create_revision(
                entry.keys[0].clone(),
                CompareOp::Equal,
                entry.revision,
            )])
            .and_then(reads.collect::<Vec<_>>());
        let resp = self
            .call(&client, self.request_timeout, client.kv_client().txn(txn))
            .await?;
        if !resp.succeeded() {
            return Ok(Standing::Gone);
        }
        let revision = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| Fail::failed("response without a header"))?;
        let gets = gets(&resp);
        let Some((ahead, rest)) = gets.split_first() else {
            return Err(Fail::failed("unexpected transaction response"));
        };
        let Some((line_key, slots)) = rest.split_last() else {
            return Err(Fail::failed("unexpected transaction response"));
        };
        let modified = line_key
            .kvs()
            .first()
            .map_or(entry.revision, |kv| kv.mod_revision());
        if modified != entry.revision {
            return Ok(Standing::Took {
                slot: self.slot_of_ours(k, entry).await?,
            });
        }
        let ahead = ahead.kvs().len() as i64;
        let slots: Vec<i64> = slots.iter().map(|g| g.count()).collect();
        if slots.len() != k.slots.len() {
            return Err(Fail::failed("unexpected transaction response"));
        }
        if ahead >= k.slots.len() as i64 {
            return Ok(Standing::Queued { revision });
        }
        let free = (0..slots.len()).filter(|&i| slots[i] == 0).collect();
        Ok(Standing::Admitted { free, revision })
    }

    /// Takes slot `i` if our line key still lives and nothing lives under the slot's prefix;
    /// returns the slot key's create revision (the fencing token), or `None` when the slot was
    /// taken (or our key is gone: the next look says so).
    async fn take_slot(
        &self,
        k: &PermitKeys<'_>,
        i: usize,
        entry: &super::Entry,
    ) -> Result<Option<i64>, Fail> {
        let client = self.client().await?;
        let key = slot_key(k, i, entry.lease);
        // The line key, unmodified since its creation, is written again: at most one take of
        // it ever applies, and the look tells one that did (see the module docs).
        let txn = Txn::new()
            .when([
                Compare::create_revision(entry.keys[0].clone(), CompareOp::Equal, entry.revision),
                Compare::mod_revision(entry.keys[0].clone(), CompareOp::Equal, entry.revision),
                Compare::create_revision(keys::queue_prefix(&k.slots[i]), CompareOp::Equal, 0)
                    .with_prefix(),
            ])
            .and_then([
                TxnOp::put(
                    key.clone(),
                    Vec::<u8>::new(),
                    Some(PutOptions::new().with_lease(entry.lease)),
                ),
                TxnOp::put(
                    entry.keys[0].clone(),
                    self.holder.clone(),
                    Some(PutOptions::new().with_lease(entry.lease)),
                ),
                TxnOp::get(key, None),
            ]);
        let resp = self
            .call(&client, self.request_timeout, client.kv_client().txn(txn))
            .await?;
        if !resp.succeeded() {
            return Ok(None);
        }
        gets(&resp)
            .first()
            .and_then(|g| g.kvs().first().map(|kv| kv.create_revision()))
            .map(Some)
            .ok_or_else(|| Fail::failed("the slot key vanished right after it was written"))
    }
}

impl Cluster {
    /// Which slot holds our key, and the key's create revision, once our line key says a take
    /// of ours applied: one read of each slot's key for our lease (at most one exists, see
    /// the module docs).
    async fn slot_of_ours(
        &self,
        k: &PermitKeys<'_>,
        entry: &super::Entry,
    ) -> Result<Option<(usize, i64)>, Fail> {
        let client = self.client().await?;
        let reads: Vec<TxnOp> = (0..k.slots.len())
            .map(|i| {
                TxnOp::get(
                    slot_key(k, i, entry.lease),
                    Some(GetOptions::new().with_keys_only()),
                )
            })
            .collect();
        let resp = self
            .call(
                &client,
                self.request_timeout,
                client.kv_client().txn(Txn::new().and_then(reads)),
            )
            .await?;
        Ok(gets(&resp)
            .iter()
            .enumerate()
            .find_map(|(i, g)| g.kvs().first().map(|kv| (i, kv.create_revision()))))
    }
}

/// Our key in slot `i`: the lock key a mutex on the slot's resource would write with our lease.
fn slot_key(k: &PermitKeys<'_>, i: usize, lease: i64) -> String {
    keys::lock_key(&keys::queue_prefix(&k.slots[i]), lease)
}

/// The prefix every slot's queue shares (`fencelock/<name>:permit:`), for a watch on all of
/// them: it may hold other resources' queues too, whose deletes only wake us once more.
fn slots_prefix(k: &PermitKeys<'_>) -> String {
    let first = keys::queue_prefix(&k.slots[0]);
    // `…:permit:0/` without the slot number and the slash.
    let cut = first
        .trim_end_matches('/')
        .trim_end_matches(|c: char| c.is_ascii_digit());
    cut.to_string()
}

/// The free slots from a random one on, so that waiters admitted together try different slots
/// first.
fn rotated(mut free: Vec<usize>) -> Vec<usize> {
    if !free.is_empty() {
        let at = fastrand::usize(..free.len());
        free.rotate_left(at);
    }
    free
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_lies_under_the_shared_prefix() {
        let slots: Vec<String> = (0..12).map(|i| format!("jobs/x:permit:{i}")).collect();
        let k = PermitKeys {
            name: "jobs/x",
            line: "fencelock:permits:jobs/x",
            slots: &slots,
        };
        let prefix = slots_prefix(&k);
        assert_eq!(prefix, "fencelock/jobs%2Fx:permit:");
        for (i, s) in slots.iter().enumerate() {
            assert!(keys::queue_prefix(s).starts_with(&prefix));
            assert!(slot_key(&k, i, 7).starts_with(&keys::queue_prefix(s)));
        }
        let mut seen = rotated(vec![1, 3, 4]);
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 3, 4]);
    }
}
