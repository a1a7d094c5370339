//! The etcd backend: a fair (FIFO) lock on a consensus store, whose fencing token is the etcd
//! revision that created the lock keys.
//!
//! # How a lock is taken
//!
//! 1. Grant a lease of the configured TTL, rounded up to whole seconds (etcd's unit; the
//!    server may grant more, its minimum TTL, and the validity is computed from what it
//!    granted).
//! 2. In one transaction, create the key `fencelock/<resource>/<lease id>` of every resource of
//!    the lock, all attached to the lease, and read back ours with each queue's oldest key. The
//!    transaction is applied at one revision, so all our keys share one `create_revision`: this
//!    waiter's place in every queue it joined and, once it holds the lock, its fencing token:
//!    revisions grow with every write to the cluster, so a later holder of any of the resources
//!    always has a larger one.
//! 3. If the oldest key of every queue is ours, the lock is held. Otherwise (for `acquire`)
//!    watch a key created before ours in one of the queues, from the revision of the read on,
//!    so no delete is missed; when it goes, look again (an older one may still be there).
//!    Waiters thus take turns in creation order, and each watches one key instead of polling.
//!
//! # Leases carried over
//!
//! A mutex (or a writer, or an election candidate) of one resource does not grant a lease of
//! its own each time: its release deletes its key (only while it is the key it created,
//! compared by create revision) and keeps the lease, which now holds no key, for the client's
//! next such lock, which puts its key on it instead of granting a new one. That saves a raft
//! write per lock (the grant; the revoke becomes the delete). A spare lease carries a lock only
//! while a tenth of its TTL or less has passed since it was granted
//! ([`timing::spare_usable`]; a waiter's renewals in line count as grants), so the lock gets at
//! least nine tenths of a fresh lease, counted, as always, from the send time of the request
//! that granted it. A lock released later than that, whose acquisition started within a tenth
//! of its TTL after its client's last release (a run of locks, [`timing::in_a_run`]), deletes
//! its key all the same and then renews the lease, now keyless, before it pools it: etcd's
//! leader renews a lease without a raft write (unless the cluster runs with the experimental
//! lease checkpoints), where revoking it and granting the next lock a lease would be two; the
//! spare then counts from the renewal's send time
//! (`a_lock_in_a_run_released_after_a_tenth_of_its_ttl_renews_its_lease_for_the_next`; mutants
//! `etcd-aged-spare-not-renewed`, `etcd-spare-counted-from-its-take`, `etcd-run-never-seen`).
//! A lone lock released that late (a job's, whose client may take no other lock soon) revokes
//! its lease, after a look at its key: one write, where a deleted key would leave the lease to
//! a second, its expiry (`a_lone_lock_released_after_a_tenth_of_its_ttl_revokes_its_lease_and_the_next_grants_one`;
//! mutant `etcd-lone-aged-lock-carries`). The choice is [`timing::leave`]. A lease whose
//! renewal fails (or is left less than a request timeout of the release's time, or finds the
//! pool full) is revoked in the background. Spares that age in the pool are forgotten there
//! (they hold no key and expire by TTL), and a new lease is granted. A spare that turns out gone is
//! replaced by a new grant at once
//! (`a_spare_lease_revoked_from_outside_is_replaced_by_a_new_grant`). The spares a client holds when it is dropped expire by TTL,
//! as a crashed client's do; they hold no key.
//!
//! Each lock on a carried lease has a key of its own, `<lease id>.<use>`
//! ([`keys::carried_key`]): the token of a released lock names its key, not the lease, so
//! `release --owner` and `extend --owner` with it find nothing (`Lost`) and leave the later
//! lock on the same lease alone, as does the same token without its use number: an operation
//! by token looks for the token's key before it renews or revokes (a race with the key's
//! release may still renew the lease once). A release by token deletes the key and leaves the
//! lease to its client. Since the lease may outlive the key, an extension of such a lock renews
//! the lease and then checks that the key is still the one the lock created: a lock released by
//! its token elsewhere is reported lost to its holder
//! (`a_released_lease_carries_the_next_lock_and_a_stale_token_touches_neither`, tests/etcd.rs;
//! mutants `etcd-carried-lease-reuses-the-key`, `etcd-carried-extension-trusts-the-lease`).
//! Sets of resources, readers and semaphores keep a lease per lock and end it by revoking it.
//!
//! # Several resources, no deadlock
//!
//! Because a waiter's keys are created together, every waiter has one place, its revision, in
//! one order shared by all queues, and it waits only for keys older than its own. The oldest
//! live waiter is therefore first in every queue it joined and gets its lock: clients asking for
//! overlapping sets, in any order, are served one after the other and never wait for each other
//! in a cycle (`etcd.rs`: `overlapping_sets_in_opposite_orders_are_all_served_without_overlap`).
//! It is all or nothing: a lock is held only when it is first in every queue, and giving up
//! revokes the lease, which removes every key at once. The fencing token of a set is the shared
//! revision: for each resource of the set, it is larger than that of every earlier holder of
//! that resource, alone or in another set. A transaction holds at most
//! [`timing::MAX_TXN_OPS`] operations (etcd's default `--max-txn-ops`), which bounds a set to
//! [`timing::MAX_RESOURCES`] resources; a longer list is refused before any I/O.
//!
//! The lease is the lock's lifetime: revoking it (release; for a mutex, deleting the key, see
//! "Leases carried over") or letting it expire deletes the keys and wakes the next waiters.
//! While waiting, the lease is renewed every third of its TTL.
//! A wait split over several calls ([`crate::Waiter`]) keeps its keys
//! between the calls, so it keeps its place in line; if no call comes back, the lease expires
//! after the TTL.
//!
//! Several URLs name the members of one cluster, not independent nodes: consensus already
//! makes the cluster's answer the majority's, so every call yields one vote for the cluster.
//! Requests get at least [`timing::MIN_REQUEST_TIMEOUT`], since a write waits for a raft round.
//! Requests are sent with etcd's "require leader" flag, so a member cut off from the majority
//! refuses instead of answering from stale state.
//! Each request goes to one member, the current one (`members.rs`); a request that member
//! fails, lets time out or refuses (no leader) moves the cluster on to the next member for the
//! next request. Nothing is re-sent inside a call: a grant or a create transaction whose answer
//! was lost may have been applied, and the lease it made is revoked (or expires by TTL).
//!
//! URLs: `etcd://[user:password@]host:port` (the login, if given, is shared by all members).
//! `etcds://` takes TLS (with the `tls` feature: etcd-client's rustls and ring) and the CA and
//! client certificate of [`crate::TlsConfig`]; without the feature it is refused with
//! [`Error::InvalidConfig`].
//!
//! Cancellation: a cancelled acquisition revokes its lease from a background task when a tokio
//! runtime is running; otherwise its keys stay in the queues, delaying the waiters behind them,
//! until the lease expires after the TTL. Those tasks are counted (`Members::revokes`):
//! `Client::close` and the drop of the program's last handle wait for them within the bound
//! they give Redis's releases (`cancel::etcd_close_waits_for_the_revokes_of_calls_cut_short`).

mod election;
mod endpoints;
pub(crate) mod keys;
mod members;
mod rwlock;
mod semaphore;
mod timing;
#[cfg(feature = "tls")]
mod tls;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions,
};

use crate::config::Config;
use crate::error::{Error, LostCause, Result};
use crate::keepalive::{Engine, Extends, GuardState, Outcome, Stop};
use crate::node::NodeAddr;
use crate::pure::extension::{Attempt, Schedule};
use crate::pure::vote::{NodeVote, VoteOutcome, Votes};
use crate::telemetry::{self, ResourceLabel};

