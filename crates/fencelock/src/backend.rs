//! The one place that dispatches on the backend (and, with `etcd/` and `lib.rs`, the only one
//! that names the `etcd` feature; with `pglock/` and `lib.rs`, the `postgres-lock` feature; with
//! `zk/` and `lib.rs`, the `zookeeper` feature).
//! The backends offer the same crate-private operations: try acquire, acquire with a policy,
//! extend, release, keep alive. `Client` and `Lock` call these and never match on a backend
//! themselves. PostgreSQL offers the mutex only so far: its other primitives are refused
//! ([`Backend::offers`]) before any I/O. ZooKeeper offers the whole family.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::config::Config;
use crate::error::{Error, LostCause, Result};
use crate::keepalive::{GuardState, Stop};
use crate::node::NodeAddr;
use crate::pure::extension::Schedule;
use crate::pure::retry::RetryPolicy;
use crate::pure::vote::{VoteOutcome, Votes};
use crate::redis::{RedisBackend, RedisHeld};

/// The servers behind a client.
#[derive(Debug)]
pub(crate) enum Backend {
    Redis(Arc<RedisBackend>),
    #[cfg(feature = "etcd")]
    Etcd(Arc<crate::etcd::EtcdBackend>),
    #[cfg(feature = "postgres-lock")]
    Postgres(Arc<crate::pglock::PgBackend>),
    #[cfg(feature = "zookeeper")]
    ZooKeeper(Arc<crate::zk::ZkBackend>),
}

/// What a lock holds, with the backend that holds it: a lock can only be released, extended or
/// kept alive where it was taken, and that is true by construction.
#[derive(Clone)]
pub(crate) enum Held {
    Redis(Arc<RedisBackend>, RedisHeld),
    /// A read lock on Redis (`rwlock.rs`): released and extended by the readers' scripts.
    RedisShared(Arc<RedisBackend>, RedisHeld),
    #[cfg(feature = "etcd")]
    Etcd(Arc<crate::etcd::EtcdBackend>, crate::etcd::EtcdHeld),
    #[cfg(feature = "postgres-lock")]
    Postgres(Arc<crate::pglock::PgBackend>, crate::pglock::PgHeld),
    #[cfg(feature = "zookeeper")]
    ZooKeeper(Arc<crate::zk::ZkBackend>, crate::zk::ZkHeld),
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::Redis(_, h) => f.debug_tuple("Redis").field(h).finish(),
            Held::RedisShared(_, h) => f.debug_tuple("RedisShared").field(h).finish(),
            #[cfg(feature = "etcd")]
            Held::Etcd(_, h) => f.debug_tuple("Etcd").field(h).finish(),
            #[cfg(feature = "postgres-lock")]
            Held::Postgres(_, h) => f.debug_tuple("Postgres").field(h).finish(),
            #[cfg(feature = "zookeeper")]
            Held::ZooKeeper(_, h) => f.debug_tuple("ZooKeeper").field(h).finish(),
        }
    }
}

/// A lock just taken, before it becomes a [`crate::Lock`].
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) held: Held,
    pub(crate) fencing_token: Option<u64>,
    pub(crate) deadline: Instant,
    pub(crate) votes: Votes,
    /// A read lock in fencing mode: the last writer's token (see `Lock::last_writer_token`).
    pub(crate) last_writer: Option<u64>,
}

