//! The ZooKeeper backend (feature `zookeeper`): Curator's InterProcessMutex recipe, whose
//! fencing token is the creation zxid (`czxid`) of the holder's node.
//!
//! # How a lock is taken
//!
//! 1. Create an EPHEMERAL_SEQUENTIAL node `<chroot>/fencelock/locks/<resource>/<owner>-lock-`
//!    (the directories are CONTAINER nodes, made on first use; the server removes them once
//!    empty). The server appends a sequence number: the waiter's place in line. The owner value
//!    (random, 128 bits) in the name finds the node again when the create's answer was lost
//!    (Curator's protected mode).
//! 2. List the directory. The node with the lowest sequence holds the lock. Any other waiter
//!    watches only the node just before its own (no herd: a release wakes one waiter) and lists
//!    again when it goes, or every third of the session timeout in case a watch was lost. Waiters
//!    are thus served in creation order (FIFO).
//! 3. A waiter that gives up (`try_acquire` finding the lock held, a wait that timed out, a
//!    cancelled call) deletes its node, so it blocks no one behind it: in the call when it can,
//!    else from a background task (counted, as etcd's lease revokes are) that tries again while
//!    the ensemble does not answer. Its session's end would remove it too, but a session
//!    outlives a call.
//!
//! # Tokens
//!
//! The token is the holder's node's `czxid`: the zxid of the transaction that created it.
//! Zxids number the ensemble's transactions in the order its leader commits them (the epoch in
//! the high 32 bits grows with every new leader), so they only grow. Sequence numbers are given
//! in the same order within a directory. A waiter is granted the lock only when no node older
//! than its own is left, and its list is read after its own create (a server applies
//! transactions in zxid order and answers a client's requests in order), so every node created
//! before it is either seen or already gone: grants follow creation order, and a later grant's
//! node has a larger czxid. When the directory was removed empty and made again (its sequence
//! restarts), every earlier node was gone before the later one was created: larger again.
//!
//! # Sessions and the lost signal
//!
//! One ZooKeeper session per client, opened on first use (session timeout: the configured TTL,
//! within the server's bounds: by default 2 to 20 ticks), and again after it expired. The
//! client crate keeps it alive with its heartbeats: that is what keeps a lock, which lasts as
//! long as its node, as long as the session. Each lock keeps its own validity as the other
//! backends do: a request that the session answered, sent at `t`, proves the session alive at
//! the server after `t`, so the server cannot expire it before `t + session timeout`
//! ([`timing::deadline`], less the drift allowance). An extension is `sync` then a look at the
//! lock's node (still there, still this session's, still this czxid); the engine
//! (`keepalive.rs`) runs it every TTL/3 and fires the lost signal when one finds the node gone
//! or the session expired, or a margin before the deadline when none got through (a lost
//! connection, a server down): before the server could expire the session and hand the lock to
//! the next waiter.
//!
//! # Failures
//!
//! Each request gets at most the node timeout (at least [`timing::MIN_REQUEST_TIMEOUT`]). A
//! create whose answer was lost leaves a node that the call's cleanup finds by its owner value.
//! A release whose answer was lost reports [`Error::Unavailable`]; the node goes with the
//! session at the latest.
//!
//! # Not yet
//!
//! Semaphores, read-write locks, elections and several resources in one lock are refused with
//! [`Error::InvalidConfig`]; no TLS, no authentication, no metrics of waits.

pub(crate) mod line;
pub(crate) mod timing;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::config::Config;
use crate::error::{Error, ErrorKind, LostCause, Result};
use crate::keepalive::{Engine, Extends, GuardState, Outcome, Stop};
use crate::node::NodeAddr;
use crate::pure::extension::{Attempt, Schedule};
use crate::pure::node_error::{FailureCause, NodeError};
use crate::pure::token::OwnerToken;
use crate::pure::vote::{NodeVote, VoteOutcome, Votes};

/// The lock nodes: ephemeral (they go with the session), sequential (their place in line).
const LOCK_NODE: zk::CreateOptions<'static> =
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
/// The directories: containers, which the server removes once their last child is gone.
const DIRECTORY: zk::CreateOptions<'static> =
    zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());

