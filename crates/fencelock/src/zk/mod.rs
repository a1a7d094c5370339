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
//! A release whose answer was lost reports [`Error::Unavailable`] and hands the delete to a
//! background task that tries again (counted with the cleanups): the session, which would take
//! the node with it, lives on.
//!
//! # The family
//!
//! - Several resources: each resource's lock in turn, in sorted order (no deadlock between two
//!   clients naming them in opposite orders), all released if one fails or the call is cut
//!   short; the token is the largest czxid (the last node created), the release one `multi`.
//! - Read locks: nodes `<owner>-read-lock-<sequence>` in the lock's own line; a reader holds
//!   when no writer's node is ahead (and watches the nearest writer ahead), a writer (the
//!   lock itself) when first, readers ahead included: a waiting writer goes before the
//!   readers after it (Curator's InterProcessReadWriteLock). Writers record their token for
//!   readers in a persistent node per resource (`zk/semaphore.rs`).
//! - Semaphores: `zk/semaphore.rs`. Elections: `zk/election.rs`.
//!
//! # Not yet
//!
//! No TLS, no SASL, no metrics of waits. Digest authentication: a `zk://user:password@...`
//! URL authenticates its sessions (`addauth digest`) and makes every node with an ACL for that
//! identity only; a client that is refused (a wrong password, no user) gets
//! [`Error::InvalidConfig`] at once.

mod election;
pub(crate) mod line;
mod semaphore;
pub(crate) mod timing;

pub(crate) use election::LeaderWatch;

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
const LOCK_NODE: zk::CreateMode = zk::CreateMode::EphemeralSequential;
/// The directories: containers, which the server removes once their last child is gone.
const DIRECTORY: zk::CreateMode = zk::CreateMode::Container;

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
    /// The URL's `user:password` for digest authentication (a secret: never printed); with
    /// one, every node is made readable and writable by that identity only.
    digest: Option<String>,
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

/// A lock held in the ensemble: its nodes and the session that owns them.
#[derive(Clone)]
pub(crate) struct ZkHeld {
    pub(crate) resource: Arc<str>,
    /// The first node's name in its directory (the lock's owner value).
    name: Arc<str>,
    /// The nodes held, each with its czxid (0 for a lock named by its owner value): one for a
    /// lock, one per resource for a lock of several, the slot then the place in line for a
    /// permit. An extension checks each; the release deletes them in one transaction.
    nodes: Arc<[HeldNode]>,
    /// The fencing token: the node's czxid; the largest for a lock of several; the slot's for a
    /// permit; 0 for a read lock and for a lock named by its owner value.
    pub(crate) token: u64,
    /// A read lock (no token of its own).
    pub(crate) shared: bool,
    /// The session that owns the nodes (`None` for a lock named by its owner value).
    session: Option<zk::Client>,
}

/// One node a lock holds.
#[derive(Debug, Clone)]
struct HeldNode {
    path: String,
    czxid: u64,
}

impl ZkHeld {
    pub(crate) fn owner(&self) -> &str {
        &self.name
    }