impl Backend {
    /// The backend the URLs' scheme names. No I/O.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] as the backend's own constructor, or for `etcd://` URLs in a
    /// build without the `etcd` feature.
    pub(crate) fn new(addrs: Vec<NodeAddr>, config: &Config) -> Result<Backend> {
        if addrs[0].scheme().is_redis() {
            return Ok(Backend::Redis(Arc::new(RedisBackend::new(addrs, config)?)));
        }
        if addrs[0].scheme().is_postgres() {
            #[cfg(feature = "postgres-lock")]
            return Ok(Backend::Postgres(Arc::new(crate::pglock::PgBackend::new(
                &addrs[0], config,
            )?)));
            #[cfg(not(feature = "postgres-lock"))]
            return Err(Error::config(
                "nodes",
                "postgres:// URLs need fencelock's `postgres-lock` feature, which this build does not include",
            ));
        }
        if addrs[0].scheme().is_zookeeper() {
            #[cfg(feature = "zookeeper")]
            return Ok(Backend::ZooKeeper(Arc::new(crate::zk::ZkBackend::new(
                &addrs[0], config,
            )?)));
            #[cfg(not(feature = "zookeeper"))]
            return Err(Error::config(
                "nodes",
                "zk:// URLs need fencelock's `zookeeper` feature, which this build does not include",
            ));
        }
        #[cfg(feature = "etcd")]
        {
            Ok(Backend::Etcd(Arc::new(crate::etcd::EtcdBackend::new(
                addrs, config,
            )?)))
        }
        #[cfg(not(feature = "etcd"))]
        {
            Err(Error::config(
                "nodes",
                "etcd:// URLs need fencelock's `etcd` feature, which this build does not include",
            ))
        }
    }

    /// How many nodes must grant: N/2+1 (1 for etcd, whose cluster decides by itself).
    pub(crate) fn quorum(&self) -> usize {
        match self {
            Backend::Redis(r) => r.quorum(),
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => 1,
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(_) => 1,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => 1,
        }
    }

    /// Waits, at most `bound`, until the releases that returned at a quorum (Redis) have reached
    /// their other nodes, or the lease revokes of calls cut short (etcd) ran. Returns whether
    /// they did.
    pub(crate) async fn settle_releases(&self, bound: Duration) -> bool {
        match self {
            Backend::Redis(r) => r.settle_releases(bound).await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.settle_releases(bound).await,
            // Releases run in the caller's call, never in the background.
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(_) => true,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(z) => z.settle_releases(bound).await,
        }
    }

    /// How many releases still run in the background (Redis: calls cut short, and releases
    /// that returned at a quorum; etcd: the lease revokes of calls cut short).
    pub(crate) fn background_pending(&self) -> usize {
        match self {
            Backend::Redis(r) => r.background_pending(),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.background_pending(),
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(_) => 0,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(z) => z.background_pending(),
        }
    }

    /// Opens every node's connection now, returning once a quorum is connected (Redis), or the
    /// database's connection (PostgreSQL); etcd connects on first use.
    pub(crate) async fn connect_quorum(&self) -> Votes {
        match self {
            Backend::Redis(r) => r.connect_quorum().await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => Votes::default(),
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(p) => p.connect_now().await,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(z) => z.connect_now().await,
        }
    }

    /// Opens every node's connection now (Redis), or the database's (PostgreSQL); etcd
    /// connects on first use.
    pub(crate) async fn connect(&self) -> Votes {
        match self {
            Backend::Redis(r) => r.connect_all().await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => Votes::default(),
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(p) => p.connect_now().await,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(z) => z.connect_now().await,
        }
    }

