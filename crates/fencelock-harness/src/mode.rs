//! The lock modes a run compares and the fault kinds the nemesis injects.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How the clients take the lock and write the protected record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One Redis node, no fencing: an efficiency lock.
    Single,
    /// Redlock on 5 nodes, no fencing, no restart quarantine.
    Redlock,
    /// Redlock on 5 nodes with fencing tokens checked by the storage.
    RedlockFenced,
    /// Redlock on 5 nodes with fencing tokens and restart quarantine.
    RedlockQuarantine,
    /// A 3-member etcd cluster; the fencing token is the lock key's create revision.
    Etcd,
    /// The read-write lock (`fencelock::RwLock`) on 5 Redis nodes, fencing and restart
    /// quarantine on: each client alternates write locks (the fenced critical section) and read
    /// locks (two reads of the counter); the check is that no writer's validity overlaps another
    /// holder's, readers' with each other allowed.
    RedlockRwlock,
    /// The real `fencelock run` binary on 5 Redis nodes (restart quarantine on, no fencing),
    /// with commands that leave background and `setsid` processes; the check is that no two
    /// holders' processes run at once.
    Run,
    /// A semaphore of [`PERMITS`] permits on 5 Redis nodes (fencing, restart quarantine): each
    /// holder writes its slot's fenced record; the check adds "at most N holders at once".
    Semaphore,
    /// The same semaphore on a 3-member etcd cluster.
    SemaphoreEtcd,
    /// Leader election on 5 Redis nodes (fencing, restart quarantine): each leader writes the
    /// fenced record under its term; the check adds "one leader per term, terms increasing".
    Election,
    /// The same election on a 3-member etcd cluster.
    ElectionEtcd,
    /// Redlock on 5 nodes with the library's defaults: restart quarantine on, no fencing (plain
    /// locks, announced ahead of their grants). The check is that no client is granted the lock
    /// inside another's validity with no clock jump in progress. (Last, so that the other modes'
    /// seeds, which mix in the mode's index, stay as they were.)
    RedlockDefault,
    /// Curator's mutex on a 3-server ZooKeeper ensemble (issue 32); the fencing token is the
    /// lock node's `czxid`. The ensemble's faults: kill or stop the leader or a follower.
    ZooKeeper,
    /// The lease-row lock in one PostgreSQL database (issue 32); the fencing token comes from
    /// its sequence. Its faults: kill -9 and restart (also while a client holds the lock), and
    /// `pg_terminate_backend` of every client connection.
    Postgres,
    /// Fenced locks on a Redis Cluster as one node (issue 31: 3 primaries, 3 replicas, every
    /// key on the shard of one hash tag), restart quarantine on: its faults are the tag's
    /// primary killed (a replica takes over), killed and restarted empty while a client holds
    /// the lock, and `CLUSTER FAILOVER`.
    Cluster,
    /// The same on a Sentinel-managed primary (one primary, two replicas, three Sentinels):
    /// the primary killed, killed and restarted empty while held, and `SENTINEL FAILOVER`.
    Sentinel,
}

/// How many permits the semaphore modes' semaphore has.
pub const PERMITS: u32 = 2;

impl Mode {
    /// Every mode, in the order the report lists them.
    pub const ALL: [Mode; 16] = [
        Mode::Single,
        Mode::Redlock,
        Mode::RedlockDefault,
        Mode::RedlockFenced,
        Mode::RedlockQuarantine,
        Mode::Etcd,
        Mode::Run,
        Mode::Semaphore,
        Mode::SemaphoreEtcd,
        Mode::Election,
        Mode::ElectionEtcd,
        Mode::RedlockRwlock,
        Mode::ZooKeeper,
        Mode::Postgres,
        Mode::Cluster,
        Mode::Sentinel,
    ];

    /// How many nodes (Redis nodes, or etcd members) the mode runs.
    pub fn nodes(self) -> usize {
        match self {
            Mode::Single | Mode::Postgres | Mode::Cluster | Mode::Sentinel => 1,
            _ if self.consensus() => 3,
            _ => 5,
        }
    }

    /// Whether the nodes are the members of one consensus cluster (etcd, ZooKeeper) rather
    /// than independent Redis nodes.
    pub fn consensus(self) -> bool {
        matches!(
            self,
            Mode::Etcd | Mode::SemaphoreEtcd | Mode::ElectionEtcd | Mode::ZooKeeper
        )
    }

    /// Whether the nodes are an etcd cluster.
    pub fn etcd(self) -> bool {
        self.consensus() && self != Mode::ZooKeeper
    }

