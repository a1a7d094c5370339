//! The client: takes locks on the configured nodes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc;
use tracing::Instrument;

use crate::config::Config;
use crate::error::{Error, LostCause, Result};
use crate::fencing;
use crate::lock::Lock;
use crate::node::NodeAddr;
use crate::queue::{self, Ticket};
use crate::quorum::Decision;
use crate::redis::extender::{self, AsBackend, Msg};
use crate::redis::{Quarantine, RedisBackend, Wait};
use crate::retry::RetryPolicy;
use crate::token::OwnerToken;
use crate::validity;
use crate::vote::{VoteOutcome, Votes};

/// Takes locks on one Redis node (an efficiency lock), on a majority of N independent nodes
/// (Redlock), or on an etcd cluster. Cheap to clone: clones share connections.
///
/// ```no_run
/// # async fn demo() -> fencelock::Result<()> {
/// use fencelock::{Client, Config};
///
/// let client = Client::new(Config::new([
///     "redis://127.0.0.1:7001/0",
///     "redis://127.0.0.1:7002/0",
///     "redis://127.0.0.1:7003/0",
/// ]))?;
/// let lock = client.acquire("order:42").await?;
/// // ... work that must finish before lock.validity_deadline() ...
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) backend: Backend,
    drift: Duration,
    reaper: OnceLock<mpsc::UnboundedSender<(Arc<[String]>, Held)>>,
    /// Releases handed to the background and not finished yet (see [`Client::close`]).
    pending_releases: tokio::sync::watch::Sender<usize>,
    extender: OnceLock<mpsc::UnboundedSender<Msg>>,
    next_guard: AtomicU64,
    /// Resources this client released while others waited for them, until when: asking for
    /// one of them again within that time joins the end of the line (see `queue.rs`).
    waited_for: Mutex<HashMap<String, Instant>>,
}

/// The servers behind a client.
#[derive(Debug)]
pub(crate) enum Backend {
    Redis(RedisBackend),
    #[cfg(feature = "etcd")]
    Etcd(crate::etcd::EtcdBackend),
}