    /// One attempt to take `keys`.
    ///
    /// # Errors
    ///
    /// As `Client::try_acquire_many`.
    pub(crate) async fn try_acquire(&self, keys: &Arc<[String]>) -> Result<Grant> {
        match self {
            Backend::Redis(r) => {
                let grant = r.attempt(keys, crate::redis::Wait::No).await?;
                Ok(redis_grant(r, grant))
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => Ok(etcd_grant(e, e.try_acquire(keys).await?)),
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(p) => Ok(pg_grant(p, p.try_acquire(keys).await?)),
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(z) => Ok(zk_grant(z, z.try_acquire(keys).await?)),
        }
    }

    /// Takes `keys`, waiting as `policy` allows. `resumed`: when a wait split over several
    /// calls began (each call takes back the same place in line).
    ///
    /// # Errors
    ///
    /// As `Client::acquire_many_with`.
    pub(crate) async fn acquire(
        &self,
        keys: &Arc<[String]>,
        policy: &RetryPolicy,
        resumed: Option<SystemTime>,
    ) -> Result<Grant> {
        match self {
            Backend::Redis(r) => {
                let grant = r.acquire_waiting(keys, policy, resumed).await?;
                Ok(redis_grant(r, grant))
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => {
                let held = e.acquire(keys, policy.wait(), resumed.is_some()).await?;
                Ok(etcd_grant(e, held))
            }
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(p) => Ok(pg_grant(p, p.acquire(keys, policy).await?)),
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(z) => Ok(zk_grant(z, z.acquire(keys, policy.wait()).await?)),
        }
    }

    /// One attempt to take a read lock on `key` (see `rwlock.rs`).
    ///
    /// # Errors
    ///
    /// As `RwLock::try_read`.
    pub(crate) async fn try_read(&self, key: &str) -> Result<Grant> {
        match self {
            Backend::Redis(r) => Ok(reader_grant(r, r.read_attempt(key, None).await?)),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => Ok(etcd_grant(e, e.try_read(key).await?)),
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(_) => Err(crate::pglock::unsupported("a read-write lock")),
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(z) => Ok(zk_grant(z, z.try_read(key).await?)),
        }
    }

    /// Takes a read lock on `key`, waiting as `policy` allows.
    ///
    /// # Errors
    ///
    /// As `RwLock::read`.
    pub(crate) async fn read(&self, key: &str, policy: &RetryPolicy) -> Result<Grant> {
        match self {
            Backend::Redis(r) => Ok(reader_grant(r, r.read_waiting(key, policy).await?)),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => Ok(etcd_grant(e, e.read(key, policy.wait()).await?)),
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(_) => Err(crate::pglock::unsupported("a read-write lock")),
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(z) => Ok(zk_grant(z, z.read(key, policy.wait()).await?)),
        }
    }

    /// Releases `keys` if `token` still owns them (a token handed between processes). On etcd
    /// the token is the lock key, which names its lease: the release deletes the key, or, for a
    /// key without a use number (a lease of its own), revokes the lease, which deletes the keys.
    ///
    /// # Errors
    ///
    /// As `Client::release_by_owner`.
    pub(crate) async fn release_by_owner(&self, keys: &[String], token: &str) -> Result<Votes> {
        match self {
            Backend::Redis(r) => r.release_by_owner(keys, token).await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => {
                let held = e.held_by_token(&keys[0], token)?;
                e.release(&held).await.map(|()| Votes::default())
            }
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(p) => p.release_by_owner(keys, token).await,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(z) => z.release_by_owner(keys, token).await,
        }
    }

    /// Extends `keys` to a fresh TTL if `token` still owns them (on etcd: renews its lease).
    ///
    /// # Errors
    ///
    /// As `Client::extend_by_owner`.
    pub(crate) async fn extend_by_owner(&self, keys: &[String], token: &str) -> Result<Votes> {
        match self {
            Backend::Redis(r) => r.extend_by_owner(keys, token).await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => {
                let held = e.held_by_token(&keys[0], token)?;
                e.extend(&held, held.deadline).await.map(|(_, votes)| votes)
            }
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(p) => p.extend_by_owner(keys, token).await,
            // The node lives as long as its holder's session, which only its holder keeps.
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => Err(Error::config(
                "backend",
                "extending by owner value is not possible on zk://: a lock lives as long as its holder's session, which only the holder keeps alive",
            )),
        }
    }

    /// The Redis nodes, or an error naming the operation for other backends (the operations on
    /// a bare token exist on Redis only).
    #[cfg_attr(
        not(any(feature = "etcd", feature = "postgres-lock", feature = "zookeeper")),
        allow(unused_variables)
    )]
    pub(crate) fn redis(&self, what: &str) -> Result<&RedisBackend> {
        match self {
            Backend::Redis(r) => Ok(r),
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => Err(redis_only(what)),
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(_) => Err(redis_only(what)),
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => Err(redis_only(what)),
        }
    }

    /// Whether locks carry a fencing token only in fencing mode (Redis; on etcd every lock
    /// has its revision).
    pub(crate) fn tokens_need_fencing_mode(&self) -> bool {
        match self {
            Backend::Redis(_) => true,
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => false,
            // Every lock has its sequence's token.
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(_) => false,
            // Every lock has its node's czxid.
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => false,
        }
    }

    /// Refuses, before any I/O, a primitive the backend does not offer: on `postgres://`,
    /// semaphores, read-write locks and elections (`what` names it). ZooKeeper offers them all.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the primitive and the backend.
    #[cfg_attr(not(feature = "postgres-lock"), allow(unused_variables))]
    pub(crate) fn offers(&self, what: &str) -> Result<()> {
        #[cfg(feature = "postgres-lock")]
        if let Backend::Postgres(_) = self {
            return Err(crate::pglock::unsupported(what));
        }
        Ok(())
    }

