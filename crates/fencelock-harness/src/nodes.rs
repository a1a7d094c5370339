//! The servers of a run: independent Redis nodes, the members of one etcd cluster or of one
//! ZooKeeper ensemble, or one PostgreSQL server. The nemesis acts on them by index through one
//! interface.

use std::io;
use std::thread;
use std::time::Duration;

use std::sync::Mutex;

use fencelock_testkit::{
    EtcdCluster, Persistence, Postgres, RedisCluster, RedisNode, RedisOptions, SentinelGroup,
    ZooKeeperEnsemble,
};

use crate::mode::Mode;

/// How long the nemesis waits for an etcd cluster to be whole again after an episode.
const SETTLE: Duration = Duration::from_secs(30);

/// The servers of one mode's run.
#[derive(Debug)]
pub enum Nodes {
    /// Independent Redis nodes, each under the clock-shift shim.
    Redis(Vec<RedisNode>),
    /// One etcd cluster.
    Etcd(EtcdCluster),
    /// One ZooKeeper ensemble.
    ZooKeeper(ZooKeeperEnsemble),
    /// One PostgreSQL server.
    Postgres(Postgres),
    /// A Redis Cluster as one node, and the server the last `kill` killed (to restart).
    Cluster(RedisCluster, Mutex<Option<usize>>),
    /// A Sentinel group as one node, and the server the last `kill` killed.
    Sentinel(SentinelGroup, Mutex<Option<usize>>),
}

/// How long a failover may take in the test kit's groups (node timeouts of a few seconds).
const FAILOVER: Duration = Duration::from_secs(30);

/// The slot of the tag the harness's cluster URL gives every key (the default, `{fencelock}`).
fn tag_slot() -> u16 {
    fencelock::protocol::key_slot("{fencelock}")
}

/// An error for what a kind of server cannot do.
fn unsupported(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, what.to_string())
}

