//! The lock handle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::client::{Client, Held};
use crate::error::{Error, LostCause, Result};
use crate::keepalive::{AutoExtend, GuardState, LockGuard, Stop};
use crate::vote::Votes;

/// A held lock. Release it with [`Lock::release`].
///
/// The lock is only valid until [`Lock::validity_deadline`]: past it, the keys may have expired
/// on a majority of nodes and another client may hold the lock. Work that can outlast it must
/// extend the lock ([`Lock::extend`], or [`Lock::auto_extend`] in the background), and work that
/// protects data must carry the [fencing token](Lock::fencing_token) to storage that checks it.
///
/// Dropping a lock without releasing it does no I/O in `Drop`: it asks a background task of the
/// client to release it, and if there is none, the keys expire after the TTL. A runtime that
/// shuts down does not run that task: call [`Client::close`] before `main` returns.
#[must_use = "the lock is held until release() or the TTL; dropping it releases it in the background"]
pub struct Lock {
    client: Client,
    keys: Arc<[String]>,
    held: Held,
    fencing_token: Option<u64>,
    deadline: Instant,
    votes: Votes,
    released: bool,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("resources", &self.keys)
            .field("held", &self.held)
            .field("fencing_token", &self.fencing_token)
            .field("valid_for", &self.remaining())
            .field("votes", &self.votes)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(
        client: Client,
        keys: Arc<[String]>,
        held: Held,
        fencing_token: Option<u64>,
        deadline: Instant,
        votes: Votes,
    ) -> Lock {
        Lock {
            client,
            keys,
            held,
            fencing_token,
            deadline,
            votes,
            released: false,
        }
    }

    #[cfg(feature = "etcd")]
    pub(crate) fn from_etcd(
        client: Client,
        keys: Arc<[String]>,
        held: crate::etcd::EtcdHeld,
    ) -> Lock {
        Lock {
            client,
            keys,
            fencing_token: Some(held.revision),
            deadline: held.deadline,
            votes: held.votes.clone(),
            held: Held::Etcd(held),
            released: false,
        }
    }

    /// The resource name (the key on every node); the first one for a multi-resource lock.
    pub fn resource(&self) -> &str {
        &self.keys[0]
    }

    pub(crate) fn keys(&self) -> &Arc<[String]> {
        &self.keys
    }

    /// Every resource this lock holds (one, unless taken with `acquire_many`).
    pub fn resources(&self) -> &[String] {
        &self.keys
    }

    /// The random value that owns the key (128 bits, hex; with etcd, the lock key's name).
    /// Whoever knows it can release or extend the lock: treat it as a secret.
    pub fn token(&self) -> &str {
        match &self.held {
            Held::Redis(token, _) => token.as_str(),
            #[cfg(feature = "etcd")]
            Held::Etcd(h) => &h.key,
        }
    }

    /// The fencing token, in fencing mode (always, with etcd). Pass it to the storage with every
    /// write.
    ///
    /// On Redis it is strictly greater than the token of every holder whose token was issued
    /// before this lock was granted **under the conditions `docs/fencing.md` states** ("Why a
    /// later holder's token is larger" and "The holes"): the nodes keep their counters (no
    /// restart without persistence, no eviction: `appendfsync always` and `noeviction`, which
    /// `fencelock doctor` checks) and no node's clock jumps. Outside them tokens stay unique but
    /// may be out of order. On etcd it is the revision that created the lock's keys: larger than
    /// every earlier holder's of each of its resources, by etcd's consensus. Tokens from
    /// different locks (other names, other node sets, Redis and etcd) are not comparable: the
    /// fenced storage refuses them on one fence row.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// The fencing token with the lock that issued it: what to pass to the fenced storage
    /// ([`crate::fence`]), which then binds the fence row to this lock and refuses tokens of
    /// another.
    pub fn issued_token(&self) -> Option<crate::IssuedToken> {
        let backend = match &self.held {
            Held::Redis(..) => "redis",
            #[cfg(feature = "etcd")]
            Held::Etcd(_) => "etcd",
        };
        let issuer = crate::IssuedToken::issuer_name(backend, &self.keys);
        self.fencing_token
            .map(|t| crate::IssuedToken::new(t, issuer))
    }

    /// The instant, on this process's monotonic clock, until which the lock may be considered
    /// held: acquisition start + TTL - drift.
    pub fn validity_deadline(&self) -> Instant {
        self.deadline
    }

    /// The time left until the validity deadline (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether the validity deadline is still ahead.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// The per-node answers of the acquisition (or of the last extension).
    pub fn votes(&self) -> &Votes {
        &self.votes
    }