pub(crate) use self::election::LeaderWatch;
use self::endpoints::Endpoints;
use self::members::{Member, Members};
use self::rwlock::Side;
pub(crate) use self::semaphore::PermitKeys;

/// One etcd cluster, reached through one client per member (each connected on first use;
/// requests go to one member at a time, `members.rs`). Boxed, so that the
/// client's backend enum stays small for the Redis backend.
#[derive(Debug)]
pub(crate) struct EtcdBackend(Box<Cluster>);

impl std::ops::Deref for EtcdBackend {
    type Target = Cluster;

    fn deref(&self) -> &Cluster {
        &self.0
    }
}

/// The state and the operations of an [`EtcdBackend`].
pub(crate) struct Cluster {
    /// The members' clients and the current member; shared with pending leases, which revoke
    /// through whichever member answers.
    members: Arc<Members>,
    request_timeout: Duration,
    ttl: Duration,
    lease_secs: i64,
    drift: Duration,
    /// Places in line kept between the calls of a wait split over several calls: the
    /// resources and the entry. Their leases are not renewed here; an abandoned one expires.
    parked: std::sync::Mutex<Vec<(Vec<String>, Entry)>>,
    /// The client's extension engine for its etcd locks (`keepalive.rs`).
    engine: Engine<EtcdHeld>,
    /// Whether metrics carry the resource (`telemetry.rs`).
    resource_label: bool,
    /// The value of our keys: the holder label as text, or empty (`holder.rs`).
    holder: Vec<u8>,
    /// Leases whose locks were released, for the next locks (see "Leases carried over").
    spares: std::sync::Mutex<Vec<Spare>>,
    /// When this client's last release of a lock returned ([`timing::in_a_run`]).
    last_release: std::sync::Mutex<Option<Instant>>,
}

/// A lease that carried a lock now released, and holds no key: the next lock of one resource
/// may ride it instead of granting a new one.
#[derive(Debug, Clone, Copy)]
struct Spare {
    lease: i64,
    ttl: Duration,
    /// When the request that granted the lease (or renewed it for a waiter in line, or at the
    /// release of the lock it carried) was sent; an extension of a lock on it is not counted
    /// (it would only make the lease live longer).
    renewed: Instant,
    /// The number of the lease's next use, for its next key ([`keys::carried_key`]).
    next_use: u32,
}

/// How a lock on etcd ends, and what its token acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The lease is the lock's alone: revoking it deletes the keys.
    Revoke,
    /// The lease may carry other locks before and after this one: the lock is its key, which
    /// release deletes (only while it is the key this lock created), and an extension renews
    /// the lease and then checks that the key is still there. `next_use`: the lease is ours to
    /// carry the next lock, with this use number; `None` for a lock named by a token.
    DeleteKey { next_use: Option<u32> },
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("lease_secs", &self.lease_secs)
            .field("request_timeout", &self.request_timeout)
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

/// A lock held on etcd.
#[derive(Debug, Clone)]
pub(crate) struct EtcdHeld {
    /// The (first) resource, for error messages.
    pub(crate) resource: String,
    /// The lock key of the first resource, `fencelock/<resource>/<lease id hex>` (what
    /// `Lock::owner` shows).
    pub(crate) key: String,
    /// The lease the keys are attached to.
    pub(crate) lease: i64,
    /// The keys' create revision (one for all): the fencing token.
    pub(crate) revision: u64,
    /// Local validity deadline: send time of the last grant or renewal + TTL - drift.
    pub(crate) deadline: Instant,
    /// The cluster's answer (one vote).
    pub(crate) votes: Votes,
    /// The TTL etcd granted (whole seconds, at least the configured TTL).
    pub(crate) ttl: Duration,
    /// A read lock of a read-write lock: its revision is its place in line, not a fencing
    /// token.
    pub(crate) shared: bool,
    /// A read lock: the last write lock's token, as recorded when it was granted.
    pub(crate) last_writer: Option<u64>,
    /// When the request that granted or last renewed the lease before the grant was sent.
    pub(crate) renewed: Instant,
    /// How the lock ends.
    pub(crate) ending: Ending,
    /// The acquisition started within a tenth of the TTL after its client's last release
    /// ([`timing::in_a_run`]): released late, its lease is renewed for the next lock rather
    /// than revoked ([`timing::leave`]).
    pub(crate) in_a_run: bool,
}

/// Why a request did not do its job, before it is turned into an [`Error`] for a resource.
#[derive(Debug)]
struct Fail {
    outcome: VoteOutcome,
    /// The lease (and with it our key) no longer exists: a definite answer, not a failure.
    lease_gone: bool,
}

impl Fail {
    fn failed(why: impl Into<String>) -> Fail {
        let why = why.into();
        let error = crate::tls::handshake_failure(&why)
            .unwrap_or_else(|| crate::pure::node_error::NodeError::other(why));
        Fail {
            outcome: VoteOutcome::Failed(error),
            lease_gone: false,
        }
    }

    fn lease_gone() -> Fail {
        Fail {
            outcome: VoteOutcome::NotHeld,
            lease_gone: true,
        }
    }
}

/// Our place in the queues: our key in each (in the order of the resources), their lease and
/// their create revision.
#[derive(Debug, Clone)]
struct Entry {
    keys: Vec<String>,
    lease: i64,
    revision: i64,
    ttl: Duration,
    /// When the request that last granted or renewed the lease was sent.
    renewed: Instant,
    side: Side,
    /// A reader's last look at the writer record (0 when there is none).
    last_writer: u64,
    /// The number of the lease's use when the lease may carry other locks (a key of
    /// [`keys::carried_key`]); `None` when it is this entry's alone.
    lease_use: Option<u32>,
}

/// The state of one `acquire` that outlives its timeout (see [`Cluster::wait_for_turn`]).
#[derive(Debug, Default)]
struct WaitState {
    /// The lease to revoke if the wait ends without the lock.
    pending: PendingLease,
    /// Our place in the queues, if any.
    place: Option<Entry>,
    /// Looks at the queues.
    attempts: u32,
    /// The latest obstacle.
    last: Option<Error>,
    /// A writer (or mutex) or a reader.
    side: Side,
    /// Whether we stood in line behind another key (the wait metric).
    waited: bool,
    /// When the key ahead of ours went, for the hand-over metric.
    woken: Option<Instant>,
    /// Whether the lock may ride a spare lease and leave its lease for the next one (a mutex
    /// or a writer of one resource; see "Leases carried over").
    carry: bool,
}

/// Where a join (or a place taken back) left us.
enum Place {
    /// First in every queue: the lock.
    Held(EtcdHeld),
    /// In line behind others.
    Waiting(Entry),
    /// Not in line (the cluster failed, or the lock came too late): try again.
    Retry,
}

/// What a renewal of our place's lease found.
enum Renewal {
    Renewed,
    /// The lease expired: our place is gone.
    Gone,
    /// The cluster did not answer; the failure is the latest obstacle.
    Failed,
}

/// What a look at the queue found.
enum Turn {
    /// Our key is the oldest (a reader: no writer's key is older): the lock is ours. A reader
    /// read the writer record with it.
    Head { last_writer: u64 },
    /// This key is ahead of ours (just ahead, in the first queue where one is); the read was at
    /// this revision.
    Behind { key: String, revision: i64 },
    /// Our keys are gone (the lease expired while we could not renew it).
    Gone,
}

impl EtcdBackend {
    /// Registers the lock with the client's extension engine; the returned [`Stop`] takes it
    /// out.
    pub(crate) fn keep_alive_held(
        self: &Arc<Self>,
        held: &EtcdHeld,
        state: Arc<GuardState>,
        schedule: Schedule,
    ) -> Stop {
        self.engine
            .register(self, &held.resource, held.clone(), state, schedule)
    }

