//! The client: takes locks on the configured nodes.

use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::Instrument;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::fencing;
use crate::lock::Lock;
use crate::node::NodeAddr;
use crate::quorum::Decision;
use crate::redis::RedisBackend;
use crate::retry::RetryPolicy;
use crate::token::OwnerToken;
use crate::validity;
use crate::vote::{VoteOutcome, Votes};

/// Takes locks on one Redis node (an efficiency lock) or on a majority of N independent nodes
/// (Redlock). Cheap to clone: clones share connections.
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
    reaper: OnceLock<mpsc::UnboundedSender<(String, Held)>>,
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
    Redis(OwnerToken),
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
            Backend::Redis(RedisBackend::new(addrs, config.connect_timeout())?)
        } else {
            etcd_backend(addrs, &config)?
        };
        Ok(Client {
            inner: Arc::new(Inner {
                drift: config.drift(),
                config,
                backend,
                reaper: OnceLock::new(),
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

    /// How many nodes must grant: N/2+1.
    pub fn quorum(&self) -> usize {
        match &self.inner.backend {
            Backend::Redis(r) => r.quorum(),
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => 1,
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
        check_resource(resource)?;
        let span = tracing::debug_span!("acquire", resource, attempt = 1u32);
        self.attempt(resource).instrument(span).await
    }

    /// Takes the lock on `resource`, retrying with jittered delays per the configured
    /// [`RetryPolicy`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] (holding the last attempt's error) when the wait or the attempt count
    /// ran out; the last attempt's error directly when it is not worth retrying.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: see [`Client::try_acquire`].
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
        check_resource(resource)?;
        #[cfg(feature = "etcd")]
        if let Backend::Etcd(e) = &self.inner.backend {
            let held = e.acquire(resource, policy.wait()).await?;
            return Ok(Lock::from_etcd(self.clone(), resource.to_string(), held));
        }
        let started = Instant::now();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let span = tracing::debug_span!("acquire", resource, attempt = attempts);
            let err = match self.attempt(resource).instrument(span).await {
                Ok(lock) => return Ok(lock),
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            let elapsed = started.elapsed();
            if !policy.may_retry(attempts, elapsed) {
                return Err(Error::Timeout {
                    resource: resource.to_string(),
                    attempts,
                    last: Box::new(err),
                });
            }
            let delay = policy
                .delay(attempts, fastrand::f64())
                .min(policy.wait().saturating_sub(elapsed));
            tracing::debug!(resource, attempts, ?delay, error = %err, "retrying");
            tokio::time::sleep(delay).await;
        }
    }

    async fn attempt(&self, resource: &str) -> Result<Lock> {
        let inner = &self.inner;
        let config = &inner.config;
        let backend = match &inner.backend {
            Backend::Redis(r) => r,
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => {
                let held = e.try_acquire(resource).await?;
                return Ok(Lock::from_etcd(self.clone(), resource.to_string(), held));
            }
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
                resource,
                token.as_str(),
                config.ttl(),
                config.fencing(),
                config.node_timeout(),
            )
            .await;
        let votes = round.votes;
        if round.decision != Decision::Reached {
            self.release_quietly(resource, &token).await;
            return Err(classify(resource, votes, backend.quorum()));
        }
        let mut fencing_token = None;
        if config.fencing() {
            let granted: Vec<usize> = round.granted.iter().map(|(i, _)| *i).collect();
            let Some(t) = fencing::next_token(round.granted.iter().map(|(_, c)| *c)) else {
                self.release_quietly(resource, &token).await;
                return Err(Error::config(
                    "fence counter",
                    format!(
                        "the fence counter of {resource:?} is at u64::MAX; no larger token exists"
                    ),
                ));
            };
            let wb = backend
                .write_back(&granted, resource, token.as_str(), t, config.node_timeout())
                .await;
            if wb.decision != Decision::Reached {
                self.release_quietly(resource, &token).await;
                let failed = wb.votes.failed();
                return Err(if failed > 0 {
                    Error::Unavailable {
                        resource: resource.to_string(),
                        votes: wb.votes,
                    }
                } else {
                    // Our keys vanished between the two rounds: the TTL ran out or a node lost them.
                    Error::TooSlow {
                        resource: resource.to_string(),
                        votes: wb.votes,
                    }
                });
            }
            fencing_token = Some(t);
        }
        let elapsed = started.elapsed();
        let Some(valid_for) = validity::validity(config.ttl(), elapsed, inner.drift) else {
            self.release_quietly(resource, &token).await;
            return Err(Error::TooSlow {
                resource: resource.to_string(),
                votes,
            });
        };
        let deadline = started + (elapsed + valid_for);
        tracing::debug!(resource, ?elapsed, validity = ?valid_for, fencing_token, "acquired");
        Ok(Lock::new(
            self.clone(),
            resource.to_string(),
            token,
            fencing_token,
            deadline,
            votes,
        ))
    }

    pub(crate) async fn release_quietly(&self, resource: &str, token: &OwnerToken) {
        let Ok(backend) = self.redis("release") else {
            return;
        };
        let round = backend
            .release(resource, token.as_str(), self.inner.config.node_timeout())
            .await;
        tracing::debug!(resource, votes = %round.votes, "released");
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
        check_resource(resource)?;
        let round = self
            .redis("release by token")?
            .release(resource, token, self.inner.config.node_timeout())
            .await;
        self.settle(resource, round.decision, round.votes, false)
    }

    /// Extends `resource` to a fresh TTL if `token` still owns it on a quorum.
    ///
    /// # Errors
    ///
    /// As [`Client::release_token`].
    pub async fn extend_token(&self, resource: &str, token: &str) -> Result<Votes> {
        check_resource(resource)?;
        let round = self
            .redis("extend by token")?
            .extend(
                resource,
                token,
                self.inner.config.ttl(),
                self.inner.config.node_timeout(),
            )
            .await;
        self.settle(resource, round.decision, round.votes, false)
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
        if expired || refused > n - q || votes.failed() == 0 {
            Err(Error::Lost {
                resource: resource.to_string(),
                votes,
            })
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

    pub(crate) fn drift(&self) -> Duration {
        self.inner.drift
    }

    /// Hands a dropped lock to a background task that releases it. `Drop` must not do I/O, so
    /// it only sends; without a runtime the TTL cleans up instead.
    pub(crate) fn release_in_background(&self, resource: String, held: Held) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let tx = self.inner.reaper.get_or_init(|| {
            let (tx, mut rx) = mpsc::unbounded_channel::<(String, Held)>();
            let weak: Weak<Inner> = Arc::downgrade(&self.inner);
            runtime.spawn(async move {
                while let Some((resource, held)) = rx.recv().await {
                    let Some(inner) = weak.upgrade() else { break };
                    let client = Client { inner };
                    client.release_held(&resource, &held).await;
                }
            });
            tx
        });
        let _ = tx.send((resource, held));
    }

    /// Releases whatever a lock holds, ignoring the outcome (used after failures and on drop).
    pub(crate) async fn release_held(&self, resource: &str, held: &Held) {
        match held {
            Held::Redis(token) => self.release_quietly(resource, token).await,
            #[cfg(feature = "etcd")]
            Held::Etcd(h) => {
                if let Backend::Etcd(e) = &self.inner.backend {
                    let _ = e.release(h).await;
                }
            }
        }
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

fn check_resource(resource: &str) -> Result<()> {
    if resource.is_empty() {
        return Err(Error::config(
            "resource",
            "the resource name is empty; name what the lock protects, e.g. \"order:42\"",
        ));
    }
    Ok(())
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