/// One ZooKeeper ensemble, reached through one session (opened on first use).
pub(crate) struct ZkBackend {
    /// `host:port,host:port`, without the chroot (paths carry it, so that it is made on first
    /// use as the other directories are).
    hosts: String,
    chroot: String,
    label: Arc<str>,
    ttl: Duration,
    drift: Duration,
    request_timeout: Duration,
    connect_timeout: Duration,
    /// The data of our nodes: the holder label as text, or empty (`holder.rs`).
    holder: Vec<u8>,
    session: tokio::sync::Mutex<Option<zk::Client>>,
    engine: Engine<ZkHeld>,
    /// Deletes of the nodes of calls cut short, running in the background.
    cleanups: Arc<AtomicUsize>,
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("ensemble", &self.label)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// A lock held in the ensemble: its node and the session that owns it.
#[derive(Clone)]
pub(crate) struct ZkHeld {
    pub(crate) resource: Arc<str>,
    /// The node's name in its directory (the lock's owner value).
    name: Arc<str>,
    /// The node's full path.
    path: Arc<str>,
    /// The node's czxid: the fencing token (0 for a lock named by its owner value).
    pub(crate) token: u64,
    /// The session that owns the node (`None` for a lock named by its owner value).
    session: Option<zk::Client>,
}

impl ZkHeld {
    pub(crate) fn owner(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Debug for ZkHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The name holds the owner value, with which anyone can release the lock: a prefix.
        let shown: String = self.name.chars().take(8).collect();
        f.debug_struct("ZkHeld")
            .field("resource", &self.resource)
            .field("node", &format_args!("{shown}…"))
            .field("token", &self.token)
            .finish()
    }
}

/// A lock just taken.
#[derive(Debug)]
pub(crate) struct ZkGrant {
    pub(crate) held: ZkHeld,
    pub(crate) deadline: Instant,
    pub(crate) votes: Votes,
}

/// Why a request did not succeed: the server's answer, or none in time.
#[derive(Debug, Clone)]
enum Fail {
    Zk(zk::Error),
    TimedOut,
}

impl Fail {
    fn outcome(&self) -> VoteOutcome {
        match self {
            Fail::TimedOut | Fail::Zk(zk::Error::Timeout) => VoteOutcome::TimedOut,
            Fail::Zk(e) => VoteOutcome::Failed(node_error(e)),
        }
    }

    /// Whether the session is gone for good (its nodes with it).
    fn session_ended(&self) -> bool {
        matches!(
            self,
            Fail::Zk(zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed)
        )
    }
}

impl ZkBackend {
    /// A backend for the ensemble of `addr`. No I/O.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when the URL is not a `zk://` URL.
    pub(crate) fn new(addr: &NodeAddr, config: &Config) -> Result<ZkBackend> {
        let ensemble = addr.zookeeper().ok_or_else(|| {
            Error::config(
                format!("node URL {addr}"),
                "not a ZooKeeper URL; write it as zk://host:2181,host:2181/chroot",
            )
        })?;
        let hosts = ensemble
            .connect_string()
            .strip_suffix(ensemble.chroot.as_str())
            .unwrap_or_default()
            .to_string();
        Ok(ZkBackend {
            hosts,
            chroot: ensemble.chroot.clone(),
            label: Arc::from(addr.redacted()),
            ttl: config.ttl(),
            drift: config.drift(),
            request_timeout: config.node_timeout().max(timing::MIN_REQUEST_TIMEOUT),
            connect_timeout: config.connect_timeout(),
            holder: config
                .holder()
                .map(|h| h.to_string().into_bytes())
                .unwrap_or_default(),
            session: tokio::sync::Mutex::default(),
            engine: Engine::default(),
            cleanups: Arc::default(),
        })
    }