    /// A backend for the members at `addrs`. No I/O: the client connects on first use.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for `etcds://` URLs (no TLS in this build), URLs with a path,
    /// differing credentials, or a TTL above etcd's maximum lease.
    pub(crate) fn new(addrs: Vec<NodeAddr>, config: &Config) -> Result<EtcdBackend> {
        let endpoints = Endpoints::parse(&addrs)?;
        let lease_secs = timing::lease_secs(config.ttl()).ok_or_else(|| {
            Error::config(
                "ttl",
                format!(
                    "{:?} is longer than the longest etcd lease ({} s)",
                    config.ttl(),
                    timing::MAX_LEASE_SECS
                ),
            )
        })?;
        let names = addrs.iter().map(NodeAddr::redacted).collect::<Vec<_>>();
        let tls = if addrs
            .iter()
            .any(|a| a.scheme() == crate::node::Scheme::EtcdTls)
        {
            Some(config.tls().load()?)
        } else {
            None
        };
        let request_timeout = timing::request_timeout(config.node_timeout());
        let members = Members::new(
            endpoints,
            names,
            config.connect_timeout(),
            config.connect_timeout().max(request_timeout),
            tls,
        );
        Ok(EtcdBackend(Box::new(Cluster {
            members: Arc::new(members),
            request_timeout,
            ttl: config.ttl(),
            lease_secs,
            drift: config.drift(),
            parked: std::sync::Mutex::default(),
            engine: Engine::default(),
            spares: std::sync::Mutex::default(),
            last_release: std::sync::Mutex::default(),
            resource_label: config.metrics_resource_label(),
            holder: config
                .holder()
                .map(|h| h.to_string().into_bytes())
                .unwrap_or_default(),
        })))
    }
}

impl Extends for EtcdBackend {
    type Lock = EtcdHeld;

    /// Renews every lease of the batch once, together.
    async fn extend_batch(
        self: Arc<Self>,
        locks: Vec<Arc<EtcdHeld>>,
        budget: Duration,
    ) -> Vec<Outcome> {
        let renewals = locks.iter().map(|held| self.extend_once(held, budget));
        futures_util::future::join_all(renewals)
            .await
            .into_iter()
            .map(|(outcome, _)| outcome)
            .collect()
    }
}

impl Cluster {
    /// Waits at most `bound` for the lease revokes of calls cut short ([`PendingLease`]);
    /// whether none is left. `Client::close` calls it, as it waits for Redis's releases.
    pub(crate) async fn settle_releases(&self, bound: Duration) -> bool {
        self.members.settle_revokes(bound).await
    }

    /// Lease revokes of calls cut short still running in the background.
    pub(crate) fn background_pending(&self) -> usize {
        self.members.background_revokes()
    }

    /// One attempt: joins the queues of `resources` and keeps the place only if it is the
    /// first in all of them.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for more than [`timing::MAX_RESOURCES`] resources (before any
    /// I/O); [`Error::Contention`] when another owner holds one of the resources or waits ahead
    /// of us; [`Error::Unavailable`] when the cluster did not answer (no leader, members down);
    /// [`Error::TooSlow`] when the answer came too late to leave any validity. Whatever the
    /// error, our lease has been revoked (or, if that failed too, expires by TTL).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a cancelled attempt revokes its lease from a background task if a tokio
    /// runtime is running, else the lease (and our place in the queues) expires by TTL.
    pub(crate) async fn try_acquire(&self, resources: &[String]) -> Result<EtcdHeld> {
        self.try_acquire_as(resources, Side::Exclusive).await
    }

    /// [`Cluster::try_acquire`] as a writer or a reader (`rwlock.rs`).
    async fn try_acquire_as(&self, resources: &[String], side: Side) -> Result<EtcdHeld> {
        check_count(resources)?;
        let started = Instant::now();
        let mut pending = PendingLease::default();
        let carry = carries(resources, side);
        let result = self
            .try_once(resources, &mut pending, started, side, carry)
            .await;
        self.settle_pending(&mut pending, result.is_ok()).await;
        result
    }

    /// Waits up to `wait` for the lock on `resources`, in queue (creation) order.
    ///
    /// `resume`: the wait is one call of several (see
    /// [`crate::Waiter`]): it takes back the place a previous call
    /// for the same resources left, and if `wait` runs out it leaves its keys in the queues
    /// for the next call (their lease expires after the TTL if none comes).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] as for [`Cluster::try_acquire`]; [`Error::Timeout`] when `wait`
    /// ran out, holding the last obstacle (contention, or the cluster's failure); our keys are
    /// removed from the queues unless `resume`. Failures of the cluster are retried until then.
    ///
    /// # Cancel safety
    ///
    /// As [`Cluster::try_acquire`].
    pub(crate) async fn acquire(
        &self,
        resources: &[String],
        wait: Duration,
        resume: bool,
    ) -> Result<EtcdHeld> {
        self.acquire_as(resources, wait, resume, Side::Exclusive)
            .await
    }

    /// [`Cluster::acquire`] as a writer or a reader (`rwlock.rs`).
    async fn acquire_as(
        &self,
        resources: &[String],
        wait: Duration,
        resume: bool,
        side: Side,
    ) -> Result<EtcdHeld> {
        check_count(resources)?;
        let resource = resources[0].as_str();
        let started = Instant::now();
        let mut w = WaitState {
            place: if resume { self.unpark(resources) } else { None },
            side,
            carry: carries(resources, side),
            ..WaitState::default()
        };
        let outcome = tokio::time::timeout(wait, self.wait_for_turn(resources, &mut w)).await;
        match (&outcome, w.place.take()) {
            (Err(_elapsed), Some(entry)) if resume => {
                // Keep the lease (and the keys) for the next call instead of revoking it.
                w.pending.lease = None;
                self.park(resources, entry);
            }
            _ => {
                self.settle_pending(&mut w.pending, matches!(outcome, Ok(Ok(_))))
                    .await;
            }
        }
        if w.waited {
            let label = ResourceLabel::of(self.resource_label, resource);
            let what = match &outcome {
                Ok(Ok(_)) => "granted",
                Ok(Err(_)) => "error",
                Err(_) => "timeout",
            };
            telemetry::waited(&label, started.elapsed(), what);
            if let (Ok(Ok(_)), Some(at)) = (&outcome, w.woken) {
                telemetry::handed_over(&label, at.elapsed());
            }
        }
        match outcome {
            Ok(result) => result,
            Err(_elapsed) => Err(Error::Timeout {
                resource: resource.to_string(),
                attempts: w.attempts.max(1),
                last: Box::new(w.last.unwrap_or_else(|| {
                    self.error_for(
                        resource,
                        Fail::failed("no answer from the cluster"),
                        started,
                    )
                })),
            }),
        }
    }

    /// Takes the place a previous call left for `resources`, if its lease may still live.
    fn unpark(&self, resources: &[String]) -> Option<Entry> {
        let mut parked = self
            .parked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let i = parked.iter().position(|(r, _)| r.as_slice() == resources)?;
        let (_, entry) = parked.swap_remove(i);
        (entry.renewed.elapsed() < entry.ttl).then_some(entry)
    }

    /// Leaves a place for the next call; forgets places whose leases have surely expired.
    fn park(&self, resources: &[String], entry: Entry) {
        let mut parked = self
            .parked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        parked.retain(|(r, e)| e.renewed.elapsed() < e.ttl && r.as_slice() != resources);
        parked.push((resources.to_vec(), entry));
    }