    /// Takes a permit of a semaphore: one try with `policy` `None`, else waiting as it allows.
    /// Returns the slot and its grant. `mine`: the slots the calling task holds through this
    /// client (Redis does not ask for them; on etcd a held slot is never free anyway).
    ///
    /// # Errors
    ///
    /// As `Semaphore::acquire_with` (without a policy: as `Semaphore::try_acquire`).
    pub(crate) async fn acquire_permit(
        &self,
        permits: &Permits<'_>,
        policy: Option<&RetryPolicy>,
    ) -> Result<(usize, Grant)> {
        match self {
            Backend::Redis(r) => {
                let slots = crate::redis::permit::PermitSlots {
                    name: permits.name,
                    line: permits.line,
                    slots: permits.slots,
                    mine: permits.mine,
                };
                let (i, grant) = r.acquire_permit(&slots, policy).await?;
                Ok((i, redis_grant(r, grant)))
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => {
                let slots: Vec<String> = permits.slots.iter().map(|s| s[0].clone()).collect();
                let keys = crate::etcd::PermitKeys {
                    name: permits.name,
                    line: permits.line,
                    slots: &slots,
                };
                let (i, held) = e
                    .acquire_permit(&keys, policy.map(RetryPolicy::wait))
                    .await?;
                Ok((i, etcd_grant(e, held)))
            }
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(_) => Err(crate::pglock::unsupported("a semaphore")),
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(z) => {
                let slots: Vec<String> = permits.slots.iter().map(|s| s[0].clone()).collect();
                let (i, grant) = z
                    .acquire_permit(permits.name, &slots, policy.map(RetryPolicy::wait))
                    .await?;
                Ok((i, zk_grant(z, grant)))
            }
        }
    }

    /// Where the leaders of the election whose lock resource is `key` are announced: the log
    /// `log` on Redis nodes, the lock keys themselves on etcd. No I/O.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] on a backend without elections (`postgres://`).
    #[cfg_attr(
        not(any(feature = "etcd", feature = "zookeeper")),
        allow(unused_variables)
    )]
    pub(crate) fn election_log(&self, key: &str, log: &str) -> Result<ElectionLog> {
        match self {
            Backend::Redis(r) => Ok(ElectionLog::Redis(r.election_log(key, log))),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => Ok(ElectionLog::Etcd(e.clone(), key.to_string())),
            #[cfg(feature = "postgres-lock")]
            Backend::Postgres(_) => Err(crate::pglock::unsupported("an election")),
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(z) => Ok(ElectionLog::ZooKeeper(z.clone(), key.to_string())),
        }
    }
}

/// A semaphore, as the backends take its permits.
#[derive(Debug)]
pub(crate) struct Permits<'a> {
    /// The semaphore's name, for errors.
    pub(crate) name: &'a str,
    /// The resource whose line orders the waiters.
    pub(crate) line: &'a str,
    /// Each slot's resource (a lock of one key).
    pub(crate) slots: &'a [Arc<[String]>],
    /// The slots the calling task holds already through this client.
    pub(crate) mine: &'a [bool],
}

/// Where an election's leaders are announced and read back (see `election.rs`).
#[derive(Debug, Clone)]
pub(crate) enum ElectionLog {
    Redis(crate::redis::election::ElectionLog),
    #[cfg(feature = "etcd")]
    Etcd(Arc<crate::etcd::EtcdBackend>, String),
    /// The election's lock resource: the leader's node holds the announcement.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(Arc<crate::zk::ZkBackend>, String),
}

/// The leaders of an election as they change, in term order.
#[derive(Debug)]
pub(crate) enum LeaderStream {
    Redis(Box<crate::redis::election::LogReader>),
    #[cfg(feature = "etcd")]
    Etcd(Box<crate::etcd::LeaderWatch>),
    #[cfg(feature = "zookeeper")]
    ZooKeeper(Box<crate::zk::LeaderWatch>),
}