    /// The first node's path (the lock's, the permit's slot).
    fn path(&self) -> &str {
        &self.nodes[0].path
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
    /// A read lock's: the token the last writer recorded (0 when none did).
    pub(crate) last_writer: Option<u64>,
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
            digest: addr.zk_digest(),
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
        let mut connector = zk::Client::connector()
            .with_session_timeout(self.ttl)
            .with_fail_eagerly();
        if let Some(digest) = &self.digest {
            connector = connector.with_auth("digest", digest.as_bytes());
        }
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

    /// How to create a node of `mode`: open to anyone, or with the URL's digest identity, to
    /// that identity only (ZooKeeper's `auth` scheme: the creator's authenticated ids).
    pub(super) fn options(&self, mode: zk::CreateMode) -> zk::CreateOptions<'static> {
        if self.digest.is_some() {
            mode.with_acls(zk::Acls::creator_all())
        } else {
            mode.with_acls(zk::Acls::anyone_all())
        }
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
        if let Fail::Zk(zk::Error::NoAuth | zk::Error::AuthFailed) = fail {
            // Not a passing failure: trying again cannot help.
            let who = if self.digest.is_some() {
                "the user and password in the URL (a wrong password is another identity)"
            } else {
                "the URL, which has no user (write zk://user:password@host/chroot)"
            };
            return Error::config(
                format!("node URL {}", self.label),
                format!(
                    "the ensemble refused this client access to the nodes of {resource:?} (it \
                     answered {}): they were made by another identity; check {who}",
                    if matches!(fail, Fail::Zk(zk::Error::NoAuth)) {
                        "NoAuth"
                    } else {
                        "AuthFailed"
                    }
                ),
            );
        }
        Error::Unavailable {
            resource: resource.to_string(),
            votes: self.votes(fail.outcome(), started.elapsed()),
        }
    }

    /// The drift allowance for `session`, the negotiated session timeout.
    fn drift(&self, session: Duration) -> Duration {
        timing::drift_for(session, self.ttl, self.drift)
    }

    /// One attempt to take `keys`: for each resource, in sorted order, joins its line and
    /// leaves it again unless first.
    ///
    /// # Errors
    ///
    /// [`Error::Contention`] when another waiter is ahead (on any of the resources: those
    /// taken already are released); [`Error::Unavailable`] when the ensemble did not answer in
    /// time or failed; [`Error::TooSlow`] when the answer came too late to leave any validity
    /// (the node is deleted again).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect: a cancelled attempt's nodes are deleted from a background task.
    pub(crate) async fn try_acquire(&self, keys: &[String]) -> Result<ZkGrant> {
        self.take(keys, None).await
    }

    /// Takes `keys`, waiting in line at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`ZkBackend::try_acquire`], but waiting instead of [`Error::Contention`];
    /// [`Error::Timeout`] when `wait` ran out first (the nodes are deleted).
    ///
    /// # Cancel safety
    ///
    /// As [`ZkBackend::try_acquire`].
    pub(crate) async fn acquire(&self, keys: &[String], wait: Duration) -> Result<ZkGrant> {
        self.take(keys, Some(wait)).await
    }

    /// One attempt at a read lock on `key`: no writer ahead in its line.
    ///
    /// # Errors
    ///
    /// As [`ZkBackend::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`ZkBackend::try_acquire`].
    pub(crate) async fn try_read(&self, key: &str) -> Result<ZkGrant> {
        self.read_as(key, None).await
    }

    /// A read lock on `key`, waiting in line at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`ZkBackend::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`ZkBackend::try_acquire`].
    pub(crate) async fn read(&self, key: &str, wait: Duration) -> Result<ZkGrant> {
        self.read_as(key, Some(wait)).await
    }

    async fn read_as(&self, key: &str, wait: Option<Duration>) -> Result<ZkGrant> {
        let line = Line::lock(&self.chroot, key, line::Rule::Shared);
        let grant = self
            .retrying(key, wait, |left| self.take_once(&line, left))
            .await?
            .1;
        let taken = Taken::new(self, grant);
        // Read after the grant: every writer granted before us recorded its token before its
        // release (`RwLock::write` records before it returns the lock), and its release came
        // before our grant.
        match self.read_writer_record(key).await {
            Ok(recorded) => {
                let mut grant = taken.keep();
                grant.last_writer = Some(recorded);
                Ok(grant)
            }
            Err(e) => {
                taken.release(self).await;
                Err(e)
            }
        }
    }