    /// Renews the lease before `deadline` (the lock's validity deadline), under the extension
    /// engine's rule: a renewal that fails for a passing reason is retried within the validity
    /// left.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lease no longer exists, or when no renewal succeeded before
    /// `deadline` (past it the lock may be someone else's).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a cancelled renewal leaves the lease as it was or renewed.
    pub(crate) async fn extend(
        &self,
        held: &EtcdHeld,
        deadline: Instant,
    ) -> Result<(Instant, Votes)> {
        let retry = crate::pure::extension::retry_delay(held.ttl.min(self.ttl));
        crate::keepalive::extend_within(deadline, retry, |budget| self.extend_once(held, budget))
            .await
            .map_err(|(cause, votes)| Error::lost(held.resource.clone(), votes, cause))
    }

    /// One renewal of the lease within `budget`: what it found, with the cluster's vote.
    async fn extend_once(&self, held: &EtcdHeld, budget: Duration) -> (Outcome, Votes) {
        let started = Instant::now();
        if budget.is_zero() {
            let outcome = Outcome::failed(
                Attempt::TooLate,
                "the validity ran out before a renewal was sent",
            );
            return (outcome, Votes::default());
        }
        let renewed = self.renew_held(held, budget, started).await;
        match renewed {
            Ok(sent) => {
                let drift = timing::drift_for(held.ttl, self.ttl, self.drift);
                let votes = self.votes(VoteOutcome::Granted, started.elapsed());
                let outcome = match timing::deadline(sent, held.ttl, drift) {
                    Some(deadline) => Outcome::extended(deadline),
                    None => Outcome::failed(Attempt::TooLate, "the renewal left no validity"),
                };
                (outcome, votes)
            }
            Err(fail) => {
                tracing::debug!(key = %held.key, outcome = %fail.outcome, "lease renewal failed");
                let attempt = if fail.lease_gone {
                    Attempt::Impossible
                } else {
                    Attempt::Failed
                };
                let why = fail.outcome.to_string();
                (
                    Outcome::failed(attempt, why),
                    self.votes(fail.outcome, started.elapsed()),
                )
            }
        }
    }

    /// Revokes the lease, which deletes the key and wakes the next waiter; a lock on a lease
    /// that may carry others ([`Ending::DeleteKey`]) deletes its key instead, and leaves the
    /// lease for the next lock, renewed first when it is too old to carry one as it stands,
    /// or revokes it when it is that old and the lock was a lone one ([`timing::leave`]).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lease was already gone (it expired: work done since the
    /// validity deadline was unprotected), or the key (released by its token elsewhere);
    /// [`Error::Unavailable`] when the cluster did not answer within two request timeouts (the
    /// lease then expires by TTL), or when a try got no answer and the next found the key or
    /// the lease gone: `Ok` only when the answer of the try that deleted the key (or revoked
    /// the lease) came back, since a lock released by its token or expired looks the same
    /// afterwards (`a_release_that_retried_does_not_report_a_lock_deleted_by_its_token_released`,
    /// tests/etcd.rs; mutant `etcd-retried-release-trusts-gone`).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a cancelled release leaves the lease to expire by TTL.
    pub(crate) async fn release(&self, held: &EtcdHeld) -> Result<()> {
        let started = Instant::now();
        let end = started + 2 * self.request_timeout;
        let resource = held.resource.clone();
        // A lease ours to carry over: kept, renewed and kept, or (a lone lock released late)
        // revoked like a lease of its own, after a look at the key.
        let carry = match held.ending {
            Ending::DeleteKey {
                next_use: Some(next_use),
            } => Some((
                timing::leave(held.renewed.elapsed(), held.ttl, held.in_a_run),
                next_use,
            )),
            _ => None,
        };
        let ending = match carry {
            Some((timing::Leave::Revoke, _)) => Ending::Revoke,
            _ => held.ending,
        };
        // Whether an earlier try failed: it may have been applied all the same (its answer
        // lost), and then a key or lease found gone may be our own doing, or not.
        let mut unanswered = false;
        loop {
            let limit = end
                .saturating_duration_since(Instant::now())
                .max(timing::RETRY_DELAY);
            let ended = match ending {
                Ending::Revoke => self.revoke_if_ours(held, limit).await,
                Ending::DeleteKey { .. } => match self.delete_key(held, limit).await {
                    // The lease expired, and the key with it.
                    Err(fail) if fail.lease_gone => Ok(false),
                    other => other,
                },
            };
            match ended {
                Ok(true) => {
                    self.note_release();
                    self.leave_lease(held, carry, true, end).await;
                    return Ok(());
                }
                Ok(false) if unanswered => {
                    // The key (or the lease) is gone after a try whose answer never came: that
                    // try may have released it, or the lock was lost before (its key deleted by
                    // its token, its lease revoked or expired) while its holder worked. Nothing
                    // etcd keeps tells the two apart, so the release may not say `Ok`.
                    self.note_release();
                    self.leave_lease(held, carry, false, end).await;
                    return Err(Error::Unavailable {
                        resource,
                        votes: self.votes(Fail::failed(UNTOLD_RELEASE).outcome, started.elapsed()),
                    });
                }
                Ok(false) => {
                    self.note_release();
                    self.leave_lease(held, carry, false, end).await;
                    return Err(Error::lost(
                        resource,
                        self.votes(VoteOutcome::NotHeld, started.elapsed()),
                        LostCause::NotHeld,
                    ));
                }
                Err(fail) if Instant::now() + timing::RETRY_DELAY >= end => {
                    return Err(Error::Unavailable {
                        resource,
                        votes: self.votes(fail.outcome, started.elapsed()),
                    })
                }
                Err(_) => {
                    unanswered = true;
                    tokio::time::sleep(timing::RETRY_DELAY).await;
                }
            }
        }
    }

    /// The lock that `token` (a lock key, as `Lock::owner` shows it) names for `resource`, to
    /// release or extend it from another process (`fencelock release --owner`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when the token is not a key of `resource`'s queue.
    pub(crate) fn held_by_token(&self, resource: &str, token: &str) -> Result<EtcdHeld> {
        let prefix = keys::queue_prefix(resource);
        let (lease, lease_use) = keys::parse_key(&prefix, token).ok_or_else(|| {
            Error::config(
                "token",
                format!("on etcd a token is the lock key `fencelock acquire` printed, {prefix}<16 hex digits>[.<use>]; this one is not a key of {resource:?}"),
            )
        })?;
        Ok(EtcdHeld {
            resource: resource.to_string(),
            key: token.to_string(),
            lease,
            revision: 0,
            deadline: Instant::now() + self.request_timeout,
            votes: Votes::default(),
            ttl: self.ttl,
            shared: false,
            last_writer: None,
            renewed: Instant::now(),
            // A key with a use number is one lock of a lease that may carry others: only the
            // key is this token's.
            ending: match lease_use {
                Some(_) => Ending::DeleteKey { next_use: None },
                None => Ending::Revoke,
            },
            in_a_run: false,
        })
    }

    async fn try_once(
        &self,
        resources: &[String],
        pending: &mut PendingLease,
        started: Instant,
        side: Side,
        carry: bool,
    ) -> Result<EtcdHeld> {
        let resource = resources[0].as_str();
        let (entry, head) = self
            .enqueue(resources, pending, side, carry)
            .await
            .map_err(|f| self.error_for(resource, f, started))?;
        if !head {
            return Err(Error::Contention {
                resource: resource.to_string(),
                votes: self.votes(VoteOutcome::HeldByOther, started.elapsed()),
            });
        }
        self.held(resource, &entry, started)
    }