    /// The semaphore modes' number of permits.
    pub fn permits(self) -> Option<u32> {
        matches!(self, Mode::Semaphore | Mode::SemaphoreEtcd).then_some(PERMITS)
    }

    /// Whether the clients campaign in an election instead of taking the mutex.
    pub fn election(self) -> bool {
        matches!(self, Mode::Election | Mode::ElectionEtcd)
    }

    /// The Redis node that persists with `appendfsync always` (the target of
    /// `restart-persist`): the last of 5. etcd members always persist their raft log.
    pub fn aof_node(self) -> Option<usize> {
        if self == Mode::Postgres {
            // Its one server always persists (WAL, fsync on commit).
            return Some(0);
        }
        let n = self.nodes();
        (!self.consensus() && n >= 5).then_some(n - 1)
    }

    /// Whether locks carry fencing tokens that the storage checks.
    pub fn fencing(self) -> bool {
        matches!(
            self,
            Mode::RedlockFenced
                | Mode::RedlockQuarantine
                | Mode::Etcd
                | Mode::Semaphore
                | Mode::SemaphoreEtcd
                | Mode::Election
                | Mode::ElectionEtcd
                | Mode::RedlockRwlock
                | Mode::ZooKeeper
                | Mode::Postgres
                | Mode::Cluster
                | Mode::Sentinel
        )
    }

    /// Whether the one node is a group that fails over (a cluster's shard, a Sentinel group).
    pub fn managed_redis(self) -> bool {
        matches!(self, Mode::Cluster | Mode::Sentinel)
    }

    /// The TTL the mode runs with: etcd grants leases in whole seconds (at least 1 s), so its
    /// TTL is `ttl` rounded up to whole seconds; the nemesis then sizes its pauses on the
    /// lease actually granted.
    pub fn ttl(self, ttl: Duration) -> Duration {
        // ZooKeeper grants sessions of at least two ticks (1 s in the test kit), and a
        // PostgreSQL request gets at least 1 s: whole seconds for them too.
        if self.consensus() || self == Mode::Postgres {
            let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
            Duration::from_secs(secs.max(1))
        } else {
            ttl
        }
    }