impl ElectionLog {
    /// Announces the holder of `held` as the leader of term `term` with `value`.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] (naming `name`, with each node's answer) when the entry did not
    /// reach a quorum of Redis nodes; [`Error::Lost`] when the lock's key was gone (on Redis: on
    /// too many nodes for a quorum) or the validity ran out.
    pub(crate) async fn announce(
        &self,
        name: &str,
        held: &Held,
        term: u64,
        value: &str,
    ) -> Result<()> {
        match (self, held) {
            (ElectionLog::Redis(log), Held::Redis(_, h)) => {
                log.append(h.owner(), term, value).await.map_err(|votes| {
                    let resource = name.to_string();
                    // The key gone on so many nodes that no quorum could have appended: the
                    // lock was lost before its announcement (as etcd reports it).
                    let not_held = votes
                        .as_slice()
                        .iter()
                        .filter(|v| v.outcome == VoteOutcome::NotHeld)
                        .count();
                    if not_held > votes.len() - log.quorum() {
                        Error::Lost {
                            resource,
                            votes,
                            cause: LostCause::NotHeld,
                        }
                    } else {
                        Error::Unavailable { resource, votes }
                    }
                })
            }
            #[cfg(feature = "etcd")]
            (ElectionLog::Etcd(..), Held::Etcd(e, h)) => e.proclaim(h, value).await,
            #[cfg(feature = "zookeeper")]
            (ElectionLog::ZooKeeper(..), Held::ZooKeeper(z, h)) if !h.shared => {
                z.proclaim(h, value).await
            }
            // An election's lock comes from the election's own client (one backend for both),
            // and it is a mutex, never a read lock.
            _ => Err(Error::config(
                "backend",
                "the lock is not one this election took (another backend, or a read lock)",
            )),
        }
    }

    /// Takes back the announcement of term `term` with `value` after a campaign that failed:
    /// on Redis, removes the log entry from every node that answers (best effort); on etcd,
    /// nothing (the release deletes the key, which is the announcement).
    pub(crate) async fn withdraw(&self, term: u64, value: &str) {
        match self {
            ElectionLog::Redis(log) => log.withdraw(term, value).await,
            #[cfg(feature = "etcd")]
            ElectionLog::Etcd(..) => {}
            // As on etcd: the announcement is the leader's node, which the release deletes.
            #[cfg(feature = "zookeeper")]
            ElectionLog::ZooKeeper(..) => {}
        }
    }

    /// A stream of the leaders from the latest one on. No I/O until it is read.
    pub(crate) fn leaders(&self) -> LeaderStream {
        match self {
            ElectionLog::Redis(log) => LeaderStream::Redis(Box::new(log.reader())),
            #[cfg(feature = "etcd")]
            ElectionLog::Etcd(e, key) => {
                LeaderStream::Etcd(Box::new(crate::etcd::LeaderWatch::new(e.clone(), key)))
            }
            #[cfg(feature = "zookeeper")]
            ElectionLog::ZooKeeper(z, key) => {
                LeaderStream::ZooKeeper(Box::new(crate::zk::LeaderWatch::new(z.clone(), key)))
            }
        }
    }
}

impl LeaderStream {
    /// The next leader, its term and value; cancel-safe.
    pub(crate) async fn next(&mut self) -> (u64, String) {
        match self {
            LeaderStream::Redis(r) => r.next().await,
            #[cfg(feature = "etcd")]
            LeaderStream::Etcd(w) => w.next().await,
            #[cfg(feature = "zookeeper")]
            LeaderStream::ZooKeeper(w) => w.next().await,
        }
    }
}

impl Held {
    /// The owner value (Redis) or the lock key's name (etcd).
    pub(crate) fn owner(&self) -> &str {
        match self {
            Held::Redis(_, h) | Held::RedisShared(_, h) => h.owner(),
            #[cfg(feature = "etcd")]
            Held::Etcd(_, h) => &h.key,
            #[cfg(feature = "postgres-lock")]
            Held::Postgres(_, h) => h.owner(),
            #[cfg(feature = "zookeeper")]
            Held::ZooKeeper(_, h) => h.owner(),
        }
    }