    /// The queue loop of `acquire`; only returns when the lock is ours or on an error that
    /// waiting will not fix. `w` outlives the call when `acquire`'s timeout cancels it: our
    /// place (kept up to date, so that a timed-out call can leave it to the next), the count of
    /// looks at the queues and the latest obstacle, for the timeout error.
    async fn wait_for_turn(&self, resources: &[String], w: &mut WaitState) -> Result<EtcdHeld> {
        let started = Instant::now();
        loop {
            w.attempts += 1;
            let entry = match self.take_place(resources, w, started).await {
                Place::Held(held) => return Ok(held),
                Place::Waiting(entry) => entry,
                Place::Retry => continue,
            };
            if let Some(held) = self.wait_in_line(resources, w, entry, started).await {
                return Ok(held);
            }
            // Our place is gone: join the queues again.
        }
    }

    /// Takes back the place a previous call left, or joins the queues; the lock, if our place
    /// is first at once.
    async fn take_place(&self, resources: &[String], w: &mut WaitState, started: Instant) -> Place {
        let resource = resources[0].as_str();
        if let Some(entry) = w.place.take() {
            return match self.client().await {
                Ok(client) => {
                    drop(client);
                    w.pending
                        .arm(&self.members, entry.lease, self.request_timeout);
                    // A place taken back: look at the queues before anything else.
                    Place::Waiting(entry)
                }
                Err(fail) => {
                    w.place = Some(entry);
                    w.last = Some(self.error_for(resource, fail, started));
                    tokio::time::sleep(timing::RETRY_DELAY).await;
                    Place::Retry
                }
            };
        }
        let (entry, head) = match self
            .enqueue(resources, &mut w.pending, w.side, w.carry)
            .await
        {
            Ok(joined) => joined,
            Err(fail) => {
                w.last = Some(self.error_for(resource, fail, started));
                // A failed join may still have written our keys: drop them with their lease.
                self.settle_pending(&mut w.pending, false).await;
                tokio::time::sleep(timing::RETRY_DELAY).await;
                return Place::Retry;
            }
        };
        if head {
            return match self.held(resource, &entry, started) {
                Ok(held) => Place::Held(held),
                Err(e) => {
                    w.last = Some(e);
                    self.settle_pending(&mut w.pending, false).await;
                    Place::Retry
                }
            };
        }
        w.last = Some(self.contention(resource, started));
        w.waited = true;
        Place::Waiting(entry)
    }

    /// Waits in line from `entry` on: renews the lease when due, looks at the queues, and
    /// watches the key just ahead until it goes. The lock once our key is the oldest; `None`
    /// once our place is gone (the lease expired while we could not renew it).
    async fn wait_in_line(
        &self,
        resources: &[String],
        w: &mut WaitState,
        mut entry: Entry,
        started: Instant,
    ) -> Option<EtcdHeld> {
        let resource = resources[0].as_str();
        w.place = Some(entry.clone());
        let renew_every = timing::renew_interval(entry.ttl);
        loop {
            if entry.renewed.elapsed() >= renew_every {
                match self.renew_place(w, &mut entry, resource, started).await {
                    Renewal::Renewed => {}
                    Renewal::Gone => {
                        tracing::debug!(key = %entry.keys[0], "lease expired while waiting; joining the queue again");
                        return None;
                    }
                    Renewal::Failed => continue,
                }
            }
            w.attempts += 1;
            let turn = match self.look(resources, &entry).await {
                Ok(turn) => turn,
                Err(fail) => {
                    w.last = Some(self.error_for(resource, fail, started));
                    tokio::time::sleep(timing::RETRY_DELAY).await;
                    continue;
                }
            };
            match turn {
                Turn::Head { last_writer } => {
                    entry.last_writer = last_writer;
                    // Renew now so that the lock starts with a full TTL, not what is left of
                    // the lease since the last renewal.
                    match self.renew_place(w, &mut entry, resource, started).await {
                        Renewal::Renewed => {}
                        Renewal::Gone => return None,
                        Renewal::Failed => continue,
                    }
                    match self.held(resource, &entry, started) {
                        Ok(held) => return Some(held),
                        Err(e) => w.last = Some(e),
                    }
                }
                Turn::Gone => {
                    w.place = None;
                    self.settle_pending(&mut w.pending, false).await;
                    return None;
                }
                Turn::Behind { key, revision } => {
                    w.last = Some(self.contention(resource, started));
                    let wake = entry.renewed + renew_every;
                    w.woken = None;
                    w.waited = true;
                    match self.wait_delete(&key, false, revision, wake).await {
                        Ok(deleted) => w.woken = deleted.then(Instant::now),
                        Err(fail) => {
                            w.last = Some(self.error_for(resource, fail, started));
                            tokio::time::sleep(timing::RETRY_DELAY).await;
                        }
                    }
                }
            }
        }
    }

    /// Renews the lease of our place in line. A lease that is gone drops the place (with its
    /// keys); a failure is kept as the latest obstacle, after the retry delay.
    async fn renew_place(
        &self,
        w: &mut WaitState,
        entry: &mut Entry,
        resource: &str,
        started: Instant,
    ) -> Renewal {
        match self.keep_alive(entry.lease, self.request_timeout).await {
            Ok(sent) => {
                entry.renewed = sent;
                w.place = Some(entry.clone());
                Renewal::Renewed
            }
            Err(fail) if fail.lease_gone => {
                w.place = None;
                self.settle_pending(&mut w.pending, false).await;
                Renewal::Gone
            }
            Err(fail) => {
                w.last = Some(self.error_for(resource, fail, started));
                tokio::time::sleep(timing::RETRY_DELAY).await;
                Renewal::Failed
            }
        }
    }

    /// Contention: another owner holds a resource or waits ahead of us.
    fn contention(&self, resource: &str, started: Instant) -> Error {
        Error::Contention {
            resource: resource.to_string(),
            votes: self.votes(VoteOutcome::HeldByOther, started.elapsed()),
        }
    }

    /// Grants a lease (or, with `carry`, takes a spare one) and creates our key in the queue of
    /// every resource, in one transaction; returns the entry and whether each of our keys is
    /// the oldest of its queue (the lock is ours).
    async fn enqueue(
        &self,
        resources: &[String],
        pending: &mut PendingLease,
        side: Side,
        carry: bool,
    ) -> Result<(Entry, bool), Fail> {
        if let Some(spare) = carry.then(|| self.take_spare()).flatten() {
            match self
                .join(resources, pending, side, carry, Some(spare))
                .await
            {
                // The spare lease is gone after all (revoked, or etcd's clock ran ahead of
                // ours): a new lease then.
                Err(fail) if fail.lease_gone => {
                    tracing::debug!(
                        lease = spare.lease,
                        "a spare lease was gone; granting a new one"
                    );
                }
                joined => return joined,
            }
        }
        self.join(resources, pending, side, carry, None).await
    }