/// What a lock holds, per backend.
#[derive(Debug, Clone)]
pub(crate) enum Held {
    /// The owner token, and the waiter id if the lock was taken in line (see `queue.rs`).
    Redis(OwnerToken, Option<Arc<str>>),
    #[cfg(feature = "etcd")]
    Etcd(crate::etcd::EtcdHeld),
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl AsBackend for Inner {
    fn backend(&self) -> &RedisBackend {
        match &self.backend {
            Backend::Redis(r) => r,
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => unreachable!("the batch extender runs for Redis clients only"),
        }
    }
}

impl Client {
    /// Builds a client. No I/O happens here: connections open on first use.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when the configuration is unusable: no nodes, a URL that does not
    /// parse, the same host:port listed twice, a TTL that leaves no validity after drift.
    pub fn new(config: Config) -> Result<Client> {
        let addrs = config.validate()?;
        let backend = if addrs[0].scheme().is_redis() {
            let quarantine = Quarantine {
                enabled: config.quarantine(),
                own_ttl: config.ttl(),
            };
            Backend::Redis(RedisBackend::new(
                addrs,
                config.connect_timeout(),
                quarantine,
            )?)
        } else {
            etcd_backend(addrs, &config)?
        };
        Ok(Client {
            inner: Arc::new(Inner {
                drift: config.drift(),
                config,
                backend,
                reaper: OnceLock::new(),
                pending_releases: tokio::sync::watch::Sender::new(0),
                extender: OnceLock::new(),
                next_guard: AtomicU64::new(0),
                waited_for: Mutex::default(),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The nodes, in configured order (display them: passwords are redacted).
    pub fn nodes(&self) -> Vec<NodeAddr> {
        match &self.inner.backend {
            Backend::Redis(r) => r.addrs().cloned().collect(),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.addrs().cloned().collect(),
        }
    }

    /// How many nodes must grant: N/2+1 (1 for etcd, whose cluster decides by itself).
    pub fn quorum(&self) -> usize {
        match &self.inner.backend {
            Backend::Redis(r) => r.quorum(),
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => 1,
        }
    }

    /// Opens the connection to every node now, instead of on first use, waiting at most the
    /// connect timeout. Useful in short-lived processes (a CLI), whose first request would
    /// otherwise spend part of its node timeout connecting. The votes say which nodes answered.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: connections still opening keep opening in the background.
    pub async fn connect(&self) -> Votes {
        match &self.inner.backend {
            Backend::Redis(r) => r.connect_all(self.inner.config.connect_timeout()).await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => Votes::default(),
        }
    }

    /// The Redis nodes, or an error naming the operation for other backends.
    #[cfg_attr(not(feature = "etcd"), allow(unused_variables))]
    pub(crate) fn redis(&self, what: &str) -> Result<&RedisBackend> {
        match &self.inner.backend {
            Backend::Redis(r) => Ok(r),
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => Err(Error::config(
                "backend",
                format!("{what} works on Redis nodes only; with etcd, hold the Lock and call its methods"),
            )),
        }
    }

    /// Makes one attempt to take the lock on `resource`.
    ///
    /// # Errors
    ///
    /// [`Error::Contention`] when another owner holds it, [`Error::Unavailable`] when too many
    /// nodes failed, [`Error::TooSlow`] when no validity was left, [`Error::InvalidConfig`] for an
    /// empty resource name. Whatever the error, release has been sent to every node.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a cancelled attempt may leave keys that expire after the TTL.
    pub async fn try_acquire(&self, resource: &str) -> Result<Lock> {
        self.try_acquire_many(&[resource]).await
    }

    /// Makes one attempt to take all of `resources` at once: on each node one script sets all
    /// the keys or none (on etcd, one transaction joins every resource's queue, and the lock is
    /// granted only if it is first in all of them), so two requests with overlapping sets are
    /// never both granted. They are released (and extended) together.
    ///
    /// # Errors
    ///
    /// As [`Client::try_acquire`]; [`Error::InvalidConfig`] when the list is empty or names a
    /// resource twice, or, on etcd, names more than 63 resources (one transaction's worth).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: see [`Client::try_acquire`].
    pub async fn try_acquire_many<S: AsRef<str>>(&self, resources: &[S]) -> Result<Lock> {
        let keys = check_resources(resources)?;
        let span = tracing::debug_span!("acquire", resource = %keys[0], attempt = 1u32);
        self.attempt(&keys, Wait::No).instrument(span).await
    }

    /// Takes the lock on `resource`, waiting per the configured [`RetryPolicy`].
    ///
    /// After a first refusal the call waits in line: waiters of one resource are served in the
    /// order they started waiting (on every node the first live waiter is the only one granted),
    /// each woken by its turn, which the release of the previous holder announces. A client that
    /// asks again right after releasing a lock others wait for goes to the end of the line.
    /// Jittered retries (the policy's delays) renew the place in line and cover lost wake-ups.
    /// The line only orders fencelock's waiters; other Redlock clients and
    /// [`Client::try_acquire`] can still take a free key ahead of it. On Redis, several
    /// resources at once ([`Client::acquire_many`]) do not queue: those waiters are woken by
    /// every release. On etcd every wait queues, several resources included: a waiter's keys
    /// are created in one transaction, so waiters for overlapping sets are served in one order
    /// and never wait for each other in a cycle.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] (holding the last attempt's error) when the wait or the attempt count
    /// ran out; the last attempt's error directly when it is not worth retrying.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: see [`Client::try_acquire`]. Dropping the future between attempts is
    /// harmless: the waiter leaves the line in the background.
    pub async fn acquire(&self, resource: &str) -> Result<Lock> {
        let policy = self.inner.config.retry().clone();
        self.acquire_with(resource, &policy).await
    }

    /// Like [`Client::acquire`], with a retry policy for this call only.
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`].
    pub async fn acquire_with(&self, resource: &str, policy: &RetryPolicy) -> Result<Lock> {
        self.acquire_many_with(&[resource], policy).await
    }

    /// [`Client::try_acquire_many`], waiting like [`Client::acquire`].
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`] and [`Client::try_acquire_many`].
    pub async fn acquire_many<S: AsRef<str>>(&self, resources: &[S]) -> Result<Lock> {
        let policy = self.inner.config.retry().clone();
        self.acquire_many_with(resources, &policy).await
    }

    /// [`Client::acquire_many`] with a retry policy for this call only.
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`] and [`Client::try_acquire_many`].
    pub async fn acquire_many_with<S: AsRef<str>>(
        &self,
        resources: &[S],
        policy: &RetryPolicy,
    ) -> Result<Lock> {
        let keys = check_resources(resources)?;
        #[cfg(feature = "etcd")]
        if let Backend::Etcd(e) = &self.inner.backend {
            let resume = policy.in_line_since().is_some();
            let held = e.acquire(&keys, policy.wait(), resume).await?;
            return Ok(Lock::from_etcd(self.clone(), keys, held));
        }
        let started = Instant::now();
        let mut attempts = 0u32;
        let mut subscription = None;
        // One key on Redis: a waiter queues (see `queue.rs`). It takes its place in line after
        // its first refusal, or at once if this client just released the key while others
        // waited; its ticket dates from the start of the wait either way.
        let single = keys.len() == 1;
        let resumed = policy.in_line_since();
        let wall_start = resumed.unwrap_or_else(SystemTime::now);
        let lease = queue::lease(policy.max_delay(), self.inner.config.node_timeout());
        // A wait split over several calls keeps one name in line: derived from when it began.
        let new_ticket = || {
            let wait = resumed.map_or_else(
                || fastrand::u64(..),
                |t| {
                    t.duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64)
                },
            );
            let id = self
                .redis("waiting")
                .map(|b| b.waiter_id(wait))
                .unwrap_or_default();
            Ticket::new(wall_start, id, lease)
        };
        // In line from the first attempt when resuming a wait, or right after our own release
        // reached waiters.
        let in_line_now = single && (resumed.is_some() || self.others_waited(&keys[0]));
        let mut ticket = in_line_now.then(new_ticket);
        // However this call ends (an error, a timeout, the future dropped), a waiter that did not
        // get the lock leaves the line; one that did leaves it with its release.
        let mut line = LeaveLine {
            client: self,
            key: &keys[0],
            ticket: None,
        };
        line.ticket.clone_from(&ticket);
        if ticket.is_some() {
            // Straight to the end of the line: listen for our turn before taking a place.
            subscription = Some(self.listen(&keys, ticket.as_ref()).await?);
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
            let err = match self.attempt(&keys, wait).instrument(span).await {
                Ok(lock) => {
                    line.ticket = None;
                    return Ok(lock);
                }
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            let elapsed = started.elapsed();
            if !policy.may_retry(attempts, elapsed) {
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
                subscription = Some(self.listen(&keys, ticket.as_ref()).await?);
                continue;
            }
            let delay = policy
                .delay(attempts, fastrand::f64())
                .min(policy.wait().saturating_sub(elapsed));
            tracing::debug!(resource = %keys[0], attempts, ?delay, error = %err, "waiting");
            match &subscription {
                Some(s) => s.wait(delay).await,
                None => tokio::time::sleep(delay).await,
            }
        }
    }

    /// Subscribes to the wake-ups of a waiter: its turn in line, or any release of `keys`.
    async fn listen(
        &self,
        keys: &[String],
        ticket: Option<&Ticket>,
    ) -> Result<crate::redis::Subscription> {
        let backend = self.redis("waiting")?;
        let timeout = self.inner.config.node_timeout();
        Ok(match ticket {
            Some(t) => backend.await_turn(&t.id, timeout).await,
            None => backend.watch_release(keys, timeout).await,
        })
    }

    /// Whether this client recently released `resource` while others waited for it (and
    /// forgets it: the hint serves one acquisition).
    fn others_waited(&self, resource: &str) -> bool {
        let mut map = self.inner.waited_for.lock().expect("hint mutex poisoned");
        map.remove(resource)
            .is_some_and(|until| Instant::now() < until)
    }

    /// Notes that a release of `resource` reached waiters.
    pub(crate) fn note_waiters(&self, resource: &str) {
        let ttl = self.inner.config.ttl();
        let now = Instant::now();
        let mut map = self.inner.waited_for.lock().expect("hint mutex poisoned");
        if map.len() >= 1024 {
            map.retain(|_, until| now < *until);
        }
        map.insert(resource.to_string(), now + ttl);
    }

    async fn attempt(&self, keys: &Arc<[String]>, wait: Wait<'_>) -> Result<Lock> {
        let inner = &self.inner;
        let config = &inner.config;
        // With the `etcd` feature this match has two arms.
        #[allow(clippy::infallible_destructuring_match)]
        let backend = match &inner.backend {
            Backend::Redis(r) => r,
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => {
                let held = e.try_acquire(keys).await?;
                return Ok(Lock::from_etcd(self.clone(), keys.clone(), held));
            }
        };
        let resource = keys[0].as_str();
        let line = match wait {
            Wait::InLine(ticket) => Some(ticket),
            _ => None,
        };
        let token = OwnerToken::generate().map_err(|e| {
            Error::config(
                "random source",
                format!("the OS random number generator failed: {e}"),
            )
        })?;
        let started = Instant::now();
        let round = backend
            .acquire(
                keys,
                token.as_str(),
                config.ttl(),
                config.fencing(),
                wait,
                config.node_timeout(),
            )
            .await;
        let votes = round.votes;
        if round.decision != Decision::Reached {
            self.release_quietly(keys, &token, None).await;
            return Err(classify(resource, votes, backend.quorum()));
        }
        let mut fencing_token = None;
        if config.fencing() {
            let granted: Vec<usize> = round.granted.iter().map(|(i, _)| *i).collect();
            let salt = fastrand::u16(..);
            let counters = round.granted.iter().map(|(_, c)| *c);
            let Some(t) = fencing::next_unique_token(counters, salt) else {
                self.release_quietly(keys, &token, None).await;
                return Err(Error::config(
                    "fence counter",
                    format!(
                        "the fence counter of {resource:?} is at u64::MAX; no larger token exists"
                    ),
                ));
            };
            let wb = backend
                .write_back(&granted, keys, token.as_str(), t, config.node_timeout())
                .await;
            if wb.decision != Decision::Reached {
                self.release_quietly(keys, &token, None).await;
                let resource = resource.to_string();
                return Err(if wb.votes.failed() > 0 {
                    Error::Unavailable {
                        resource,
                        votes: wb.votes,
                    }
                } else {
                    // Our keys vanished between the two rounds: the TTL ran out or a node lost them.
                    Error::TooSlow {
                        resource,
                        votes: wb.votes,
                    }
                });
            }
            fencing_token = Some(t);
        }
        let elapsed = started.elapsed();
        let Some(valid_for) = validity::validity(config.ttl(), elapsed, inner.drift) else {
            self.release_quietly(keys, &token, None).await;
            return Err(Error::TooSlow {
                resource: resource.to_string(),
                votes,
            });
        };
        let deadline = started + (elapsed + valid_for);
        tracing::debug!(resource, ?elapsed, validity = ?valid_for, fencing_token, "acquired");
        Ok(Lock::new(
            self.clone(),
            keys.clone(),
            // A lock taken in line leaves the line with its release.
            Held::Redis(token, line.map(|t| Arc::from(t.id.as_str()))),
            fencing_token,
            deadline,
            votes,
        ))
    }

    /// Releases, ignoring the outcome. `line`: the waiter id to take out of the line (after a
    /// failed attempt the waiter keeps its place: `None`).
    pub(crate) async fn release_quietly(
        &self,
        keys: &[String],
        token: &OwnerToken,
        line: Option<&str>,
    ) {
        let Ok(backend) = self.redis("release") else {
            return;
        };
        let round = backend
            .release(
                keys,
                token.as_str(),
                line,
                self.inner.config.node_timeout(),
                false,
            )
            .await;
        tracing::debug!(resource = %keys[0], votes = %round.votes, "released");
    }

    /// Releases `resource` if `token` (as printed by [`Lock::token`]) still owns it. For tools
    /// that hand the token between processes; a program holding a [`Lock`] calls
    /// [`Lock::release`] instead.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the key does not hold this token on a quorum of nodes (wrong token,
    /// or it expired); [`Error::Unavailable`] when too many nodes failed to answer.
    pub async fn release_token(&self, resource: &str, token: &str) -> Result<Votes> {
        let keys = check_resources(&[resource])?;
        let round = self
            .redis("release by token")?
            .release(&keys, token, None, self.inner.config.node_timeout(), false)
            .await;
        self.settle(resource, round.decision, round.votes, false)
    }

    /// Extends `resource` to a fresh TTL if `token` still owns it on a quorum.
    ///
    /// # Errors
    ///
    /// As [`Client::release_token`].
    pub async fn extend_token(&self, resource: &str, token: &str) -> Result<Votes> {
        let keys = check_resources(&[resource])?;
        let round = self
            .redis("extend by token")?
            .extend(
                &keys,
                token,
                self.inner.config.ttl(),
                self.inner.config.node_timeout(),
            )
            .await;
        self.settle(resource, round.decision, round.votes, false)
    }

    /// Extends what a lock holds, within `budget` (the validity left). Returns the new deadline.
    pub(crate) async fn extend_held(
        &self,
        keys: &[String],
        held: &Held,
        budget: Duration,
    ) -> Result<(Instant, Votes)> {
        // Every time-based judgement below comes from one reading of the clock after the
        // round, `now`: two readings could judge "not expired" at the first and compute the
        // deadline from a later second one.
        let started = Instant::now();
        let token = match held {
            Held::Redis(token, _) => token.as_str(),
            #[cfg(feature = "etcd")]
            Held::Etcd(h) => {
                let Backend::Etcd(e) = &self.inner.backend else {
                    unreachable!("an etcd lock comes from an etcd client")
                };
                return Ok((e.extend(h, budget).await?, Votes::default()));
            }
        };
        let config = &self.inner.config;
        let round = self
            .redis("extend")?
            // A quorum may answer any time before the validity runs out; the round returns as
            // soon as it does, so a long bound costs nothing when the nodes are healthy.
            .extend(
                keys,
                token,
                config.ttl(),
                budget.max(Duration::from_millis(1)),
            )
            .await;
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(started);
        let expired = elapsed >= budget;
        let votes = self.settle(&keys[0], round.decision, round.votes, expired)?;
        let valid_for = validity::validity(config.ttl(), elapsed, self.inner.drift)
            .ok_or_else(|| Error::lost(keys[0].clone(), Votes::default(), LostCause::Expired))?;
        Ok((now + valid_for, votes))
    }

    /// The result of a release or extend round.
    pub(crate) fn settle(
        &self,
        resource: &str,
        decision: Decision,
        votes: Votes,
        expired: bool,
    ) -> Result<Votes> {
        if decision == Decision::Reached && !expired {
            return Ok(votes);
        }
        let n = votes.0.len();
        let q = self.quorum();
        let refused = votes
            .iter()
            .filter(|v| matches!(v.outcome, VoteOutcome::NotHeld | VoteOutcome::HeldByOther))
            .count();
        if refused > n.saturating_sub(q) || (!expired && votes.failed() == 0) {
            Err(Error::lost(resource, votes, LostCause::NotHeld))
        } else if expired {
            Err(Error::lost(resource, votes, LostCause::Expired))
        } else {
            Err(Error::Unavailable {
                resource: resource.to_string(),
                votes,
            })
        }
    }

    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The client's batch extender (spawned on first use) and a fresh registration id.
    pub(crate) fn extender(&self) -> (u64, mpsc::UnboundedSender<Msg>) {
        let tx = self.inner.extender.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let weak: Weak<dyn AsBackend> = Arc::downgrade(&self.inner) as Weak<Inner>;
            let config = &self.inner.config;
            let timing = extender::Timing {
                ttl: config.ttl(),
                drift: self.inner.drift,
                node_timeout: config.node_timeout(),
                quorum: self.quorum(),
                nodes: config.nodes().len(),
            };
            tokio::spawn(extender::run(rx, weak, timing));
            tx
        });
        let id = self.inner.next_guard.fetch_add(1, Ordering::Relaxed);
        (id, tx.clone())
    }

    /// Hands a dropped lock to a background task that releases it. `Drop` must not do I/O, so
    /// it only sends; without a runtime the TTL cleans up instead. [`Client::close`] waits for
    /// these releases.
    pub(crate) fn release_in_background(&self, keys: Arc<[String]>, held: Held) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let tx = self.inner.reaper.get_or_init(|| {
            let (tx, mut rx) = mpsc::unbounded_channel::<(Arc<[String]>, Held)>();
            let weak: Weak<Inner> = Arc::downgrade(&self.inner);
            runtime.spawn(async move {
                while let Some((keys, held)) = rx.recv().await {
                    let Some(inner) = weak.upgrade() else { break };
                    // Side by side, so that `close` waits for the slowest release, not the sum.
                    tokio::spawn(Client { inner }.release_and_count(keys, held));
                }
            });
            tx
        });
        self.inner.pending_releases.send_modify(|n| *n += 1);
        if let Err(mpsc::error::SendError((keys, held))) = tx.send((keys, held)) {
            // The runtime the reaper ran on is gone (this client outlived it): use this one.
            runtime.spawn(self.clone().release_and_count(keys, held));
        }
    }

    async fn release_and_count(self, keys: Arc<[String]>, held: Held) {
        self.release_held(&keys, &held).await;
        self.inner
            .pending_releases
            .send_modify(|n| *n = n.saturating_sub(1));
    }

    /// Waits until the locks dropped without [`Lock::release`] (by a `?` or a panic between
    /// acquire and release, or a [`LockGuard`](crate::LockGuard) dropped) have been released,
    /// and until the releases that returned at a quorum have reached their other nodes, for at
    /// most twice the node timeout. Call it before `main` returns: the release of a
    /// dropped lock runs in a background task, which a runtime that shuts down never runs, and
    /// the lock then stays taken until its TTL runs out.
    ///
    /// ```no_run
    /// # async fn work(client: &fencelock::Client) -> fencelock::Result<()> { Ok(()) }
    /// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
    /// let result = work(&client).await; // may return early with a lock dropped
    /// client.close().await;
    /// result
    /// # }
    /// ```
    ///
    /// The client stays usable; locks still held are not touched.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the releases go on in the background.
    pub async fn close(&self) {
        let bound = 2 * self.inner.config.node_timeout();
        let mut pending = self.inner.pending_releases.subscribe();
        // The releases that returned at a quorum: their other nodes' requests.
        let started = Instant::now();
        if let Backend::Redis(r) = &self.inner.backend {
            r.settle(bound).await;
        }
        let left = bound.saturating_sub(started.elapsed());
        if tokio::time::timeout(left, pending.wait_for(|n| *n == 0))
            .await
            .is_err()
        {
            tracing::warn!(
                pending = *pending.borrow(),
                ?bound,
                "close: releases still pending; their keys expire by TTL"
            );
        }
    }

    /// Releases whatever a lock holds, ignoring the outcome (used after failures and on drop).
    pub(crate) async fn release_held(&self, keys: &[String], held: &Held) {
        match held {
            Held::Redis(token, line) => self.release_quietly(keys, token, line.as_deref()).await,
            #[cfg(feature = "etcd")]
            Held::Etcd(h) => {
                if let Backend::Etcd(e) = &self.inner.backend {
                    let _ = e.release(h).await;
                }
            }
        }
    }
}

/// Takes a waiter that did not get the lock out of the line when dropped (in the background:
/// `Drop` does no I/O; a registration left behind anyway only lasts its lease).
struct LeaveLine<'a> {
    client: &'a Client,
    key: &'a str,
    ticket: Option<Ticket>,
}

impl Drop for LeaveLine<'_> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (client, key) = (self.client.clone(), self.key.to_string());
        runtime.spawn(async move {
            if let Ok(backend) = client.redis("leaving the line") {
                let timeout = client.inner.config.node_timeout();
                backend.leave_queue(&key, &ticket, timeout).await;
            }
        });
    }
}

/// Checks a list of resources before any I/O: not empty, no empty or repeated name, and no
/// name inside fencelock's own key space (see [`crate::protocol::RESERVED_PREFIX`]).
pub(crate) fn check_resources<S: AsRef<str>>(resources: &[S]) -> Result<Arc<[String]>> {
    if resources.is_empty() {
        return Err(Error::config(
            "resources",
            "the list of resources is empty; name at least one",
        ));
    }
    let keys: Vec<String> = resources.iter().map(|r| r.as_ref().to_string()).collect();
    for (i, k) in keys.iter().enumerate() {
        if k.is_empty() {
            return Err(Error::config(
                "resource",
                "the resource name is empty; name what the lock protects, e.g. \"order:42\"",
            ));
        }
        if let Some(rest) = k.strip_prefix(crate::protocol::RESERVED_PREFIX) {
            return Err(Error::config(
                "resource",
                format!(
                    "{k:?} lies in fencelock's own key space (names starting with {:?} hold its fence counters and waiting lines), where a lock would break other locks; rename it, e.g. {:?}",
                    crate::protocol::RESERVED_PREFIX,
                    format!("app:{rest}")
                ),
            ));
        }
        if keys[..i].contains(k) {
            return Err(Error::config(
                "resources",
                format!("{k:?} is listed twice; name each resource once"),
            ));
        }
    }
    Ok(keys.into())
}

/// Contention when the nodes held by others alone rule out a quorum; otherwise the failures did.
fn classify(resource: &str, votes: Votes, quorum: usize) -> Error {
    let n = votes.0.len();
    let resource = resource.to_string();
    if votes.held_by_other() > n.saturating_sub(quorum) || votes.failed() == 0 {
        Error::Contention { resource, votes }
    } else {
        Error::Unavailable { resource, votes }
    }
}

#[cfg(feature = "etcd")]
fn etcd_backend(addrs: Vec<NodeAddr>, config: &Config) -> Result<Backend> {
    Ok(Backend::Etcd(crate::etcd::EtcdBackend::new(addrs, config)?))
}

#[cfg(not(feature = "etcd"))]
fn etcd_backend(_addrs: Vec<NodeAddr>, _config: &Config) -> Result<Backend> {
    Err(Error::config(
        "nodes",
        "etcd:// URLs need fencelock's `etcd` feature, which this build does not include",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn names_in_fencelocks_own_key_space_are_refused() {
        for name in [
            "fencelock:fence:X",
            "fencelock:queue:X",
            "fencelock:queue-lease:X",
            "fencelock:waiting:X",
            "fencelock:",
        ] {
            let err = check_resources(&[name]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{name}");
            assert!(err.to_string().contains("key space"), "{err}");
            let err = check_resources(&["ok", name]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{name}");
        }
        // What the protocol writes beside a lock is inside the reserved space.
        for key in [
            crate::protocol::counter_key("X"),
            crate::protocol::queue_key("X"),
            crate::protocol::lease_key("X"),
            crate::protocol::waiting_key("X"),
        ] {
            assert!(check_resources(&[key.as_str()]).is_err(), "{key}");
        }
        for name in [
            "fencelock",
            "order:fencelock:1",
            "Fencelock:fence:X",
            "fencelock/x",
        ] {
            assert!(check_resources(&[name]).is_ok(), "{name}");
        }
    }
}