    /// Takes `keys`: one look (`wait` `None`), or waiting in line, and joining it again after
    /// a failure (a server down, an election, the session expired) while `wait` lasts. Several
    /// resources are taken one at a time in sorted order, so that two clients asking for
    /// `{a, b}` and `{b, a}` never hold one each while waiting for the other.
    async fn take(&self, keys: &[String], wait: Option<Duration>) -> Result<ZkGrant> {
        if let [one] = keys {
            let line = Line::lock(&self.chroot, one, line::Rule::Exclusive);
            let grant = self
                .retrying(one, wait, |left| self.take_once(&line, left))
                .await?;
            return Ok(grant.1);
        }
        let mut sorted: Vec<&String> = keys.iter().collect();
        sorted.sort();
        let started = Instant::now();
        let mut taken: Option<Taken<'_>> = None;
        for key in sorted {
            let left = wait.map(|w| w.saturating_sub(started.elapsed()));
            let line = Line::lock(&self.chroot, key, line::Rule::Exclusive);
            match self.retrying(key, left, |l| self.take_once(&line, l)).await {
                Ok((_, grant)) => match taken.as_mut() {
                    Some(t) => t.grants.push(grant),
                    None => taken = Some(Taken::new(self, grant)),
                },
                Err(e) => {
                    if let Some(t) = taken {
                        t.release(self).await;
                    }
                    return Err(e);
                }
            }
        }
        let grants = taken.map(|t| t.keep_all()).unwrap_or_default();
        combine(&keys[0], grants).ok_or_else(|| {
            Error::config(
                "resources",
                "the list of resources is empty; name at least one",
            )
        })
    }