    /// [`Cluster::enqueue`] on `spare`, or on a lease granted now.
    async fn join(
        &self,
        resources: &[String],
        pending: &mut PendingLease,
        side: Side,
        carry: bool,
        spare: Option<Spare>,
    ) -> Result<(Entry, bool), Fail> {
        let client = self.client().await?;
        let (lease, ttl, sent, lease_use) = match spare {
            Some(spare) => (spare.lease, spare.ttl, spare.renewed, Some(spare.next_use)),
            None => {
                let sent = Instant::now();
                let grant = self
                    .call(
                        &client,
                        self.request_timeout,
                        client.lease_client().grant(self.lease_secs, None),
                    )
                    .await?;
                if !grant.error().is_empty() {
                    return Err(Fail::failed(format!("lease grant: {}", grant.error())));
                }
                if grant.ttl() <= 0 {
                    return Err(Fail::failed("lease grant: no TTL granted"));
                }
                let ttl = Duration::from_secs(grant.ttl() as u64);
                (grant.id(), ttl, sent, carry.then_some(0))
            }
        };
        pending.arm(&self.members, lease, self.request_timeout);
        let prefixes: Vec<String> = resources.iter().map(|r| keys::queue_prefix(r)).collect();
        let keys: Vec<String> = prefixes
            .iter()
            .map(|p| match lease_use {
                Some(n) => keys::carried_key(p, lease, n),
                None => side.key(p, lease),
            })
            .collect();
        let oldest = |p: &str| {
            let (from, options) = side.ahead(p);
            let options = options
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(1)
                .with_keys_only();
            TxnOp::get(from, Some(options))
        };
        let reads = || {
            std::iter::once(TxnOp::get(keys[0].clone(), None))
                .chain(prefixes.iter().map(|p| oldest(p)))
                .chain(side.record_read(&resources[0]))
        };
        // The keys are named after a lease that was just created, or after a use of a spare
        // lease that no key had, so they cannot exist; the comparisons only make a repeated
        // request harmless.
        let txn = Txn::new()
            .when(
                keys.iter()
                    .map(|k| Compare::create_revision(k.clone(), CompareOp::Equal, 0))
                    .collect::<Vec<_>>(),
            )
            .and_then(
                keys.iter()
                    .map(|k| {
                        TxnOp::put(
                            k.clone(),
                            self.holder.clone(),
                            Some(PutOptions::new().with_lease(lease)),
                        )
                    })
                    .chain(reads())
                    .collect::<Vec<_>>(),
            )
            .or_else(reads().collect::<Vec<_>>());
        let resp = self
            .call(&client, self.request_timeout, client.kv_client().txn(txn))
            .await?;
        let gets = gets(&resp);
        let Some((mine, rest)) = gets.split_first() else {
            return Err(Fail::failed("unexpected transaction response"));
        };
        let Some((firsts, record)) = side.split_record(rest, resources.len()) else {
            return Err(Fail::failed("unexpected transaction response"));
        };
        let Some(mine) = mine.kvs().first() else {
            // Only possible if the lease expired between the grant and the transaction.
            return Err(Fail::failed(
                "the lock key vanished right after it was written",
            ));
        };
        // One transaction, one revision: every key we created has this create revision.
        let revision = mine.create_revision();
        let head = firsts
            .iter()
            .all(|first| side.is_head(first.kvs().first(), revision));
        Ok((
            Entry {
                keys,
                lease,
                revision,
                ttl,
                renewed: sent,
                side,
                last_writer: rwlock::record_value(record)?,
                lease_use,
            },
            head,
        ))
    }