impl Nodes {
    /// Starts the servers `mode` runs: Redis nodes with the clock shim (the mode's AOF node
    /// persisting with `appendfsync always`), or a 3-member etcd cluster.
    ///
    /// # Errors
    ///
    /// When a server cannot be started (binary missing, not ready in time).
    pub fn start(mode: Mode) -> io::Result<Nodes> {
        match mode {
            Mode::ZooKeeper => return ZooKeeperEnsemble::start(mode.nodes()).map(Nodes::ZooKeeper),
            Mode::Postgres => return Postgres::start().map(Nodes::Postgres),
            Mode::Cluster => {
                return RedisCluster::start().map(|c| Nodes::Cluster(c, Mutex::new(None)))
            }
            Mode::Sentinel => {
                return SentinelGroup::start().map(|s| Nodes::Sentinel(s, Mutex::new(None)))
            }
            _ => {}
        }
        if mode.consensus() {
            return EtcdCluster::start(mode.nodes()).map(Nodes::Etcd);
        }
        let aof = mode.aof_node();
        let nodes = thread::scope(|s| {
            let handles: Vec<_> = (0..mode.nodes())
                .map(|i| {
                    let mut opts = RedisOptions::new().clock_shift(true);
                    if Some(i) == aof {
                        opts = opts.persistence(Persistence::AofAlways);
                    }
                    s.spawn(move || RedisNode::start_with(opts))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("node start panicked")))
                })
                .collect::<io::Result<Vec<_>>>()
        })?;
        Ok(Nodes::Redis(nodes))
    }

    /// How many servers.
    pub fn len(&self) -> usize {
        match self {
            Nodes::Redis(n) => n.len(),
            Nodes::Etcd(c) => c.len(),
            Nodes::ZooKeeper(z) => z.members().len(),
            Nodes::Postgres(_) | Nodes::Cluster(..) | Nodes::Sentinel(..) => 1,
        }
    }

    /// Whether there are none (never, once started).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The client port of server `i`.
    pub fn port(&self, i: usize) -> u16 {
        match self {
            Nodes::Redis(n) => n[i].port(),
            Nodes::Etcd(c) => c.member(i).client_port(),
            Nodes::ZooKeeper(z) => z.member(i).port(),
            Nodes::Postgres(p) => p.port(),
            // The clients go where the slot map or the Sentinels send them: this port's proxy
            // stands unused.
            Nodes::Cluster(c, _) => c.node(0).port(),
            Nodes::Sentinel(s, _) => s.sentinel_ports()[0],
        }
    }

    /// The URL a client uses for a server reached on `port` (the proxy's).
    pub fn url(&self, port: u16) -> String {
        match self {
            Nodes::Redis(_) => format!("redis://127.0.0.1:{port}/0"),
            Nodes::Etcd(_) => format!("etcd://127.0.0.1:{port}"),
            Nodes::ZooKeeper(_) => format!("zk://127.0.0.1:{port}"),
            Nodes::Postgres(_) => format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            Nodes::Cluster(c, _) => c.url(),
            Nodes::Sentinel(s, _) => s.url(),
        }
    }

    /// The server that holds the lock keys now: the tag's primary, or the Sentinels' primary.
    fn primary(&self) -> io::Result<usize> {
        match self {
            Nodes::Cluster(c, _) => c.slot_owner(tag_slot()),
            Nodes::Sentinel(s, _) => s.primary(),
            _ => Err(unsupported("not a group that fails over")),
        }
    }

    /// A failover on command, waited for; what happened.
    ///
    /// # Errors
    ///
    /// For other servers, or when no new primary takes over in time.
    pub fn failover(&self) -> io::Result<String> {
        let old = self.primary()?;
        match self {
            Nodes::Cluster(c, _) => {
                let replica = c.replica_of(old)?;
                c.node(replica).cli(&["CLUSTER", "FAILOVER"])?;
                let new = c.wait_for_owner_change(tag_slot(), old, FAILOVER)?;
                Ok(format!(
                    "CLUSTER FAILOVER: server {new} took the tag's slot from {old}"
                ))
            }
            Nodes::Sentinel(s, _) => {
                s.failover()?;
                let new = s.wait_for_failover(old, FAILOVER)?;
                Ok(format!(
                    "SENTINEL FAILOVER: server {new} took over from {old}"
                ))
            }
            _ => Err(unsupported("not a group that fails over")),
        }
    }

    /// The node list a client is given for the servers' `urls` (as [`Nodes::url`] makes them):
    /// the URLs, comma-separated; for a ZooKeeper ensemble, one `zk://` URL that lists every
    /// server, under the chroot `/harness`.
    pub fn client_nodes(&self, urls: &[String]) -> String {
        match self {
            Nodes::Cluster(c, _) => c.url(),
            Nodes::Sentinel(s, _) => s.url(),
            Nodes::ZooKeeper(_) => {
                let hosts: Vec<&str> = urls
                    .iter()
                    .map(|u| u.strip_prefix("zk://").unwrap_or(u))
                    .collect();
                format!("zk://{}/harness", hosts.join(","))
            }
            _ => urls.join(","),
        }
    }

    /// `pg_terminate_backend` of every other connection to the PostgreSQL server (the
    /// clients'); how many it ended.
    ///
    /// # Errors
    ///
    /// For other servers, or when `psql` fails.
    pub fn terminate_backends(&self) -> io::Result<usize> {
        let Nodes::Postgres(p) = self else {
            return Err(unsupported("only PostgreSQL has backends to terminate"));
        };
        let out = p.psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
        )?;
        out.trim()
            .parse()
            .map_err(|_| io::Error::other(format!("pg_terminate_backend answered {out:?}")))
    }

    /// kill -9 of server `i`.
    ///
    /// # Errors
    ///
    /// When the process cannot be reaped.
    pub fn kill(&self, i: usize) -> io::Result<()> {
        match self {
            Nodes::Redis(n) => n[i].kill(),
            Nodes::Etcd(c) => c.member(i).kill(),
            Nodes::ZooKeeper(z) => z.member(i).kill(),
            Nodes::Postgres(p) => p.kill(),
            Nodes::Cluster(c, killed) => {
                let i = self.primary()?;
                *killed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(i);
                c.node(i).kill()
            }
            Nodes::Sentinel(s, killed) => {
                let i = self.primary()?;
                *killed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(i);
                s.node(i).kill()
            }
        }
    }

    /// Restarts server `i` (a Redis node comes back empty unless it persists; an etcd member
    /// with its data) and waits until it serves.
    ///
    /// # Errors
    ///
    /// When it does not serve in time.
    pub fn restart(&self, i: usize) -> io::Result<()> {
        match self {
            Nodes::Redis(n) => n[i].restart(),
            Nodes::Etcd(c) => c.member(i).restart(),
            Nodes::ZooKeeper(z) => z.member(i).restart(),
            Nodes::Postgres(p) => p.restart(),
            Nodes::Cluster(c, killed) => {
                let i = killed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                i.map_or(Ok(()), |i| c.node(i).restart())
            }
            Nodes::Sentinel(s, killed) => {
                let i = killed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                i.map_or(Ok(()), |i| s.node(i).restart())
            }
        }
    }

    /// `FLUSHALL` on Redis node `i`: its data is gone, its process and run id stay.
    ///
    /// # Errors
    ///
    /// For an etcd member (no such command), or when the node does not answer `OK`.
    pub fn flushall(&self, i: usize) -> io::Result<()> {
        match self {
            Nodes::Redis(n) => {
                let reply = n[i].cli(&["FLUSHALL"])?;
                if reply.trim() == "OK" {
                    Ok(())
                } else {
                    Err(io::Error::other(format!("FLUSHALL answered {reply:?}")))
                }
            }
            _ => Err(unsupported("only plain Redis nodes take FLUSHALL here")),
        }
    }

    /// Marks every Redis node new, as `fencelock up` marks the nodes it starts
    /// ([`fencelock::protocol::new_node_marker`]): none has held a lock, so clients with restart
    /// quarantine count them at once instead of holding each out for the longest TTL from when
    /// they first see it. Nothing to do for etcd members.
    ///
    /// # Errors
    ///
    /// When a node does not answer.
    pub fn mark_new(&self) -> io::Result<()> {
        if let Nodes::Redis(n) = self {
            for node in n {
                let marker = fencelock::protocol::new_node_marker(&node.run_id()?);
                node.cli(&["SET", fencelock::protocol::NODE_MARKER_KEY, &marker])?;
            }
        }
        Ok(())
    }

    /// Whether Redis node `i` shows no trace of an earlier data loss the clients still act on:
    /// with `quarantine`, its marker says no lock it may have lost can still be live (`<run id>
    /// clear`, written by the client that saw its quarantine end); with `fencing`, it has its
    /// fence counter again (a node that lost it is seeded by a later grant). An etcd member, or
    /// a node that does not answer, is not settled; a ZooKeeper or PostgreSQL server always is.
    pub fn settled(&self, i: usize, quarantine: bool, fencing: bool) -> bool {
        let n = match self {
            Nodes::Redis(n) => n,
            // Its tokens come from the server's own sequence or zxid, and no client keeps a
            // state of a loss: nothing to settle.
            Nodes::ZooKeeper(_) | Nodes::Postgres(_) => return true,
            // Their keys carry the tag or move with failovers: the clients' quarantine judges
            // them, the nemesis does not wait.
            Nodes::Cluster(..) | Nodes::Sentinel(..) => return true,
            Nodes::Etcd(_) => return false,
        };
        let marker_clear = || {
            n[i].cli(&["GET", fencelock::protocol::NODE_MARKER_KEY])
                .is_ok_and(|m| m.ends_with(" clear"))
        };
        let has_counter = || {
            n[i].cli(&["EXISTS", fencelock::protocol::FENCE_COUNTER_KEY])
                .is_ok_and(|e| e.trim() == "1")
        };
        (!quarantine || marker_clear()) && (!fencing || has_counter())
    }

    /// SIGSTOP of server `i`.
    ///
    /// # Errors
    ///
    /// When it is not running.
    pub fn pause(&self, i: usize) -> io::Result<()> {
        match self {
            Nodes::Redis(n) => n[i].pause(),
            Nodes::Etcd(c) => c.member(i).pause(),
            Nodes::ZooKeeper(z) => z.member(i).pause(),
            Nodes::Postgres(_) => Err(unsupported(
                "SIGSTOP of the postmaster leaves its backends serving",
            )),
            Nodes::Cluster(..) | Nodes::Sentinel(..) => Err(unsupported(
                "pausing a primary is not a fault the lock claims to survive",
            )),
        }
    }

    /// SIGCONT of server `i`.
    ///
    /// # Errors
    ///
    /// When it is not running.
    pub fn resume(&self, i: usize) -> io::Result<()> {
        match self {
            Nodes::Redis(n) => n[i].resume(),
            Nodes::Etcd(c) => c.member(i).resume(),
            Nodes::ZooKeeper(z) => z.member(i).resume(),
            Nodes::Postgres(_) | Nodes::Cluster(..) | Nodes::Sentinel(..) => Ok(()),
        }
    }

    /// Sets server `i`'s clock offset (Redis nodes under the shim only).
    ///
    /// # Errors
    ///
    /// For an etcd member: the shim cannot shift a Go binary's clock.
    pub fn set_clock_offset(&self, i: usize, offset_ms: i64) -> io::Result<()> {
        match self {
            Nodes::Redis(n) => n[i].set_clock_offset(offset_ms),
            Nodes::Etcd(_) => Err(unsupported("etcd ignores the LD_PRELOAD clock shim")),
            _ => Err(unsupported("the test kit starts it without the clock shim")),
        }
    }

    /// The etcd member the others follow, waiting up to 10 s for an election; `None` for Redis
    /// nodes or when no leader appears.
    pub fn leader(&self) -> Option<usize> {
        match self {
            Nodes::Redis(_) | Nodes::Postgres(_) | Nodes::Cluster(..) | Nodes::Sentinel(..) => None,
            Nodes::Etcd(c) => c.wait_for_leader(Duration::from_secs(10)).ok(),
            Nodes::ZooKeeper(z) => z.leader().ok(),
        }
    }

    /// After an episode: waits until every running etcd member is healthy again, so that the
    /// next episode never takes a second member out while one is still catching up (that would
    /// be a majority down, which no lock survives). Nothing to do for Redis nodes.
    pub fn settle(&self) {
        match self {
            Nodes::Etcd(c) => {
                let _ = c.wait_healthy(SETTLE);
            }
            Nodes::Cluster(..) | Nodes::Sentinel(..) => {
                // A primary serves the lock keys again (after a kill, once a replica took over).
                let deadline = std::time::Instant::now() + SETTLE;
                while self.primary().is_err() && std::time::Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(100));
                }
            }
            Nodes::ZooKeeper(z) => {
                let deadline = std::time::Instant::now() + SETTLE;
                while !z.members().iter().all(|m| m.serving())
                    && std::time::Instant::now() < deadline
                {
                    thread::sleep(Duration::from_millis(100));
                }
            }
            _ => {}
        }
    }
}
