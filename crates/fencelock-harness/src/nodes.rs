//! The servers of a run: independent Redis nodes, the members of one etcd cluster or of one
//! ZooKeeper ensemble, or one PostgreSQL server. The nemesis acts on them by index through one
//! interface.

use std::io;
use std::thread;
use std::time::Duration;

use fencelock_testkit::{
    EtcdCluster, Persistence, Postgres, RedisNode, RedisOptions, ZooKeeperEnsemble,
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
            Nodes::Postgres(_) => 1,
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
        }
    }

    /// The URL a client uses for a server reached on `port` (the proxy's).
    pub fn url(&self, port: u16) -> String {
        match self {
            Nodes::Redis(_) => format!("redis://127.0.0.1:{port}/0"),
            Nodes::Etcd(_) => format!("etcd://127.0.0.1:{port}"),
            Nodes::ZooKeeper(_) => format!("zk://127.0.0.1:{port}"),
            Nodes::Postgres(_) => format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        }
    }

    /// The node list a client is given for the servers' `urls` (as [`Nodes::url`] makes them):
    /// the URLs, comma-separated; for a ZooKeeper ensemble, one `zk://` URL that lists every
    /// server, under the chroot `/harness`.
    pub fn client_nodes(&self, urls: &[String]) -> String {
        match self {
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
            Nodes::Etcd(_) | Nodes::ZooKeeper(_) | Nodes::Postgres(_) => {
                Err(unsupported("only Redis has FLUSHALL"))
            }
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
            Nodes::Postgres(_) => Ok(()),
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
            Nodes::ZooKeeper(_) | Nodes::Postgres(_) => {
                Err(unsupported("the test kit starts it without the clock shim"))
            }
        }
    }

    /// The etcd member the others follow, waiting up to 10 s for an election; `None` for Redis
    /// nodes or when no leader appears.
    pub fn leader(&self) -> Option<usize> {
        match self {
            Nodes::Redis(_) | Nodes::Postgres(_) => None,
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