    /// Looks at the queues: are our keys still there, and which key is ahead of ours (the one
    /// just ahead, in the first queue that has one)?
    ///
    /// `entry.revision - 1` is at least 1 (a store's first write is revision 2), which matters
    /// because a `max_create_revision` of 0 would mean "no bound".
    async fn look(&self, resources: &[String], entry: &Entry) -> Result<Turn, Fail> {
        let client = self.client().await?;
        let txn = Txn::new()
            .when(
                entry
                    .keys
                    .iter()
                    .map(|k| Compare::create_revision(k.clone(), CompareOp::Equal, entry.revision))
                    .collect::<Vec<_>>(),
            )
            .and_then(
                resources
                    .iter()
                    .map(|r| {
                        let (from, ahead) = entry.side.ahead(&keys::queue_prefix(r));
                        let ahead = ahead
                            .with_max_create_revision(entry.revision - 1)
                            .with_sort(SortTarget::Create, SortOrder::Descend)
                            .with_limit(1)
                            .with_keys_only();
                        TxnOp::get(from, Some(ahead))
                    })
                    .chain(entry.side.record_read(&resources[0]))
                    .collect::<Vec<_>>(),
            );
        let resp = self
            .call(&client, self.request_timeout, client.kv_client().txn(txn))
            .await?;
        if !resp.succeeded() {
            return Ok(Turn::Gone);
        }
        let revision = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| Fail::failed("response without a header"))?;
        let gets = gets(&resp);
        let Some((queues, record)) = entry.side.split_record(&gets, resources.len()) else {
            return Err(Fail::failed("unexpected transaction response"));
        };
        let Some(ahead) = queues.iter().find_map(|g| g.kvs().first()) else {
            return Ok(Turn::Head {
                last_writer: rwlock::record_value(record)?,
            });
        };
        Ok(Turn::Behind {
            key: String::from_utf8_lossy(ahead.key()).into_owned(),
            revision,
        })
    }

    /// Waits until `key` (with `prefix`: any key under it) is deleted after `revision`, or until
    /// `wake` (time to renew the lease and look again). Returns whether a delete was seen (a
    /// wake-up, not a time to look again).
    ///
    /// A member that stops answering keeps its watch streams open and silent, so the watch
    /// asks the member for its progress every request timeout: no answer (of any kind) within
    /// the next one is the member's failure, which moves the cluster on, like a broken
    /// stream; the caller then looks again, on the next member.
    async fn wait_delete(
        &self,
        key: &str,
        prefix: bool,
        revision: i64,
        wake: Instant,
    ) -> Result<bool, Fail> {
        let client = self.client().await?;
        let mut options = WatchOptions::new()
            .with_start_revision(revision + 1)
            .with_filters([WatchFilterType::NoPut]);
        if prefix {
            options = options.with_prefix();
        }
        let wake = tokio::time::Instant::from_std(wake);
        let member_failed = |fail: Fail| {
            self.members.observe(client.index, false, &fail.outcome);
            fail
        };
        let timed_out = || Fail {
            outcome: VoteOutcome::TimedOut,
            lease_gone: false,
        };
        let mut watcher = client.watch_client();
        let watch = watcher.watch(key, Some(options));
        let opened = tokio::time::Instant::now() + self.request_timeout;
        let mut stream = match tokio::time::timeout_at(opened.min(wake), watch).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(member_failed(Fail::failed(describe(&e)))),
            Err(_) if opened < wake => return Err(member_failed(timed_out())),
            Err(_) => return Ok(false),
        };
        let mut check = tokio::time::interval_at(opened, self.request_timeout);
        let mut asked = false;
        loop {
            let message = tokio::select! {
                message = stream.message() => Some(message),
                () = tokio::time::sleep_until(wake) => return Ok(false),
                _ = check.tick() => None,
            };
            let Some(message) = message else {
                if asked {
                    // Not even the progress answer came: the member does not answer.
                    return Err(member_failed(timed_out()));
                }
                asked = true;
                if let Err(e) = stream.request_progress().await {
                    return Err(member_failed(Fail::failed(describe(&e))));
                }
                continue;
            };
            asked = false;
            match message {
                Ok(Some(resp)) => {
                    let deleted = resp
                        .events()
                        .iter()
                        .any(|e| e.event_type() == EventType::Delete);
                    // A cancelled watch (compaction, lost leader) also means: look again.
                    if deleted || resp.canceled() {
                        return Ok(deleted);
                    }
                }
                Ok(None) => return Ok(false),
                Err(e) => return Err(member_failed(Fail::failed(describe(&e)))),
            }
        }
    }

    /// Renews a lease once; returns when the renewal was sent.
    async fn keep_alive(&self, lease: i64, limit: Duration) -> Result<Instant, Fail> {
        let client = self.client().await?;
        let sent = Instant::now();
        // The client sends one renewal when it opens the stream and reports a lease the
        // server no longer knows; the stream is dropped right after.
        self.call(
            &client,
            limit.min(self.request_timeout),
            client.lease_client().keep_alive(lease),
        )
        .await?;
        Ok(sent)
    }

    async fn revoke(&self, lease: i64, limit: Duration) -> Result<(), Fail> {
        let client = self.client().await?;
        self.call(
            &client,
            limit.min(self.request_timeout),
            client.lease_client().revoke(lease),
        )
        .await?;
        Ok(())
    }

    /// The lock, if the entry's lease leaves validity after the drift.
    fn held(&self, resource: &str, entry: &Entry, started: Instant) -> Result<EtcdHeld> {
        let drift = timing::drift_for(entry.ttl, self.ttl, self.drift);
        let deadline = timing::deadline(entry.renewed, entry.ttl, drift)
            .filter(|d| *d > Instant::now())
            .ok_or_else(|| Error::TooSlow {
                resource: resource.to_string(),
                votes: self.votes(VoteOutcome::Granted, started.elapsed()),
            })?;
        let revision = u64::try_from(entry.revision).map_err(|_| Error::Unavailable {
            resource: resource.to_string(),
            votes: self.votes(
                VoteOutcome::Failed(format!("negative revision {}", entry.revision).into()),
                started.elapsed(),
            ),
        })?;
        tracing::debug!(key = %entry.keys[0], revision, "etcd lock acquired");
        Ok(EtcdHeld {
            resource: resource.to_string(),
            key: entry.keys[0].clone(),
            lease: entry.lease,
            revision,
            deadline,
            votes: self.votes(VoteOutcome::Granted, started.elapsed()),
            ttl: entry.ttl,
            shared: entry.side == Side::Shared,
            last_writer: (entry.side == Side::Shared).then_some(entry.last_writer),
            renewed: entry.renewed,
            ending: match entry.lease_use {
                Some(n) => Ending::DeleteKey {
                    next_use: n.checked_add(1),
                },
                None => Ending::Revoke,
            },
            in_a_run: self.in_a_run(started, entry.ttl),
        })
    }

    /// One renewal of `held`'s lease. A lease that may carry other locks outlives this lock's
    /// key: the renewal counts only if the key is still the lock's after it (the key was
    /// attached to the lease then). A lock named by a token is looked at before the renewal
    /// too, so that a token whose key is gone renews nothing (but a race with its release
    /// may still renew the lease once).
    async fn renew_held(
        &self,
        held: &EtcdHeld,
        budget: Duration,
        started: Instant,
    ) -> Result<Instant, Fail> {
        let by_token = held.revision == 0;
        let keyed = matches!(held.ending, Ending::DeleteKey { .. });
        if by_token && !self.key_still_ours(held, budget).await? {
            return Err(Fail::lease_gone());
        }
        let left = budget.saturating_sub(started.elapsed());
        let sent = self.keep_alive(held.lease, left).await?;
        if !keyed {
            return Ok(sent);
        }
        let left = budget.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(Fail::failed(
                "no time was left to check the lock key after the lease's renewal",
            ));
        }
        match self.key_still_ours(held, left).await? {
            true => Ok(sent),
            false => Err(Fail::lease_gone()),
        }
    }

    /// Revokes `held`'s lease; whether it was there. A lock named by a token (or one whose
    /// lease may have carried others) is looked at first: a token whose key is gone revokes
    /// nothing. (Its key seen there, the work before the look was the lock's; a release by
    /// token that races it only ends the same lock.)
    async fn revoke_if_ours(&self, held: &EtcdHeld, limit: Duration) -> Result<bool, Fail> {
        let look = held.revision == 0 || matches!(held.ending, Ending::DeleteKey { .. });
        if look && !self.key_still_ours(held, limit).await? {
            return Ok(false);
        }
        match self.revoke(held.lease, limit).await {
            Ok(()) => Ok(true),
            Err(fail) if fail.lease_gone => Ok(false),
            Err(fail) => Err(fail),
        }
    }

    /// A spare lease that may carry a new lock without a renewal (the latest one kept);
    /// forgets those too old for that (they hold no key and expire by TTL).
    fn take_spare(&self) -> Option<Spare> {
        let mut spares = self
            .spares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        spares.retain(|s| timing::spare_usable(s.renewed.elapsed(), s.ttl));
        spares.pop()
    }

    /// When a release returns: the start of the window of [`timing::in_a_run`].
    fn note_release(&self) {
        *self
            .last_release
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
    }

    /// Whether an acquisition that started at `started` comes in a run of this client's locks.
    fn in_a_run(&self, started: Instant, ttl: Duration) -> bool {
        let last = *self
            .last_release
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        timing::in_a_run(last.map(|t| started.saturating_duration_since(t)), ttl)
    }

    /// After `held`'s release, for a lease ours to carry over (`carry`: what [`timing::leave`]
    /// said and the lease's next use number; `None` for a lease named by a token, or whose use
    /// numbers ran out after 2^32 locks, left to expire): when the release deleted the key
    /// (`done`), keeps the lease for the next lock, as it stands ([`timing::Leave::Keep`]) or
    /// after renewing it ([`timing::Leave::RenewAndKeep`]: the spare then counts from the
    /// renewal's send time). A lease that cannot be kept (the key not deleted, the renewal
    /// failed or had less than a request timeout left before `end`, the pool full) is revoked
    /// in the background (a lease without keys would otherwise wait out its TTL in the
    /// cluster). A lease the release revoked ([`timing::Leave::Revoke`]) is left alone, or
    /// revoked in the background if that failed.
    async fn leave_lease(
        &self,
        held: &EtcdHeld,
        carry: Option<(timing::Leave, u32)>,
        done: bool,
        end: Instant,
    ) {
        let Some((leave, next_use)) = carry else {
            return;
        };
        let renewed = match (leave, done) {
            (timing::Leave::Revoke, true) => return,
            (_, false) => None,
            (timing::Leave::Keep, true) => Some(held.renewed),
            (timing::Leave::RenewAndKeep, true) => {
                // Sent only with a request's time left: a request that times out marks its
                // member as failing, and the lock is released already.
                let left = end.saturating_duration_since(Instant::now());
                if left < self.request_timeout {
                    None
                } else {
                    match self.keep_alive(held.lease, left).await {
                        Ok(sent) => Some(sent),
                        // Expired meanwhile: nothing to revoke.
                        Err(fail) if fail.lease_gone => return,
                        Err(_) => None,
                    }
                }
            }
        };
        if let Some(renewed) = renewed {
            let mut spares = self
                .spares
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if spares.len() < timing::MAX_SPARE_LEASES {
                spares.push(Spare {
                    lease: held.lease,
                    ttl: held.ttl,
                    renewed,
                    next_use,
                });
                return;
            }
        }
        let mut revoke = PendingLease::default();
        revoke.arm(&self.members, held.lease, self.request_timeout);
    }

    /// Deletes `held`'s key while it is the one this lock created (for a lock named by a token,
    /// while it exists: its name is this lock's alone); whether it was deleted.
    async fn delete_key(&self, held: &EtcdHeld, limit: Duration) -> Result<bool, Fail> {
        let txn = Txn::new()
            .when([key_is_ours(held)])
            .and_then([TxnOp::delete(held.key.clone(), None)]);
        self.txn_within(txn, limit).await
    }

    /// Whether `held`'s key is still the one its lock created (after a renewal of a lease
    /// that may carry other locks).
    ///
    /// The read of the key rides along only for its consistency: etcd serves a transaction of
    /// comparisons alone from the member's own state, like a serializable read, so a member
    /// behind the others would answer from the past (a key gone that was just created, or one
    /// still there that was deleted). A linearizable range in the transaction makes the member
    /// confirm it is up to date first
    /// (`checks_of_a_lock_key_on_a_lagging_member_read_the_present`, tests/etcd.rs; mutant
    /// `etcd-key-check-serializable`).
    async fn key_still_ours(&self, held: &EtcdHeld, limit: Duration) -> Result<bool, Fail> {
        let txn = Txn::new().when([key_is_ours(held)]).and_then([TxnOp::get(
            held.key.clone(),
            Some(GetOptions::new().with_count_only()),
        )]);
        self.txn_within(txn, limit).await
    }

    /// Runs `txn` on the current member within `limit` (at most a request timeout); whether its
    /// comparisons held.
    async fn txn_within(&self, txn: Txn, limit: Duration) -> Result<bool, Fail> {
        let client = self.client().await?;
        let resp = self
            .call(
                &client,
                limit.min(self.request_timeout),
                client.kv_client().txn(txn),
            )
            .await?;
        Ok(resp.succeeded())
    }

    /// Keeps the pending lease when the lock was taken, else revokes it (best effort) through
    /// the current member: after a failed request that is another member than the one the
    /// lease was granted on.
    async fn settle_pending(&self, pending: &mut PendingLease, keep: bool) {
        let Some((_, lease, _)) = pending.lease.take() else {
            return;
        };
        if keep {
            return;
        }
        if self.revoke(lease, self.request_timeout).await.is_err() {
            tracing::debug!(lease, "could not revoke a lease; it expires by TTL");
        }
    }

    /// The client of the current member, connecting on first use.
    async fn client(&self) -> Result<Member, Fail> {
        self.members.current().await
    }

    /// Runs one request on `member` with a timeout, turning its failure into a [`Fail`]. A
    /// failure or timeout moves the cluster on to the next member for the next request; the
    /// request itself is not re-sent (it may have been applied).
    async fn call<T>(
        &self,
        member: &Member,
        limit: Duration,
        request: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T, Fail> {
        let (result, answered) = match tokio::time::timeout(limit, request).await {
            Ok(Ok(value)) => (Ok(value), true),
            Ok(Err(e)) if lease_not_found(&e) => (Err(Fail::lease_gone()), true),
            Ok(Err(e)) => (
                Err(Fail::failed(self.closed_for_tls(describe(&e)))),
                cluster_refused(&e),
            ),
            Err(_) => (
                Err(Fail {
                    outcome: VoteOutcome::TimedOut,
                    lease_gone: false,
                }),
                false,
            ),
        };
        let why: &dyn fmt::Display = match &result {
            Err(fail) => &fail.outcome,
            Ok(_) => &"",
        };
        self.members.observe(member.index, answered, why);
        result
    }

    /// Under TLS 1.3 a member that requires a client certificate refuses one's absence after
    /// the handshake, and the client may see only the closed connection: say what it likely is.
    fn closed_for_tls(&self, text: String) -> String {
        let anonymous = self
            .members
            .tls
            .as_ref()
            .is_some_and(|t| t.identity.is_none());
        let closed = ["connection closed", "broken pipe", "reset by peer"]
            .iter()
            .any(|m| text.contains(m));
        if anonymous && closed {
            format!("{text} (over TLS without a client certificate: a member that requires one closes the connection; give one with TlsConfig::with_client_cert_file and with_client_key_file, --tls-cert and --tls-key)")
        } else {
            text
        }
    }

    fn votes(&self, outcome: VoteOutcome, latency: Duration) -> Votes {
        Votes::from(vec![NodeVote {
            node: self.members.label().into(),
            outcome,
            latency,
        }])
    }

    fn error_for(&self, resource: &str, fail: Fail, started: Instant) -> Error {
        let resource = resource.to_string();
        let votes = self.votes(fail.outcome, started.elapsed());
        if fail.lease_gone {
            Error::lost(resource, votes, LostCause::NotHeld)
        } else {
            Error::Unavailable { resource, votes }
        }
    }
}