    /// Why the mode cannot take a fault kind, if it cannot (the nemesis then skips it and the
    /// report says so).
    pub fn skips(self, kind: FaultKind) -> Option<&'static str> {
        use FaultKind as K;
        match (self, kind) {
            (Mode::Run, K::ClockForward) => return Some(
                "a forward clock jump breaks Redlock's own mutual exclusion (docs/guarantees.md); the run episodes test what `run` does with the lock, under the faults the lock survives",
            ),
            (Mode::Run, K::PauseClient) => return Some(
                "a stopped supervisor cannot stop its command (a lease's limit, documented for `run`); its client fault here is kill-supervisor",
            ),
            (Mode::Run, _) => {}
            (_, K::KillSupervisor) => return Some("only the run mode has a `fencelock run` supervisor to kill"),
            (Mode::Postgres, K::TerminateBackend) => return None,
            (Mode::Cluster | Mode::Sentinel, K::Failover) => return None,
            (_, K::Failover) => return Some("only a Redis Cluster or a Sentinel group fails over on command"),
            (_, K::TerminateBackend) => return Some("only PostgreSQL has client backends to terminate"),
            _ => {}
        }
        if self == Mode::ZooKeeper {
            return match kind {
                K::RestartNopersist | K::RestartTwoNopersist | K::RestartPersist => Some(
                    "a ZooKeeper server always persists its transaction log, and cannot come back empty under the same identity: its kill -9 and restart is `kill` / `kill-leader`",
                ),
                K::Flushall => Some("ZooKeeper has no FLUSHALL"),
                K::ClockForward | K::ClockBackward => Some(
                    "the test kit's ZooKeeper (a JVM) runs without the clock shim; sessions run on the leader's monotonic clock",
                ),
                _ => None,
            };
        }
        if self.managed_redis() {
            return match kind {
                K::Kill | K::RestartNopersist | K::PauseClient | K::Failover => None,
                K::PauseNode | K::PauseLeader => Some(
                    "a stopped primary that comes back after its replica took over is the unsafe window docs/guide/managed-redis.md documents, not a fault the lock survives",
                ),
                K::Latency => Some(
                    "the client reaches the servers at the addresses the cluster or the Sentinels give, not through the harness's proxy",
                ),
                _ => Some("one logical node: the fault needs independent nodes, a leader, persistence or the clock shim, which this group does not have here"),
            };
        }
        if self == Mode::Postgres {
            return match kind {
                K::KillLeader | K::PauseLeader => Some("one PostgreSQL server: there is no leader"),
                K::PauseNode => Some(
                    "SIGSTOP of the postmaster leaves its backends serving: not a server's stop; the connection fault is terminate-backend",
                ),
                K::RestartNopersist | K::RestartTwoNopersist => Some(
                    "PostgreSQL always persists (WAL): its kill -9 and restart while held is `restart-persist`",
                ),
                K::Flushall => Some("PostgreSQL has no FLUSHALL"),
                K::ClockForward | K::ClockBackward => Some(
                    "the test kit's PostgreSQL runs without the clock shim",
                ),
                _ => None,
            };
        }
        match (self.consensus(), kind) {
            (false, K::KillLeader | K::PauseLeader) => {
                Some("Redis nodes are independent: there is no leader")
            }
            (false, K::RestartPersist) if self.aof_node().is_none() => {
                Some("no node persists with appendfsync always in this mode")
            }
            (false, K::RestartTwoNopersist) if self.nodes() < 3 => {
                Some("two nodes losing their data is a majority of fewer than three nodes")
            }
            (true, K::RestartNopersist) => Some(
                "an etcd member cannot come back empty under the same identity (that breaks raft itself, not the lock); its kill -9 and restart is `kill`",
            ),
            (true, K::RestartTwoNopersist) => Some(
                "an etcd member cannot come back empty under the same identity (that breaks raft itself, not the lock)",
            ),
            (true, K::Flushall) => Some(
                "etcd has no FLUSHALL; deleting keys through the API is a write that raft orders like any other",
            ),
            (true, K::RestartPersist) => Some(
                "etcd members always persist (WAL fsync): a kill -9 and restart is `kill` / `kill-leader`",
            ),
            (true, K::ClockForward | K::ClockBackward) => Some(
                "etcd is a Go binary that makes its own clock syscalls and ignores LD_PRELOAD, so the clock shim cannot shift it (its leases also run on the monotonic clock)",
            ),
            _ => None,
        }
    }

    /// Whether a `flushall` episode flushes at most a minority of the nodes: in fenced modes, so
    /// that a quorum keeps its fence counter (with fewer, fenced grants fail closed until
    /// `fencelock reseed`); in `redlock-default`, because its claim is exclusion while a
    /// minority loses its data: the staged holder's record of its TTL lives only on the bare
    /// quorum it took, and flushing all of those leaves nothing to judge a flushed node by.
    pub fn flushes_a_minority(self) -> bool {
        self.fencing() || self == Mode::RedlockDefault
    }

    /// Whether restart quarantine is on.
    pub fn quarantine(self) -> bool {
        matches!(
            self,
            Mode::RedlockQuarantine
                | Mode::RedlockDefault
                | Mode::Run
                | Mode::Semaphore
                | Mode::Election
                | Mode::RedlockRwlock
                | Mode::Cluster
                | Mode::Sentinel
        )
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Redlock => "redlock",
            Mode::RedlockDefault => "redlock-default",
            Mode::RedlockFenced => "redlock-fenced",
            Mode::RedlockQuarantine => "redlock-quarantine",
            Mode::Etcd => "etcd",
            Mode::Run => "run",
            Mode::Semaphore => "semaphore",
            Mode::SemaphoreEtcd => "semaphore-etcd",
            Mode::Election => "election",
            Mode::ElectionEtcd => "election-etcd",
            Mode::RedlockRwlock => "redlock-rwlock",
            Mode::ZooKeeper => "zookeeper",
            Mode::Postgres => "postgres",
            Mode::Cluster => "cluster",
            Mode::Sentinel => "sentinel",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let all: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
                format!("unknown mode {s:?}; use any of {}", all.join(","))
            })
    }
}