    /// Runs `once` (one attempt with the wait left, `None` for one look) until it succeeds,
    /// fails for good, or `wait` runs out; failures of the ensemble are tried again.
    pub(super) async fn retrying<T, F, Fut>(
        &self,
        resource: &str,
        wait: Option<Duration>,
        mut once: F,
    ) -> Result<T>
    where
        F: FnMut(Option<Duration>) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let Some(wait) = wait else {
            return once(None).await;
        };
        let started = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let left = wait.saturating_sub(started.elapsed());
            let err = match once(Some(left)).await {
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

    /// One attempt in `line`: joins it, waits for a turn (at most `wait`; `None`: one look),
    /// and for a semaphore takes a free slot. Returns the slot (0 for a lock) and the grant.
    pub(super) async fn take_once(
        &self,
        line: &Line<'_>,
        wait: Option<Duration>,
    ) -> Result<(usize, ZkGrant)> {
        let resource = line.resource;
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
        let tag = match line.rule {
            line::Rule::Shared => line::reader_tag(owner.as_str()),
            _ => owner.as_str().to_string(),
        };
        let mut node = PendingNode {
            client,
            dir: line.dir.clone(),
            owner: tag,
            name: None,
            armed: true,
            slots: line.slots.is_some(),
            request_timeout: self.request_timeout,
            cleanups: self.cleanups.clone(),
        };
        let outcome = match wait {
            None => self.turn_then_slot(line, &mut node, false).await,
            Some(wait) => {
                match tokio::time::timeout(wait, self.turn_then_slot(line, &mut node, true)).await {
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
        match outcome {
            Ok(grant) => {
                node.armed = false;
                Ok(grant)
            }
            Err(e) => {
                node.remove().await;
                Err(e)
            }
        }
    }

    async fn turn_then_slot(
        &self,
        line: &Line<'_>,
        node: &mut PendingNode,
        wait: bool,
    ) -> Result<(usize, ZkGrant)> {
        let grant = self.wait_for_turn(line, node, wait).await?;
        match line.slots {
            None => Ok((0, grant)),
            Some(slots) => self.take_slot(line, slots, node, grant, wait).await,
        }
    }

    /// Joins the line (creating the node, and the directories if missing) and waits until its
    /// rule lets it in (`wait`) or looks once.
    async fn wait_for_turn(
        &self,
        line: &Line<'_>,
        node: &mut PendingNode,
        wait: bool,
    ) -> Result<ZkGrant> {
        let resource = line.resource;
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
                    client.create(&prefix, &self.holder, &self.options(LOCK_NODE)),
                )
                .await
            {
                Err(Fail::Zk(zk::Error::NoNode)) if tries < 5 => {
                    self.make_dir(&client, &node.dir, &line.dir_data)
                        .await
                        .map_err(unavailable)?;
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
        if let line::Rule::Permits(n) = line.rule {
            self.check_permits(line, &client, n, started).await?;
        }
        let session = client.session_timeout();
        let recheck = (session / 3).max(Duration::from_millis(100));
        loop {
            let sent = Instant::now();
            let children = self
                .call(self.request_timeout, client.list_children(&node.dir))
                .await
                .map_err(unavailable)?;
            let place = line::place(&children, &name, line.rule);
            if matches!(place, line::Place::Behind(_) | line::Place::Next) && !wait {
                return Err(Error::Contention {
                    resource: resource.to_string(),
                    votes: self.votes(VoteOutcome::HeldByOther, started.elapsed()),
                });
            }
            match place {
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
                    let held = ZkHeld {
                        resource: Arc::from(resource),
                        nodes: Arc::from(vec![HeldNode {
                            path: format!("{}/{name}", node.dir),
                            czxid: token,
                        }]),
                        name: Arc::from(name.as_str()),
                        token,
                        shared: line.rule == line::Rule::Shared,
                        session: Some(client.clone()),
                    };
                    return Ok(ZkGrant {
                        held,
                        deadline,
                        votes,
                        last_writer: None,
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
                line::Place::Next => {
                    // Any holder's release lets us in: watch the directory, after a look that
                    // sets the watch (a release between the two looks is in the second).
                    let (children, watcher) = self
                        .call(
                            self.request_timeout,
                            client.list_and_watch_children(&node.dir),
                        )
                        .await
                        .map_err(unavailable)?;
                    if line::place(&children, &name, line.rule) == line::Place::Next {
                        let _ = tokio::time::timeout(recheck, watcher.changed()).await;
                    }
                }
                line::Place::Behind(predecessor) => {
                    let path = format!("{}/{predecessor}", node.dir);
                    let (stat, watcher) = self
                        .call(self.request_timeout, client.check_and_watch_stat(&path))
                        .await
                        .map_err(unavailable)?;
                    // A permit's waiter touches its node when it takes its slot (`take_slot`):
                    // one touched since our look was admitted then, and we may be next.
                    let admitted = matches!(line.rule, line::Rule::Permits(_))
                        && stat.as_ref().is_some_and(|s| s.version > 0);
                    if stat.is_some() && !admitted {
                        // Woken when it goes (or, for a permit, is admitted); a look every
                        // third of the session in case the watch was lost with a connection.
                        let _ = tokio::time::timeout(recheck, watcher.changed()).await;
                    }
                }
            }
        }
    }

    /// Makes the directory `dir` (a container, with `data`) and its parents.
    async fn make_dir(
        &self,
        client: &zk::Client,
        dir: &str,
        data: &[u8],
    ) -> std::result::Result<(), Fail> {
        if let Some((parent, _)) = dir.rsplit_once('/').filter(|(p, _)| !p.is_empty()) {
            match self
                .call(
                    self.request_timeout,
                    client.mkdir(parent, &self.options(DIRECTORY)),
                )
                .await
            {
                Ok(()) | Err(Fail::Zk(zk::Error::NodeExists)) => {}
                Err(f) => return Err(f),
            }
        }
        match self
            .call(
                self.request_timeout,
                client.create(dir, data, &self.options(DIRECTORY)),
            )
            .await
        {
            Ok(_) | Err(Fail::Zk(zk::Error::NodeExists)) => Ok(()),
            Err(f) => Err(f),
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
        let sync = client.sync(held.path());
        let looks: Vec<_> = held
            .nodes
            .iter()
            .map(|n| client.check_stat(&n.path))
            .collect();
        let answer = self
            .call(budget, async move {
                sync.await?;
                let stats = futures_util::future::join_all(looks).await;
                stats
                    .into_iter()
                    .collect::<std::result::Result<Vec<_>, _>>()
            })
            .await;
        let elapsed = started.elapsed();
        // Every node still there, created when we created it, and our session's.
        let ours = |stats: &[Option<zk::Stat>]| {
            stats.iter().zip(held.nodes.iter()).all(|(stat, node)| {
                stat.as_ref().is_some_and(|stat| {
                    u64::try_from(stat.czxid).ok() == Some(node.czxid)
                        && stat.ephemeral_owner == client.session_id().0
                })
            })
        };
        match answer {
            Ok(stats) if ours(&stats) => {
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
    /// owner value elsewhere); [`Error::Unavailable`] when the ensemble did not answer (a
    /// background task deletes the node once it answers, or the session's end does).
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
        let deleted = match &held.nodes[..] {
            [one] => {
                self.call(self.request_timeout, client.delete(&one.path, None))
                    .await
            }
            several => {
                // In one transaction: a permit's slot and its place in line go together (a
                // waiter admitted in between would find no free slot), as do the nodes of a
                // lock of several resources.
                let mut multi = client.new_multi_writer();
                for node in several {
                    multi
                        .add_delete(&node.path, None)
                        .map_err(|e| self.unavailable(&resource, &Fail::Zk(e), started))?;
                }
                let answer = self
                    .call(self.request_timeout, async move {
                        multi.commit().await.map_err(zk::Error::from)
                    })
                    .await;
                if let Err(Fail::Zk(zk::Error::NoNode)) = answer {
                    // One node gone (its session expired): the others go one by one, and the
                    // lock is reported lost.
                    for node in several {
                        let _ = self
                            .call(self.request_timeout, client.delete(&node.path, None))
                            .await;
                    }
                }
                answer.map(|_| ())
            }
        };
        match deleted {
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
            Err(fail) => {
                self.release_in_background(held);
                Err(self.unavailable(&resource, &fail, started))
            }
        }
    }

    /// Deletes `held`'s nodes from a background task that tries again while the ensemble does
    /// not answer, after a release that got no answer (a server down, an election): the session
    /// lives on, so they would otherwise stay, held, until the client goes.
    fn release_in_background(&self, held: &ZkHeld) {
        let Some(client) = held.session.clone() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let paths: Vec<String> = held.nodes.iter().map(|n| n.path.clone()).collect();
        let timeout = self.request_timeout;
        let cleanups = self.cleanups.clone();
        cleanups.fetch_add(1, Ordering::AcqRel);
        runtime.spawn(async move {
            for path in paths {
                if let Some((dir, name)) = path.rsplit_once('/') {
                    delete_node(&client, dir, "", Some(name), timeout, false).await;
                }
            }
            cleanups.fetch_sub(1, Ordering::AcqRel);
        });
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
            nodes: Arc::from(vec![HeldNode {
                path: format!("{}/{owner}", line::lock_dir(&self.chroot, resource)),
                czxid: 0,
            }]),
            name: Arc::from(owner),
            token: 0,
            shared: line::is_reader(owner),
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
    /// A semaphore's waiter: a slot node holding our owner value goes too.
    slots: bool,
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
            self.slots,
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
        let (timeout, slots) = (self.request_timeout, self.slots);
        let cleanups = self.cleanups.clone();
        cleanups.fetch_add(1, Ordering::AcqRel);
        runtime.spawn(async move {
            delete_node(&client, &dir, &owner, name.as_deref(), timeout, slots).await;
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
    slots: bool,
) {
    let give_up = Instant::now() + client.session_timeout() * 2;
    while !delete_once(client, dir, owner, name, timeout, slots).await {
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
    slots: bool,
) -> bool {
    if client.state().is_terminated() {
        return true;
    }
    if slots && !semaphore::delete_slot_of(client, dir, owner, timeout).await {
        return false;
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

/// The one resource of a lock named by its owner value: a lock of several resources is
/// released by its holder only.
fn one_resource(keys: &[String]) -> Result<&str> {
    match keys {
        [one] => Ok(one),
        _ => Err(Error::config(
            "resources",
            "on zk://, a lock of several resources is released by its holder (the Lock), not by owner value",
        )),
    }
}

/// One line of waiters: where it is and what its waiters wait for.
#[derive(Debug)]
pub(super) struct Line<'a> {
    /// The lock's resource or the semaphore's name, for errors.
    pub(super) resource: &'a str,
    pub(super) dir: String,
    pub(super) rule: line::Rule,
    /// The directory's data when we make it: a semaphore's permit count.
    pub(super) dir_data: Vec<u8>,
    /// A semaphore's slot resources: an admitted waiter takes a free one.
    pub(super) slots: Option<&'a [String]>,
}

impl<'a> Line<'a> {
    /// The line of the lock (or read-write lock) of `resource`.
    fn lock(chroot: &str, resource: &'a str, rule: line::Rule) -> Line<'a> {
        Line {
            resource,
            dir: line::lock_dir(chroot, resource),
            rule,
            dir_data: Vec::new(),
            slots: None,
        }
    }
}

/// Locks taken within a call that is not over: if the call is cut short, their nodes are
/// deleted from a background task (counted with the waiters' cleanups).
struct Taken<'a> {
    backend: &'a ZkBackend,
    grants: Vec<ZkGrant>,
}

impl<'a> Taken<'a> {
    fn new(backend: &'a ZkBackend, grant: ZkGrant) -> Taken<'a> {
        Taken {
            backend,
            grants: vec![grant],
        }
    }

    /// The one grant, kept.
    fn keep(mut self) -> ZkGrant {
        self.grants.remove(0)
    }

    fn keep_all(mut self) -> Vec<ZkGrant> {
        std::mem::take(&mut self.grants)
    }

    /// Releases them now.
    async fn release(mut self, backend: &ZkBackend) {
        for grant in std::mem::take(&mut self.grants) {
            let _ = backend.release(&grant.held).await;
        }
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if self.grants.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for grant in std::mem::take(&mut self.grants) {
            let Some(client) = grant.held.session.clone() else {
                continue;
            };
            for node in grant.held.nodes.iter() {
                let Some((dir, name)) = node.path.rsplit_once('/') else {
                    continue;
                };
                let (client, dir, name) = (client.clone(), dir.to_string(), name.to_string());
                let timeout = self.backend.request_timeout;
                let cleanups = self.backend.cleanups.clone();
                cleanups.fetch_add(1, Ordering::AcqRel);
                runtime.spawn(async move {
                    delete_node(&client, &dir, "", Some(&name), timeout, false).await;
                    cleanups.fetch_sub(1, Ordering::AcqRel);
                });
            }
        }
    }
}

/// One lock of the resources of `grants` (taken in sorted order), named by `resource`: its
/// token is the largest czxid (the last node created), its deadline the earliest.
fn combine(resource: &str, grants: Vec<ZkGrant>) -> Option<ZkGrant> {
    let first = grants.first()?;
    let token = grants.iter().map(|g| g.held.token).max()?;
    let deadline = grants.iter().map(|g| g.deadline).min()?;
    let votes = grants.last()?.votes.clone();
    let nodes: Vec<HeldNode> = grants
        .iter()
        .flat_map(|g| g.held.nodes.iter().cloned())
        .collect();
    let held = ZkHeld {
        resource: Arc::from(resource),
        name: first.held.name.clone(),
        nodes: Arc::from(nodes),
        token,
        shared: false,
        session: first.held.session.clone(),
    };
    Some(ZkGrant {
        held,
        deadline,
        votes,
        last_writer: None,
    })
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
