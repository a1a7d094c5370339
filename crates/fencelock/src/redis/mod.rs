//! The Redis backend: one node (efficiency lock) or N independent nodes (Redlock), self-contained
//! the way `etcd/` is. `backend.rs` dispatches to it; nothing outside this folder knows how a
//! Redis lock is taken.
//!
//! Where each step lives:
//!
//! - `round.rs`: the round engine. One request per node, all in flight at once, under one
//!   per-node deadline; a round returns as soon as its outcome is known (a quorum granted, or too
//!   many refused for one), in one of four named modes ([`round::Mode`]); the requests still in
//!   flight finish in a background task. Restart quarantine is judged here.
//! - `ops.rs`: what each round sends (acquire, write-back, extend, release, leave the line,
//!   the batched extension) and how a node's reply becomes an answer.
//! - `redlock.rs`: one attempt of the Redlock algorithm (round 1, the fencing write-back, the
//!   validity), settling a release or an extension into a result, release on failure.
//! - `line.rs`: waiting: the retry loop, the waiting line of one key, the wake-ups.
//! - `extender.rs`: the extension engine's batch on Redis: one pipeline per node.
//! - `scripts.rs`: the Lua scripts; `conn.rs`: one connection per node; `watch.rs`: pub/sub
//!   wake-ups; `order.rs`: a release waits for its acquisition's requests not yet handed to
//!   their connection; `quarantine.rs`:
//!   restarted nodes; `sentinel.rs`: the primary a Sentinel group names; `cluster.rs`: the
//!   shard a cluster's tag lives on; `tagged.rs`: the connection that tags a cluster node's keys; `describe.rs`: a driver error in words.

pub(crate) mod cluster;
mod conn;
mod describe;
pub(crate) mod election;
mod extender;
pub(crate) mod guard;
mod inflight;
mod line;
mod nodeset;
mod ops;
mod order;
pub(crate) mod permit;
pub(crate) mod quarantine;
mod redlock;
mod reseed;
mod round;
pub(crate) mod rwlock;
#[cfg(test)]
mod script_checks;
pub(crate) mod scripts;
pub(crate) mod sentinel;
mod tagged;
mod tls;
mod undo;
pub(crate) mod version;
mod watch;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::conn::{NodeConn, Quarantine};
pub(crate) use self::ops::Wait;
use self::order::Stragglers;
use self::watch::ReleaseWatch;
use crate::config::Config;
use crate::error::Error;
use crate::keepalive::Engine;
use crate::node::NodeAddr;
use crate::pure::token::OwnerToken;
use crate::pure::vote::Votes;

/// The Redis nodes of one client, and the settings that never change from one call to the next.
#[derive(Debug)]
pub(crate) struct RedisBackend {
    /// Shared with the requests of a round: judging a restarted node reads the others.
    nodes: Arc<[Arc<NodeConn>]>,
    /// Every node's index, for the rounds that go to all of them.
    all: Box<[usize]>,
    /// Per node, the acquisition requests still in flight after their round returned, which a
    /// release of the same token waits for (see `order.rs`).
    stragglers: Box<[Arc<Stragglers>]>,
    /// How many releases that returned at a quorum still have requests in flight (see
    /// `round.rs`, `Mode::Release`).
    background: Arc<tokio::sync::watch::Sender<usize>>,
    quorum: usize,
    watch: Arc<ReleaseWatch>,
    settings: Settings,
    /// The client's extension engine for its Redis locks (`keepalive.rs`; the batch it sends
    /// is in `extender.rs`).
    engine: Engine<extender::ExtendedLock>,
    /// The largest fencing token this client proposed or saw: the next proposal starts above it
    /// (`guard.rs`).
    last_token: AtomicU64,
    /// Resources this client released while others waited for them, until when: asking for
    /// one of them again within that time joins the end of the line (see `line.rs`).
    waited_for: Mutex<HashMap<String, Instant>>,
    /// Which nodes answer, for the warning when one stops (`telemetry.rs`).
    health: Arc<crate::telemetry::NodeHealth>,
    /// The holder label every acquisition carries in its keys' value, as text (`holder.rs`).
    holder: Option<Box<str>>,
}

/// The client's settings that every round reads.
#[derive(Debug, Clone, Copy)]
struct Settings {
    ttl: Duration,
    node_timeout: Duration,
    connect_timeout: Duration,
    drift: Duration,
    fencing: bool,
    /// Whether metrics carry the resource (`telemetry.rs`).
    resource_label: bool,
}

/// What a Redis lock holds: the owner value, and the waiter id if the lock was taken in line
/// (it leaves the line with its release).
#[derive(Debug, Clone)]
pub(crate) struct RedisHeld {
    token: OwnerToken,
    line: Option<Arc<str>>,
}

impl RedisHeld {
    /// The owner value (what `Lock::owner` shows).
    pub(crate) fn owner(&self) -> &str {
        self.token.as_str()
    }

    /// The waiter id the lock was taken under, if it queued.
    pub(crate) fn line(&self) -> Option<&str> {
        self.line.as_deref()
    }
}

/// A lock just taken on Redis.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) held: RedisHeld,
    pub(crate) fencing_token: Option<u64>,
    pub(crate) deadline: Instant,
    pub(crate) votes: Votes,
}

impl RedisBackend {
    /// The backend for the Redis nodes at `addrs`. No I/O: connections open on first use.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when a node's URL cannot make a client.
    pub(crate) fn new(addrs: Vec<NodeAddr>, config: &Config) -> Result<Self, Error> {
        let quarantine = Quarantine {
            enabled: config.quarantine(),
            own_ttl: config.ttl(),
        };
        let tls = config.tls().load()?;
        let quorum = crate::pure::quorum::quorum(addrs.len());
        let set = Arc::new(nodeset::NodeSet::new(
            addrs.iter().map(NodeAddr::host_port).collect(),
            config.node_set_check(),
            (config.node_timeout() / 2).min(config.connect_timeout()),
        ));
        let nodes = addrs
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                let place = (i, set.clone());
                NodeConn::new(a, config.connect_timeout(), quarantine, Some(&tls), place)
                    .map(Arc::new)
            })
            .collect::<Result<Arc<[_]>, _>>()?;
        let watch = Arc::new(ReleaseWatch::new(
            nodes.iter().map(|n| n.target()).collect(),
            nodes.iter().map(|n| n.addr().hash_tag()).collect(),
        ));
        let n = nodes.len();
        Ok(RedisBackend {
            all: (0..nodes.len()).collect(),
            stragglers: nodes.iter().map(|_| Arc::default()).collect(),
            background: Arc::new(tokio::sync::watch::Sender::new(0)),
            nodes,
            quorum,
            watch,
            settings: Settings {
                ttl: config.ttl(),
                node_timeout: config.node_timeout(),
                connect_timeout: config.connect_timeout(),
                drift: config.drift(),
                fencing: config.fencing(),
                resource_label: config.metrics_resource_label(),
            },
            engine: Engine::default(),
            last_token: AtomicU64::new(0),
            waited_for: Mutex::default(),
            health: Arc::new(crate::telemetry::NodeHealth::new(n, quorum, false)),
            holder: config.holder().map(|h| h.to_string().into_boxed_str()),
        })
    }

    /// How many nodes must grant: N/2+1.
    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }
}