/// A kind of fault the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// kill -9 of a minority of nodes, restarted (empty unless AOF) after more than a TTL. On
    /// etcd: a follower, restarted with its data.
    Kill,
    /// etcd only: kill -9 of the current leader, restarted with its data after more than a TTL.
    KillLeader,
    /// While a client holds the lock, kill -9 one of its nodes and restart it at once without
    /// persistence (its keys are gone), then let the rest of the cluster reach it.
    RestartNopersist,
    /// The same with a node that persists with `appendfsync always`.
    RestartPersist,
    /// SIGSTOP of a minority of nodes, then SIGCONT. On etcd: a follower.
    PauseNode,
    /// etcd only: SIGSTOP of the current leader (the others elect a new one), then SIGCONT.
    PauseLeader,
    /// SIGSTOP of a client process for longer than the TTL (often right after its reads).
    PauseClient,
    /// While a client holds the lock, one of its nodes' clocks jumps forward past the TTL.
    ClockForward,
    /// A node's clock jumps backward.
    ClockBackward,
    /// Added delay on a minority of nodes' connections.
    Latency,
    /// `run` mode only: SIGKILL of a client's `fencelock run` supervisor at a random instant.
    KillSupervisor,
    /// While a client holds the lock, two of its nodes lose their data within one TTL: each is
    /// killed with SIGKILL and restarted at once without persistence, the second a fraction of
    /// a TTL after the first.
    RestartTwoNopersist,
    /// While a client holds the lock, `FLUSHALL` on some of its nodes: data lost without a
    /// restart (the run id stays the same). In fenced modes at most a minority of the nodes, so
    /// that a quorum keeps its fence counter, and in `redlock-default` too (see
    /// [`Mode::flushes_a_minority`]); otherwise up to every node the holder holds.
    Flushall,
    /// PostgreSQL only: `pg_terminate_backend` of every client connection, the holder's among
    /// them (the clients reconnect).
    TerminateBackend,
    /// Cluster and Sentinel modes: a failover on command (`CLUSTER FAILOVER` on the tag's
    /// primary's replica, `SENTINEL FAILOVER`), the old primary running on as a replica.
    Failover,
}

impl FaultKind {
    /// Every fault kind: the full mix.
    pub const ALL: [FaultKind; 15] = [
        FaultKind::Kill,
        FaultKind::KillLeader,
        FaultKind::RestartNopersist,
        FaultKind::RestartPersist,
        FaultKind::PauseNode,
        FaultKind::PauseLeader,
        FaultKind::PauseClient,
        FaultKind::ClockForward,
        FaultKind::ClockBackward,
        FaultKind::Latency,
        FaultKind::KillSupervisor,
        FaultKind::RestartTwoNopersist,
        FaultKind::Flushall,
        FaultKind::TerminateBackend,
        FaultKind::Failover,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::KillLeader => "kill-leader",
            FaultKind::RestartNopersist => "restart-nopersist",
            FaultKind::RestartPersist => "restart-persist",
            FaultKind::PauseNode => "pause-node",
            FaultKind::PauseLeader => "pause-leader",
            FaultKind::PauseClient => "pause-client",
            FaultKind::ClockForward => "clock-forward",
            FaultKind::ClockBackward => "clock-backward",
            FaultKind::Latency => "latency",
            FaultKind::KillSupervisor => "kill-supervisor",
            FaultKind::RestartTwoNopersist => "restart-two-nopersist",
            FaultKind::Flushall => "flushall",
            FaultKind::TerminateBackend => "terminate-backend",
            FaultKind::Failover => "failover",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = String;

    fn from_str(s: &str) -> Result<FaultKind, String> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let all: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown fault {s:?}; use any of {}", all.join(","))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Mode::ALL {
            assert_eq!(m.name().parse::<Mode>().unwrap(), m);
        }
        for k in FaultKind::ALL {
            assert_eq!(k.name().parse::<FaultKind>().unwrap(), k);
        }
        assert!("nope".parse::<Mode>().is_err());
    }

    #[test]
    fn etcd_rounds_its_ttl_up_to_whole_seconds_and_skips_what_it_cannot_take() {
        let ms = Duration::from_millis;
        assert_eq!(Mode::Etcd.ttl(ms(500)), ms(1000));
        assert_eq!(Mode::Etcd.ttl(ms(1500)), ms(2000));
        assert_eq!(Mode::Etcd.ttl(ms(2000)), ms(2000));
        assert_eq!(Mode::Redlock.ttl(ms(500)), ms(500));
        assert!(Mode::Etcd.fencing() && !Mode::Etcd.quarantine());
        assert_eq!(Mode::Etcd.aof_node(), None);
        assert_eq!(Mode::RedlockFenced.aof_node(), Some(4));
        for k in [
            FaultKind::ClockForward,
            FaultKind::ClockBackward,
            FaultKind::RestartNopersist,
            FaultKind::RestartPersist,
        ] {
            assert!(Mode::Etcd.skips(k).is_some(), "{k}");
        }
        for k in [
            FaultKind::Kill,
            FaultKind::KillLeader,
            FaultKind::PauseNode,
            FaultKind::PauseLeader,
            FaultKind::PauseClient,
            FaultKind::Latency,
        ] {
            assert!(Mode::Etcd.skips(k).is_none(), "{k}");
        }
        assert!(Mode::Redlock.skips(FaultKind::KillLeader).is_some());
        assert!(Mode::Single.skips(FaultKind::RestartPersist).is_some());
        assert!(Mode::Redlock.skips(FaultKind::RestartPersist).is_none());
    }
}