    /// The session, opened if there is none or the last one ended (expired, closed).
    async fn session(&self) -> std::result::Result<zk::Client, Fail> {
        let mut slot = self.session.lock().await;
        if let Some(client) = slot.as_ref().filter(|c| !c.state().is_terminated()) {
            return Ok(client.clone());
        }
        *slot = None;
        let connector = zk::Client::connector()
            .with_session_timeout(self.ttl)
            .with_fail_eagerly();
        let client = tokio::time::timeout(
            self.connect_timeout + self.request_timeout,
            connector.connect(&self.hosts),
        )
        .await
        .map_err(|_| Fail::TimedOut)?
        .map_err(Fail::Zk)?;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Opens the session now: the ensemble's vote.
    pub(crate) async fn connect_now(&self) -> Votes {
        let started = Instant::now();
        let outcome = match self.session().await {
            Ok(_) => VoteOutcome::Granted,
            Err(fail) => fail.outcome(),
        };
        self.votes(outcome, started.elapsed())
    }

    /// Runs one request within `limit` (and the request timeout).
    async fn call<T>(
        &self,
        limit: Duration,
        request: impl std::future::Future<Output = std::result::Result<T, zk::Error>>,
    ) -> std::result::Result<T, Fail> {
        match tokio::time::timeout(limit.min(self.request_timeout), request).await {
            Ok(result) => result.map_err(Fail::Zk),
            Err(_) => Err(Fail::TimedOut),
        }
    }

    fn votes(&self, outcome: VoteOutcome, latency: Duration) -> Votes {
        Votes::from(vec![NodeVote::new(self.label.clone(), outcome, latency)])
    }

    fn unavailable(&self, resource: &str, fail: &Fail, started: Instant) -> Error {
        Error::Unavailable {
            resource: resource.to_string(),
            votes: self.votes(fail.outcome(), started.elapsed()),
        }
    }

    /// The drift allowance for `session`, the negotiated session timeout.
    fn drift(&self, session: Duration) -> Duration {
        timing::drift_for(session, self.ttl, self.drift)
    }

    /// One attempt to take `keys` (one resource): joins the line and leaves it again unless
    /// first.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for more than one resource (before any I/O);
    /// [`Error::Contention`] when another waiter is ahead; [`Error::Unavailable`] when the
    /// ensemble did not answer in time or failed; [`Error::TooSlow`] when the answer came too
    /// late to leave any validity (the node is deleted again).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect: a cancelled attempt's node is deleted from a background task.
    pub(crate) async fn try_acquire(&self, keys: &[String]) -> Result<ZkGrant> {
        self.take(keys, None).await
    }

    /// Takes `keys`, waiting in line at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`ZkBackend::try_acquire`], but waiting instead of [`Error::Contention`];
    /// [`Error::Timeout`] when `wait` ran out first (the node is deleted).
    ///
    /// # Cancel safety
    ///
    /// As [`ZkBackend::try_acquire`].
    pub(crate) async fn acquire(&self, keys: &[String], wait: Duration) -> Result<ZkGrant> {
        self.take(keys, Some(wait)).await
    }

    /// Takes `keys`: one look (`wait` `None`), or waiting in line, and joining it again after
    /// a failure (a server down, an election, the session expired) while `wait` lasts.
    async fn take(&self, keys: &[String], wait: Option<Duration>) -> Result<ZkGrant> {
        let resource = one_resource(keys)?;
        let Some(wait) = wait else {
            return self.take_once(resource, None).await;
        };
        let started = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let left = wait.saturating_sub(started.elapsed());
            let err = match self.take_once(resource, Some(left)).await {
                Ok(grant) => return Ok(grant),
                Err(Error::Timeout { resource, last, .. }) => {
                    return Err(Error::Timeout {
                        resource,
                        attempts,
                        last,
                    })
                }
                Err(e) if matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::TooSlow) => e,
                Err(e) => return Err(e),
            };
            if started.elapsed() + timing::RETRY_DELAY >= wait {
                return Err(Error::Timeout {
                    resource: resource.to_string(),
                    attempts,
                    last: Box::new(err),
                });
            }
            tokio::time::sleep(timing::RETRY_DELAY).await;
        }
    }