    /// The backend's name, which fencing tokens carry.
    pub(crate) fn backend_name(&self) -> &'static str {
        match self {
            Held::Redis(..) | Held::RedisShared(..) => "redis",
            #[cfg(feature = "etcd")]
            Held::Etcd(..) => "etcd",
            #[cfg(feature = "postgres-lock")]
            Held::Postgres(..) => "postgres",
            #[cfg(feature = "zookeeper")]
            Held::ZooKeeper(..) => "zookeeper",
        }
    }

    /// Extends the lock before `deadline` (its validity deadline), retrying failures within the
    /// validity left (the extension engine's rule); returns the new deadline.
    ///
    /// # Errors
    ///
    /// As `Lock::extend`.
    pub(crate) async fn extend(
        &self,
        keys: &[String],
        deadline: Instant,
    ) -> Result<(Instant, Votes)> {
        match self {
            Held::Redis(r, h) => r.extend_held(keys, h, deadline).await,
            Held::RedisShared(r, h) => r.extend_reader(&keys[0], h, deadline).await,
            #[cfg(feature = "etcd")]
            Held::Etcd(e, h) => e.extend(h, deadline).await,
            #[cfg(feature = "postgres-lock")]
            Held::Postgres(p, h) => p.extend(h, deadline).await,
            #[cfg(feature = "zookeeper")]
            Held::ZooKeeper(z, h) => z.extend(h, deadline).await,
        }
    }

    /// Releases the lock on every node.
    ///
    /// # Errors
    ///
    /// As `Lock::release`.
    pub(crate) async fn release(&self, keys: &[String]) -> Result<Votes> {
        match self {
            Held::Redis(r, h) => r.release_held(keys, h).await,
            Held::RedisShared(r, h) => r.release_reader(&keys[0], h, true).await,
            #[cfg(feature = "etcd")]
            Held::Etcd(e, h) => e.release(h).await.map(|()| Votes::default()),
            #[cfg(feature = "postgres-lock")]
            Held::Postgres(p, h) => p.release(h).await,
            #[cfg(feature = "zookeeper")]
            Held::ZooKeeper(z, h) => z.release(h).await,
        }
    }

    /// The same lock, held through `backend` (a client's fresh connections, for a release sent
    /// from another runtime); `None` when `backend` is of another kind.
    pub(crate) fn through(&self, backend: &Backend) -> Option<Held> {
        match (self, backend) {
            (Held::Redis(_, h), Backend::Redis(r)) => Some(Held::Redis(r.clone(), h.clone())),
            (Held::RedisShared(_, h), Backend::Redis(r)) => {
                Some(Held::RedisShared(r.clone(), h.clone()))
            }
            #[cfg(feature = "etcd")]
            (Held::Etcd(_, h), Backend::Etcd(e)) => Some(Held::Etcd(e.clone(), h.clone())),
            #[cfg(feature = "postgres-lock")]
            (Held::Postgres(_, h), Backend::Postgres(p)) => {
                Some(Held::Postgres(p.clone(), h.clone()))
            }
            #[cfg(feature = "zookeeper")]
            (Held::ZooKeeper(_, h), Backend::ZooKeeper(z)) => {
                Some(Held::ZooKeeper(z.clone(), h.clone()))
            }
            #[cfg(any(feature = "etcd", feature = "postgres-lock", feature = "zookeeper"))]
            _ => None,
        }
    }

    /// Releases the lock, ignoring the outcome (a dropped lock).
    pub(crate) async fn release_quietly(&self, keys: &[String]) {
        match self {
            Held::Redis(r, h) => r.release_held_quietly(keys, h).await,
            Held::RedisShared(r, h) => {
                r.release_reader_quietly(&keys[0], h.owner(), h.line())
                    .await;
            }
            #[cfg(feature = "etcd")]
            Held::Etcd(e, h) => {
                let _ = e.release(h).await;
            }
            #[cfg(feature = "postgres-lock")]
            Held::Postgres(p, h) => {
                let _ = p.release(h).await;
            }
            #[cfg(feature = "zookeeper")]
            Held::ZooKeeper(z, h) => {
                let _ = z.release(h).await;
            }
        }
    }

    /// Starts keeping the lock alive: it joins its client's extension engine for its backend
    /// (`keepalive.rs`). The returned [`Stop`] ends it.
    pub(crate) fn keep_alive(
        &self,
        keys: Arc<[String]>,
        state: Arc<GuardState>,
        schedule: Schedule,
    ) -> Stop {
        match self {
            Held::Redis(r, h) => r.keep_alive(keys, h, state, schedule),
            Held::RedisShared(r, h) => r.keep_alive_reader(keys, h, state, schedule),
            #[cfg(feature = "etcd")]
            Held::Etcd(e, h) => e.keep_alive_held(h, state, schedule),
            #[cfg(feature = "postgres-lock")]
            Held::Postgres(p, h) => p.keep_alive_held(h, state, schedule),
            #[cfg(feature = "zookeeper")]
            Held::ZooKeeper(z, h) => z.keep_alive_held(h, state, schedule),
        }
    }
}