    /// The client that took this lock.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Extends the lock to a full TTL from now, if a quorum still holds our token and answers
    /// before the current validity runs out. It never brings back a lock that has expired: the
    /// script only renews a key that still holds our token.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the validity deadline passed or a quorum no longer holds our token;
    /// [`Error::Unavailable`] when too many nodes failed to answer in time. After an error the
    /// lock must be treated as lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in the sense that a cancelled extension leaves the lock as valid as before
    /// (some nodes may have extended; the local deadline is unchanged).
    pub async fn extend(&mut self) -> Result<()> {
        let span = tracing::debug_span!("extend", resource = %self.keys[0]);
        let Some(budget) = self.deadline.checked_duration_since(Instant::now()) else {
            return Err(Error::lost(
                self.keys[0].clone(),
                Votes::default(),
                LostCause::Expired,
            ));
        };
        let (deadline, votes) = self
            .client
            .extend_held(&self.keys, &self.held, budget)
            .instrument(span)
            .await?;
        self.deadline = deadline;
        self.votes = votes;
        Ok(())
    }

    /// Keeps the lock extended in the background until the guard is released or dropped.
    ///
    /// Locks of one Redis client are extended together: one task per client sends the due
    /// extensions as one pipeline per node, so ten thousand locks cost a few round trips per
    /// interval, not ten thousand. The guard's [`LostSignal`](crate::LostSignal) fires when an
    /// extension fails to reach a quorum, or when the validity deadline minus the safety margin
    /// comes without a successful extension.
    ///
    /// Must be called within a tokio runtime.
    pub fn auto_extend(self, settings: AutoExtend) -> LockGuard {
        let ttl = self.client.config().ttl();
        let interval = settings.interval(ttl);
        let state = Arc::new(GuardState::new(self.deadline, settings.margin(ttl)));
        let until = settings.max_hold().map(|m| Instant::now() + m);
        let stop = match &self.held {
            Held::Redis(token, _) => {
                let (id, tx) = self.client.extender();
                let entry = crate::redis::extender::Entry {
                    keys: self.keys.clone(),
                    token: Arc::from(token.as_str()),
                    state: state.clone(),
                    interval,
                    until,
                };
                let _ = tx.send(crate::redis::extender::Msg::Register(id, entry));
                Stop::Extender { id, tx }
            }
            #[cfg(feature = "etcd")]
            Held::Etcd(_) => {
                let (client, keys, held, state) = (
                    self.client.clone(),
                    self.keys.clone(),
                    self.held.clone(),
                    state.clone(),
                );
                let task = tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(interval).await;
                        if until.is_some_and(|u| Instant::now() >= u) {
                            return;
                        }
                        let budget = state.deadline().saturating_duration_since(Instant::now());
                        match client.extend_held(&keys, &held, budget).await {
                            Ok((deadline, _)) => state.set_deadline(deadline),
                            Err(e) => {
                                state.fire_because(match e {
                                    Error::Lost { cause, .. } => cause,
                                    _ => LostCause::Unreachable,
                                });
                                return;
                            }
                        }
                    }
                });
                Stop::Task(task.abort_handle())
            }
        };
        LockGuard::new(self, state, stop)
    }

    /// Releases the lock on every node (compare-and-delete: a key that now holds another token is
    /// left alone). Returns once a quorum deleted its key, as acquisition returns at a quorum:
    /// the other nodes' requests finish in the background, each behind this lock's earlier
    /// commands on its node's connection, and [`Client::close`](crate::Client::close) waits
    /// for them. When no quorum deleted, it waits for every node's answer (within the node
    /// timeout) before it reports why. The returned votes of the nodes still answering are
    /// `Pending`.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when a quorum no longer held our token (it had expired: another client
    /// may have held the lock in the meantime, so work done since the deadline was unprotected);
    /// [`Error::Unavailable`] when too many nodes failed to answer (their keys expire by TTL).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a cancelled release leaves the remaining keys to expire by TTL.
    pub async fn release(mut self) -> Result<Votes> {
        self.released = true;
        let span = tracing::debug_span!("release", resource = %self.keys[0]);
        let (token, line) = match &self.held {
            Held::Redis(token, line) => (token.as_str(), line.as_deref()),
            #[cfg(feature = "etcd")]
            Held::Etcd(h) => {
                let crate::client::Backend::Etcd(e) = &self.client.inner().backend else {
                    unreachable!("an etcd lock comes from an etcd client")
                };
                e.release(h).instrument(span).await?;
                return Ok(Votes::default());
            }
        };
        let round = self
            .client
            .redis("release")?
            .release(
                &self.keys,
                token,
                line,
                self.client.config().node_timeout(),
                true,
            )
            .instrument(span)
            .await;
        if round.granted.iter().any(|(_, heard)| *heard > 0) {
            self.client.note_waiters(&self.keys[0]);
        }
        self.client
            .settle(&self.keys[0], round.decision, round.votes, false)
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if !self.released {
            self.client
                .release_in_background(self.keys.clone(), self.held.clone());
        }
    }
}