    async fn take_once(&self, resource: &str, wait: Option<Duration>) -> Result<ZkGrant> {
        let owner = OwnerToken::generate().map_err(|e| {
            Error::config(
                "random source",
                format!("the OS random number generator failed: {e}"),
            )
        })?;
        let started = Instant::now();
        let client = self
            .session()
            .await
            .map_err(|f| self.unavailable(resource, &f, started))?;
        let mut node = PendingNode {
            client,
            dir: line::lock_dir(&self.chroot, resource),
            owner: owner.as_str().to_string(),
            name: None,
            armed: true,
            request_timeout: self.request_timeout,
            cleanups: self.cleanups.clone(),
        };
        let outcome = match wait {
            None => self.wait_for_turn(resource, &mut node, false).await,
            Some(wait) => {
                match tokio::time::timeout(wait, self.wait_for_turn(resource, &mut node, true))
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(_elapsed) => Err(Error::Timeout {
                        resource: resource.to_string(),
                        attempts: 1,
                        last: Box::new(Error::Contention {
                            resource: resource.to_string(),
                            votes: self.votes(VoteOutcome::HeldByOther, started.elapsed()),
                        }),
                    }),
                }
            }
        };
        if outcome.is_err() {
            node.remove().await;
        }
        outcome
    }

    /// Joins the line (creating the node, and the directories if missing) and waits until first
    /// (`wait`) or looks once.
    async fn wait_for_turn(
        &self,
        resource: &str,
        node: &mut PendingNode,
        wait: bool,
    ) -> Result<ZkGrant> {
        let started = Instant::now();
        let client = node.client.clone();
        let unavailable = |f: Fail| self.unavailable(resource, &f, started);
        let prefix = format!("{}/{}", node.dir, line::node_prefix(&node.owner));
        // The directory may be missing (first use), or removed by the server between our
        // making it and our create (a container whose last child went): make it and try again.
        let mut tries = 0;
        let (stat, sequence) = loop {
            tries += 1;
            match self
                .call(
                    self.request_timeout,
                    client.create(&prefix, &self.holder, &LOCK_NODE),
                )
                .await
            {
                Err(Fail::Zk(zk::Error::NoNode)) if tries < 5 => {
                    match self
                        .call(self.request_timeout, client.mkdir(&node.dir, &DIRECTORY))
                        .await
                    {
                        Ok(()) | Err(Fail::Zk(zk::Error::NodeExists)) => {}
                        Err(f) => return Err(unavailable(f)),
                    }
                }
                Err(f) => return Err(unavailable(f)),
                Ok(created) => break created,
            }
        };
        let name = format!("{}{sequence}", line::node_prefix(&node.owner));
        node.name = Some(name.clone());
        let token = u64::try_from(stat.czxid)
            .ok()
            .filter(|t| *t > 0)
            .ok_or_else(|| {
                let why = NodeError::other(format!(
                    "the server returned no creation zxid ({}); ZooKeeper 3.5 or later is needed",
                    stat.czxid
                ));
                Error::Unavailable {
                    resource: resource.to_string(),
                    votes: self.votes(VoteOutcome::Failed(why), started.elapsed()),
                }
            })?;
        let session = client.session_timeout();
        let recheck = (session / 3).max(Duration::from_millis(100));
        loop {
            let sent = Instant::now();
            let children = self
                .call(self.request_timeout, client.list_children(&node.dir))
                .await
                .map_err(unavailable)?;
            match line::place(&children, &name) {
                line::Place::First => {
                    let elapsed = started.elapsed();
                    let votes = self.votes(VoteOutcome::Granted, elapsed);
                    let Some(deadline) = timing::deadline(sent, session, self.drift(session))
                        .filter(|d| *d > Instant::now())
                    else {
                        return Err(Error::TooSlow {
                            resource: resource.to_string(),
                            votes,
                        });
                    };
                    node.armed = false;
                    let held = ZkHeld {
                        resource: Arc::from(resource),
                        path: Arc::from(format!("{}/{name}", node.dir)),
                        name: Arc::from(name.as_str()),
                        token,
                        session: Some(client.clone()),
                    };
                    return Ok(ZkGrant {
                        held,
                        deadline,
                        votes,
                    });
                }
                line::Place::Gone => {
                    let why = NodeError::other(
                        "our node left the line while we waited (the session expired, or it was deleted)",
                    );
                    return Err(Error::Unavailable {
                        resource: resource.to_string(),
                        votes: self.votes(VoteOutcome::Failed(why), started.elapsed()),
                    });
                }
                line::Place::Behind(predecessor) => {
                    if !wait {
                        return Err(Error::Contention {
                            resource: resource.to_string(),
                            votes: self.votes(VoteOutcome::HeldByOther, started.elapsed()),
                        });
                    }
                    let path = format!("{}/{predecessor}", node.dir);
                    let (stat, watcher) = self
                        .call(self.request_timeout, client.check_and_watch_stat(&path))
                        .await
                        .map_err(unavailable)?;
                    if stat.is_some() {
                        // Woken when it goes; a look every third of the session in case the
                        // watch was lost with a connection.
                        let _ = tokio::time::timeout(recheck, watcher.changed()).await;
                    }
                }
            }
        }
    }

    /// Checks that the lock's node is still there and its session's, within `budget`: a `sync`
    /// first, so that a server behind the leader has applied what the leader has (a session
    /// expired there, its nodes deleted).
    async fn extend_once(&self, held: &ZkHeld, budget: Duration) -> (Outcome, Votes) {
        if budget.is_zero() {
            let outcome = Outcome::failed(
                Attempt::TooLate,
                "the validity ran out before an extension was sent",
            );
            return (outcome, Votes::default());
        }
        let Some(client) = &held.session else {
            let outcome = Outcome::failed(
                Attempt::Impossible,
                "a lock named by its owner value lives as long as its holder's session; only the holder extends it",
            );
            return (outcome, Votes::default());
        };
        let started = Instant::now();
        let sync = client.sync(&held.path);
        let look = client.check_stat(&held.path);
        let answer = self
            .call(budget, async move {
                sync.await?;
                look.await
            })
            .await;
        let elapsed = started.elapsed();
        match answer {
            Ok(Some(stat))
                if u64::try_from(stat.czxid).ok() == Some(held.token)
                    && stat.ephemeral_owner == client.session_id().0 =>
            {
                let session = client.session_timeout();
                let outcome = match timing::deadline(started, session, self.drift(session)) {
                    Some(deadline) if deadline > Instant::now() => Outcome::extended(deadline),
                    _ => Outcome::failed(Attempt::TooLate, "the extension left no validity"),
                };
                (outcome, self.votes(VoteOutcome::Granted, elapsed))
            }
            Ok(_) => (
                Outcome::failed(
                    Attempt::Impossible,
                    "the lock's node is gone or another session's",
                ),
                self.votes(VoteOutcome::NotHeld, elapsed),
            ),
            Err(Fail::Zk(zk::Error::NoNode)) => (
                Outcome::failed(Attempt::Impossible, "the lock's node is gone"),
                self.votes(VoteOutcome::NotHeld, elapsed),
            ),
            Err(fail) if fail.session_ended() => (
                Outcome::failed(
                    Attempt::Impossible,
                    format!("the session that held the lock ended: {}", fail.outcome()),
                ),
                self.votes(fail.outcome(), elapsed),
            ),
            Err(fail) => (
                Outcome::failed(Attempt::Failed, fail.outcome().to_string()),
                self.votes(fail.outcome(), elapsed),
            ),
        }
    }

    /// Confirms the lock before `deadline` (its validity deadline), retrying failures within the
    /// validity left; returns the new deadline.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the node is gone or the session ended, or when no check got through
    /// before `deadline`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub(crate) async fn extend(
        &self,
        held: &ZkHeld,
        deadline: Instant,
    ) -> Result<(Instant, Votes)> {
        let retry = crate::pure::extension::retry_delay(self.ttl);
        crate::keepalive::extend_within(deadline, retry, |budget| self.extend_once(held, budget))
            .await
            .map_err(|(cause, votes)| Error::lost(held.resource.to_string(), votes, cause))
    }

    /// Deletes the lock's node.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the node was gone (the session expired, or it was deleted by its
    /// owner value elsewhere); [`Error::Unavailable`] when the ensemble did not answer (the node
    /// goes with the session at the latest).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a cancelled release leaves the node until the session ends.
    pub(crate) async fn release(&self, held: &ZkHeld) -> Result<Votes> {
        let started = Instant::now();
        let resource = held.resource.to_string();
        let client = match &held.session {
            Some(client) => client.clone(),
            None => self
                .session()
                .await
                .map_err(|f| self.unavailable(&resource, &f, started))?,
        };
        match self
            .call(self.request_timeout, client.delete(&held.path, None))
            .await
        {
            Ok(()) => Ok(self.votes(VoteOutcome::Granted, started.elapsed())),
            Err(Fail::Zk(zk::Error::NoNode)) => Err(Error::lost(
                resource,
                self.votes(VoteOutcome::NotHeld, started.elapsed()),
                LostCause::NotHeld,
            )),
            Err(fail) if fail.session_ended() => Err(Error::lost(
                resource,
                self.votes(fail.outcome(), started.elapsed()),
                LostCause::NotHeld,
            )),
            Err(fail) => Err(self.unavailable(&resource, &fail, started)),
        }
    }

    /// Releases `keys` if `owner` (a node's name, the lock's owner value) is there.
    ///
    /// # Errors
    ///
    /// As [`ZkBackend::release`].
    pub(crate) async fn release_by_owner(&self, keys: &[String], owner: &str) -> Result<Votes> {
        let resource = one_resource(keys)?;
        if line::sequence(owner).is_none() || owner.contains('/') {
            return Err(Error::config(
                "owner",
                "not the owner value of a ZooKeeper lock (<hex>-lock-<sequence>)",
            ));
        }
        let held = ZkHeld {
            resource: Arc::from(resource),
            path: Arc::from(format!(
                "{}/{owner}",
                line::lock_dir(&self.chroot, resource)
            )),
            name: Arc::from(owner),
            token: 0,
            session: None,
        };
        self.release(&held).await
    }

    /// Waits, at most `bound`, until the deletes of calls cut short ran; returns whether they
    /// did.
    pub(crate) async fn settle_releases(&self, bound: Duration) -> bool {
        let until = Instant::now() + bound;
        while self.cleanups.load(Ordering::Acquire) > 0 {
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// How many deletes of calls cut short still run.
    pub(crate) fn background_pending(&self) -> usize {
        self.cleanups.load(Ordering::Acquire)
    }

    /// Registers the lock with the client's extension engine; the returned [`Stop`] takes it
    /// out.
    pub(crate) fn keep_alive_held(
        self: &Arc<Self>,
        held: &ZkHeld,
        state: Arc<GuardState>,
        schedule: Schedule,
    ) -> Stop {
        self.engine
            .register(self, &held.resource, held.clone(), state, schedule)
    }
}

impl Extends for ZkBackend {
    type Lock = ZkHeld;

    /// Checks every lock of the batch once; the requests share the session's connection,
    /// which pipelines them.
    async fn extend_batch(
        self: Arc<Self>,
        locks: Vec<Arc<ZkHeld>>,
        budget: Duration,
    ) -> Vec<Outcome> {
        let attempts = locks.iter().map(|held| self.extend_once(held, budget));
        futures_util::future::join_all(attempts)
            .await
            .into_iter()
            .map(|(outcome, _)| outcome)
            .collect()
    }
}

/// A waiter's node while its call runs: deleted when the call gives up, in the call
/// ([`PendingNode::remove`]) or, when the call is cut short, from a background task
/// (`Drop`). Disarmed once the lock is granted.
struct PendingNode {
    client: zk::Client,
    dir: String,
    owner: String,
    /// The node's name once the create answered; before, the node (if any) is found by owner.
    name: Option<String>,
    armed: bool,
    request_timeout: Duration,
    cleanups: Arc<AtomicUsize>,
}

impl PendingNode {
    /// Deletes the node now. One try: if the ensemble did not answer (a lost connection), the
    /// node stays armed and its drop hands it to a background task that tries again.
    async fn remove(&mut self) {
        if !self.armed {
            return;
        }
        let done = delete_once(
            &self.client,
            &self.dir,
            &self.owner,
            self.name.as_deref(),
            self.request_timeout,
        )
        .await;
        if done {
            self.armed = false;
        }
    }
}

impl Drop for PendingNode {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (client, dir, owner, name) = (
            self.client.clone(),
            std::mem::take(&mut self.dir),
            std::mem::take(&mut self.owner),
            self.name.take(),
        );
        let timeout = self.request_timeout;
        let cleanups = self.cleanups.clone();
        cleanups.fetch_add(1, Ordering::AcqRel);
        runtime.spawn(async move {
            delete_node(&client, &dir, &owner, name.as_deref(), timeout).await;
            cleanups.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// Deletes the node `name` in `dir` (or, when the create's answer never came, the node of
/// `owner` if the create made one), trying again while the ensemble does not answer, until
/// the session ends (its nodes with it) or twice its timeout has passed: a waiter that joins
/// the line again in the same session must not find its old node ahead of it for long.
async fn delete_node(
    client: &zk::Client,
    dir: &str,
    owner: &str,
    name: Option<&str>,
    timeout: Duration,
) {
    let give_up = Instant::now() + client.session_timeout() * 2;
    while !delete_once(client, dir, owner, name, timeout).await {
        if Instant::now() >= give_up {
            tracing::debug!(
                dir,
                "ZooKeeper: a waiter's node was not deleted; it goes with the session"
            );
            return;
        }
        tokio::time::sleep(timing::RETRY_DELAY).await;
    }
}

/// One try of [`delete_node`]: whether it is done (deleted, not there, or the session ended).
async fn delete_once(
    client: &zk::Client,
    dir: &str,
    owner: &str,
    name: Option<&str>,
    timeout: Duration,
) -> bool {
    if client.state().is_terminated() {
        return true;
    }
    let name = match name {
        Some(name) => name.to_string(),
        None => match tokio::time::timeout(timeout, client.list_children(dir)).await {
            Ok(Ok(children)) => match line::find_own(&children, owner) {
                Some(name) => name.clone(),
                None => return true,
            },
            Ok(Err(zk::Error::NoNode)) => return true,
            Ok(Err(e)) => return Fail::Zk(e).session_ended(),
            Err(_elapsed) => return false,
        },
    };
    let path = format!("{dir}/{name}");
    match tokio::time::timeout(timeout, client.delete(&path, None)).await {
        Ok(Ok(()) | Err(zk::Error::NoNode)) => true,
        Ok(Err(e)) => Fail::Zk(e).session_ended(),
        Err(_elapsed) => false,
    }
}

/// The one resource of a lock: a lock of several is not offered on ZooKeeper yet.
fn one_resource(keys: &[String]) -> Result<&str> {
    match keys {
        [one] => Ok(one),
        _ => Err(unsupported("a lock of several resources")),
    }
}

/// The refusal of a primitive this backend does not offer yet.
pub(crate) fn unsupported(what: &str) -> Error {
    Error::config(
        "backend",
        format!("{what} is not supported on zk:// yet; use Redis or etcd nodes for it"),
    )
}

/// The client's error as a vote's failure.
fn node_error(e: &zk::Error) -> NodeError {
    let cause = match e {
        zk::Error::NoHosts => FailureCause::Refused,
        zk::Error::AuthFailed => FailureCause::Auth,
        zk::Error::NoAuth => FailureCause::NoPermission,
        zk::Error::NotReadOnly => FailureCause::ReadOnly,
        _ => FailureCause::Other,
    };
    let detail = match e {
        zk::Error::NoHosts => "no server of the ensemble accepted a connection".to_string(),
        other => other.to_string(),
    };
    NodeError::new(cause, detail)
}