/// A lease granted for an acquisition that has not finished. If the acquisition is dropped
/// (cancelled), `Drop` hands the revoke to a background task (through a member that is
/// connected, the current one if it is): `Drop` itself does no I/O. The task is counted until
/// it ends, and `Client::close` waits for it ([`Cluster::settle_releases`]).
#[derive(Default)]
struct PendingLease {
    lease: Option<(Arc<Members>, i64, Duration)>,
}

impl PendingLease {
    fn arm(&mut self, members: &Arc<Members>, lease: i64, timeout: Duration) {
        self.lease = Some((Arc::clone(members), lease, timeout));
    }
}

impl fmt::Debug for PendingLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lease = self.lease.as_ref().map(|(_, id, _)| *id);
        f.debug_struct("PendingLease")
            .field("lease", &lease)
            .finish()
    }
}

impl Drop for PendingLease {
    fn drop(&mut self) {
        let Some((members, lease, timeout)) = self.lease.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(client) = members.any_connected() else {
            return;
        };
        members.revoke_in_background(&runtime, client, lease, timeout);
    }
}

/// Why a release that tried again says neither `Ok` nor `Lost` (issue 35, item 1).
const UNTOLD_RELEASE: &str = "a release request got no answer, and the next found the lock already gone: the first may have released it, or the lock was lost before (deleted by its token, its lease revoked or expired), and the release cannot tell which; treat work done under the lock as possibly unprotected";

/// Whether a lock on `resources` as `side` may ride a spare lease and leave its own for the
/// next lock: a mutex (or a writer) of one resource. A set's token names its first key only,
/// and a semaphore's lease holds its slots' keys too: both end by revoking their lease.
fn carries(resources: &[String], side: Side) -> bool {
    resources.len() == 1 && side == Side::Exclusive
}

/// The comparison that holds while `held`'s key is the one its lock created (for a lock named
/// by a token, whose revision is unknown: while the key exists).
fn key_is_ours(held: &EtcdHeld) -> Compare {
    match i64::try_from(held.revision) {
        Ok(revision) if revision > 0 => {
            Compare::create_revision(held.key.clone(), CompareOp::Equal, revision)
        }
        _ => Compare::create_revision(held.key.clone(), CompareOp::NotEqual, 0),
    }
}

/// Refuses, before any I/O, a set of resources too large for one transaction.
fn check_count(resources: &[String]) -> Result<()> {
    if resources.len() > timing::MAX_RESOURCES {
        return Err(Error::config(
            "resources",
            format!(
                "{} resources in one lock; etcd takes at most {} at once (one transaction holds at most {} operations, etcd's default --max-txn-ops): split the set or use Redis",
                resources.len(),
                timing::MAX_RESOURCES,
                timing::MAX_TXN_OPS
            ),
        ));
    }
    Ok(())
}

/// The range results of a transaction's branch, in order.
fn gets(resp: &TxnResponse) -> Vec<etcd_client::GetResponse> {
    resp.op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        })
        .collect()
}

/// Whether etcd answered that the lease does not exist (revoke: gRPC NotFound; keep-alive:
/// a zero TTL, which the client reports as an error).
fn lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => status.message().contains("lease not found"),
        etcd_client::Error::LeaseKeepAliveError(why) => why.contains("lease not found"),
        _ => false,
    }
}

/// Whether the cluster itself refused the request (permission denied, a bad argument, ...): an
/// answer, unlike a transport failure or etcd's `Unavailable` (no leader, a member cut off).
fn cluster_refused(e: &etcd_client::Error) -> bool {
    // gRPC's status codes (tonic's `Code`, which etcd-client does not re-export): CANCELLED,
    // UNKNOWN, DEADLINE_EXCEEDED, UNAVAILABLE.
    const NOT_AN_ANSWER: [i32; 4] = [1, 2, 4, 14];
    match e {
        etcd_client::Error::GRpcStatus(status) => !NOT_AN_ANSWER.contains(&(status.code() as i32)),
        _ => false,
    }
}

/// The error and its causes in one line (the client's own text is often just "transport
/// error"). Node URLs never reach here with a password: endpoints carry none.
fn describe(e: &etcd_client::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