impl Held {
    /// Records a write lock's fencing token for the readers of `key` (see `rwlock.rs`), before
    /// `deadline`.
    ///
    /// # Errors
    ///
    /// As `RwLock::write`'s recording step.
    pub(crate) async fn record_writer(
        &self,
        key: &str,
        token: u64,
        deadline: Instant,
    ) -> Result<()> {
        match self {
            Held::Redis(r, h) => r.record_writer(key, h.owner(), token, deadline).await,
            Held::RedisShared(..) => Err(Error::config(
                "rwlock",
                "a read lock has no fencing token to record",
            )),
            #[cfg(feature = "etcd")]
            Held::Etcd(e, h) => e.record_writer(h).await,
            #[cfg(feature = "postgres-lock")]
            Held::Postgres(..) => Err(crate::pglock::unsupported("a read-write lock")),
            #[cfg(feature = "zookeeper")]
            Held::ZooKeeper(z, h) => z.record_writer(h).await,
        }
    }
}

/// The refusal of an operation that exists on Redis only, on an etcd, PostgreSQL or ZooKeeper
/// client.
#[cfg(any(feature = "etcd", feature = "postgres-lock", feature = "zookeeper"))]
fn redis_only(what: &str) -> Error {
    Error::config(
        "backend",
        format!("{what} works on Redis nodes only; with etcd or PostgreSQL, hold the Lock and call its methods"),
    )
}

fn redis_grant(backend: &Arc<RedisBackend>, grant: crate::redis::Grant) -> Grant {
    Grant {
        held: Held::Redis(backend.clone(), grant.held),
        fencing_token: grant.fencing_token,
        deadline: grant.deadline,
        votes: grant.votes,
        last_writer: None,
    }
}

fn reader_grant(backend: &Arc<RedisBackend>, read: crate::redis::rwlock::ReadGrant) -> Grant {
    let grant = read.grant;
    Grant {
        held: Held::RedisShared(backend.clone(), grant.held),
        fencing_token: None,
        deadline: grant.deadline,
        votes: grant.votes,
        last_writer: read.last_writer,
    }
}

#[cfg(feature = "etcd")]
fn etcd_grant(backend: &Arc<crate::etcd::EtcdBackend>, held: crate::etcd::EtcdHeld) -> Grant {
    Grant {
        fencing_token: (!held.shared).then_some(held.revision),
        deadline: held.deadline,
        votes: held.votes.clone(),
        last_writer: held.last_writer,
        held: Held::Etcd(backend.clone(), held),
    }
}

#[cfg(feature = "postgres-lock")]
fn pg_grant(backend: &Arc<crate::pglock::PgBackend>, grant: crate::pglock::PgGrant) -> Grant {
    Grant {
        fencing_token: Some(grant.held.token),
        deadline: grant.deadline,
        votes: grant.votes,
        last_writer: None,
        held: Held::Postgres(backend.clone(), grant.held),
    }
}

#[cfg(feature = "zookeeper")]
fn zk_grant(backend: &Arc<crate::zk::ZkBackend>, grant: crate::zk::ZkGrant) -> Grant {
    Grant {
        fencing_token: (!grant.held.shared).then_some(grant.held.token),
        deadline: grant.deadline,
        votes: grant.votes,
        last_writer: grant.last_writer,
        held: Held::ZooKeeper(backend.clone(), grant.held),
    }
}
