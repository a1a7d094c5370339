//! The nemesis: a seeded schedule of faults ([`Plan`], pure) and its execution on the real
//! processes of a run ([`Nemesis`]).
//!
//! Random faults at random instants rarely line up into the interleavings that break a lock, so
//! the episodes that model the article's scenarios are staged around a holder:
//!
//! - `pause-client`: most often the client stops itself right after its reads (its lock held),
//!   for two TTLs or more; sometimes the harness stops it at an arbitrary instant.
//! - `clock-forward` (Kleppmann's clock scenario): a minority of nodes is cut off, a client is
//!   asked to hold its next lock for 60% of the TTL (so it is taken on the other nodes only), one
//!   of its nodes jumps ahead past the TTL (its key expires), and the cut nodes come back: another
//!   client can now reach a majority while the first is still within its validity.
//! - `restart-nopersist` / `restart-persist`: the same staging, but one of the holder's nodes is
//!   killed with SIGKILL and restarted at once, without persistence (its keys are gone) or from
//!   an `appendfsync always` AOF (they come back).
//!
//! On etcd (a consensus cluster, not independent nodes), `kill` and `pause-node` hit a follower
//! and `kill-leader` and `pause-leader` the member the others follow at that moment; a killed
//! member restarts with its data. Clock and restart-without-persistence faults do not apply
//! there (see [`Mode::skips`]).
//!
//! Every episode restores what it changed (except clock offsets, which stay where they jumped)
//! and is bounded in time.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::checker::FaultClass;
use crate::client::{self, Request};
use crate::history::FaultEvent;
use crate::mode::{FaultKind, Mode};
use crate::mono;
use crate::nodes::Nodes;
use crate::proxy::ProxyControl;

/// One staged fault.
#[derive(Debug, Clone, PartialEq)]
pub enum Episode {
    /// kill -9 `nodes`, restart them after `down`.
    Kill {
        /// Nodes.
        nodes: Vec<usize>,
        /// Downtime.
        down: Duration,
    },
    /// etcd: kill -9 of the leader or of a follower, restarted with its data after `down`.
    KillMember {
        /// The leader (else a follower).
        leader: bool,
        /// Which follower: the `pick % followers`-th.
        pick: usize,
        /// Downtime.
        down: Duration,
    },
    /// etcd: SIGSTOP of the leader or of a follower for `pause`.
    PauseMember {
        /// The leader (else a follower).
        leader: bool,
        /// Which follower: the `pick % followers`-th.
        pick: usize,
        /// How long.
        pause: Duration,
    },
    /// Cut `cut` off, let `client` take a long lock, kill -9 and restart `victim`, heal.
    Restart {
        /// Whether the victim persists (AOF always).
        persist: bool,
        /// Nodes cut off while the client acquires.
        cut: Vec<usize>,
        /// The node that restarts.
        victim: usize,
        /// The holder.
        client: u32,
    },
    /// SIGSTOP `nodes` for `pause`.
    PauseNode {
        /// Nodes.
        nodes: Vec<usize>,
        /// How long.
        pause: Duration,
    },
    /// SIGSTOP `client` for `pause`, right after its reads or at an arbitrary instant.
    PauseClient {
        /// The client.
        client: u32,
        /// Stop right after the reads (holding the lock).
        after_read: bool,
        /// How long.
        pause: Duration,
    },
    /// Cut `cut` off, let `client` take a long lock, jump `node`'s clock ahead by `jump`, heal.
    ClockForward {
        /// Nodes cut off while the client acquires.
        cut: Vec<usize>,
        /// The node whose clock jumps.
        node: usize,
        /// The holder.
        client: u32,
        /// The jump.
        jump: Duration,
    },
    /// Jump `node`'s clock back by `jump`.
    ClockBackward {
        /// The node.
        node: usize,
        /// The jump.
        jump: Duration,
    },
    /// `run` mode: SIGKILL of `client`'s `fencelock run` supervisor, `after` into a long hold
    /// (staged: its command and the processes it leaves are running) or into the episode.
    KillSupervisor {
        /// The client.
        client: u32,
        /// Wait for the client's next command to run (a long hold) before `after` starts.
        staged: bool,
        /// How long after the hold (or the episode) starts.
        after: Duration,
    },
    /// Cut `cut` off, let `client` take a long lock, kill -9 and restart `victims[0]` empty,
    /// then, `gap` later, `victims[1]`; heal.
    RestartTwo {
        /// Nodes cut off while the client acquires.
        cut: Vec<usize>,
        /// The two nodes that lose their data, in order.
        victims: Vec<usize>,
        /// Between the two restarts (under the holder's TTL).
        gap: Duration,
        /// The holder.
        client: u32,
    },
    /// Cut `cut` off, let `client` take a long lock, `FLUSHALL` on `nodes`, heal.
    Flush {
        /// Nodes cut off while the client acquires.
        cut: Vec<usize>,
        /// The nodes flushed (among the holder's).
        nodes: Vec<usize>,
        /// The holder.
        client: u32,
    },
    /// Delay `nodes`' connections by `delay` for `lasts`.
    Latency {
        /// Nodes.
        nodes: Vec<usize>,
        /// Added delay per chunk sent to the node.
        delay: Duration,
        /// How long.
        lasts: Duration,
    },
    /// PostgreSQL: `pg_terminate_backend` of every client connection.
    TerminateBackends,
    /// Cluster and Sentinel: a failover on command.
    Failover,
}

impl Episode {
    /// The fault kind this episode counts as.
    pub fn kind(&self) -> FaultKind {
        match self {
            Episode::Kill { .. } | Episode::KillMember { leader: false, .. } => FaultKind::Kill,
            Episode::KillMember { leader: true, .. } => FaultKind::KillLeader,
            Episode::PauseMember { leader: false, .. } => FaultKind::PauseNode,
            Episode::PauseMember { leader: true, .. } => FaultKind::PauseLeader,
            Episode::Restart { persist: false, .. } => FaultKind::RestartNopersist,
            Episode::Restart { persist: true, .. } => FaultKind::RestartPersist,
            Episode::PauseNode { .. } => FaultKind::PauseNode,
            Episode::PauseClient { .. } => FaultKind::PauseClient,
            Episode::ClockForward { .. } => FaultKind::ClockForward,
            Episode::ClockBackward { .. } => FaultKind::ClockBackward,
            Episode::Latency { .. } => FaultKind::Latency,
            Episode::KillSupervisor { .. } => FaultKind::KillSupervisor,
            Episode::RestartTwo { .. } => FaultKind::RestartTwoNopersist,
            Episode::Flush { .. } => FaultKind::Flushall,
            Episode::TerminateBackends => FaultKind::TerminateBackend,
            Episode::Failover => FaultKind::Failover,
        }
    }
}

/// The seeded schedule: the same seed and settings give the same episodes. Kinds are dealt from
/// a shuffled deck, so that every kind comes up once per round; in the first round one kind of
/// each class the checker needs (client pause, clock jump, restart) comes first, so that a short
/// run covers them (a fenced run without them fails, see [`crate::checker::uncovered`]).
#[derive(Debug)]
pub struct Plan {
    rng: fastrand::Rng,
    kinds: Vec<FaultKind>,
    /// Kinds still to deal in this round, the next one last.
    deck: Vec<FaultKind>,
    first_round: bool,
    nodes: usize,
    consensus: bool,
    clients: u32,
    ttl: Duration,
    aof_node: Option<usize>,
    /// A flush takes at most a minority ([`Mode::flushes_a_minority`]).
    flush_minority: bool,
    /// Each client's TTL, when they differ (see [`Plan::with_client_ttls`]).
    client_ttls: Vec<Duration>,
    /// The client with the longest TTL (the job), when the TTLs differ.
    job: Option<u32>,
}

impl Plan {
    /// A plan over `kinds` for the nodes of `mode` and `clients` clients. Kinds the mode
    /// cannot take are dropped ([`Mode::skips`]: `restart-persist` without an AOF node,
    /// leader faults on Redis, clock faults on etcd...).
    pub fn new(seed: u64, kinds: &[FaultKind], mode: Mode, clients: u32, ttl: Duration) -> Plan {
        let kinds = kinds
            .iter()
            .copied()
            .filter(|k| mode.skips(*k).is_none())
            .collect();
        Plan {
            rng: fastrand::Rng::with_seed(seed),
            kinds,
            deck: Vec::new(),
            first_round: true,
            nodes: mode.nodes(),
            consensus: mode.consensus(),
            clients: clients.max(1),
            ttl,
            aof_node: mode.aof_node(),
            flush_minority: mode.flushes_a_minority(),
            client_ttls: Vec::new(),
            job: None,
        }
    }

    /// Clients with different TTLs on one node set (`ttls[id]`; the plan's own TTL paces the
    /// episodes). A client pause then lasts 2-3 of the paused client's TTLs, and the staged
    /// restarts and clock jumps happen while the client with the longest TTL (the job) holds the
    /// lock: the case where a restarted node must stay out for the job's TTL, not the asking
    /// client's.
    pub fn with_client_ttls(mut self, ttls: Vec<Duration>) -> Plan {
        let longest = ttls.iter().copied().max();
        self.job = longest
            .filter(|l| ttls.iter().any(|t| t != l))
            .and_then(|l| ttls.iter().position(|t| *t == l))
            .and_then(|i| u32::try_from(i).ok());
        self.client_ttls = ttls;
        self
    }

    /// Client `client`'s TTL.
    fn client_ttl(&self, client: u32) -> Duration {
        self.client_ttls
            .get(client as usize)
            .copied()
            .unwrap_or(self.ttl)
    }

    fn ttls(&mut self, lo: f64, hi: f64) -> Duration {
        self.ttl.mul_f64(lo + (hi - lo) * self.rng.f64())
    }

    /// `k` distinct nodes, none of them in `except`.
    fn pick(&mut self, k: usize, except: &[usize]) -> Vec<usize> {
        let mut pool: Vec<usize> = (0..self.nodes).filter(|n| !except.contains(n)).collect();
        self.rng.shuffle(&mut pool);
        pool.truncate(k);
        pool.sort_unstable();
        pool
    }

    /// The most nodes that may fail while a majority stays: (n-1)/2, and for one node, that node.
    fn minority(&self) -> usize {
        if self.nodes == 1 {
            1
        } else {
            (self.nodes - 1) / 2
        }
    }

    /// The next kind from the deck, shuffling a new round when it is empty.
    fn deal(&mut self) -> FaultKind {
        if self.deck.is_empty() {
            let mut deck = self.kinds.clone();
            self.rng.shuffle(&mut deck);
            if std::mem::take(&mut self.first_round) {
                let mut first = Vec::new();
                for class in FaultClass::ALL {
                    if let Some(i) = deck.iter().position(|k| class.kinds().contains(k)) {
                        first.push(deck.remove(i));
                    }
                }
                first.append(&mut deck);
                deck = first;
            }
            deck.reverse();
            self.deck = deck;
        }
        self.deck.pop().unwrap_or(FaultKind::Latency)
    }

    /// The pause before the next episode and the episode, or `None` when no kind is enabled.
    pub fn next_episode(&mut self) -> Option<(Duration, Episode)> {
        if self.kinds.is_empty() {
            return None;
        }
        let gap = self.ttls(0.2, 1.0);
        let kind = self.deal();
        let client = self.rng.u32(..self.clients);
        Some((gap, self.episode(kind, client)))
    }

    /// An episode of `kind`; `client` is the one it acts on where it acts on a client. Each
    /// step below draws from the seeded generator in a fixed order: the same seed gives the
    /// same schedule.
    fn episode(&mut self, kind: FaultKind, client: u32) -> Episode {
        // The holder of a staged episode: the job, when the clients' TTLs differ.
        let holder = self.job.unwrap_or(client);
        match kind {
            FaultKind::Kill | FaultKind::KillLeader if self.consensus => {
                self.kill_member(kind == FaultKind::KillLeader)
            }
            FaultKind::PauseNode | FaultKind::PauseLeader if self.consensus => {
                self.pause_member(kind == FaultKind::PauseLeader)
            }
            // Leader faults exist on a consensus cluster only (`Mode::skips` drops them
            // elsewhere); should one get here, it is a plain kill or pause.
            FaultKind::Kill | FaultKind::KillLeader => self.kill_minority(),
            FaultKind::RestartNopersist | FaultKind::RestartPersist => {
                self.restart(kind == FaultKind::RestartPersist, holder)
            }
            FaultKind::PauseNode | FaultKind::PauseLeader => self.pause_minority(),
            FaultKind::PauseClient => self.pause_client(client),
            FaultKind::ClockForward => self.clock_forward(holder),
            FaultKind::ClockBackward => self.clock_backward(),
            FaultKind::KillSupervisor => self.kill_supervisor(client),
            FaultKind::Latency => self.latency(),
            FaultKind::RestartTwoNopersist => self.restart_two(holder),
            FaultKind::Flushall => self.flush(holder),
            FaultKind::TerminateBackend => Episode::TerminateBackends,
            FaultKind::Failover => Episode::Failover,
        }
    }

    /// How many nodes a staged episode cuts off from the rest: partitions are staged only with
    /// several nodes (with one, there is no "rest").
    fn cut_size(&self) -> usize {
        if self.nodes > 1 {
            self.minority()
        } else {
            0
        }
    }

    /// Kills a consensus member (the leader, or the one picked).
    fn kill_member(&mut self, leader: bool) -> Episode {
        Episode::KillMember {
            leader,
            pick: self.rng.usize(..self.nodes),
            down: self.ttls(1.1, 2.0),
        }
    }

    /// Pauses a consensus member (the leader, or the one picked).
    fn pause_member(&mut self, leader: bool) -> Episode {
        Episode::PauseMember {
            leader,
            pick: self.rng.usize(..self.nodes),
            pause: self.ttls(0.2, 1.5),
        }
    }

    /// Kills up to a minority of the nodes.
    fn kill_minority(&mut self) -> Episode {
        let k = self.rng.usize(1..=self.minority());
        Episode::Kill {
            nodes: self.pick(k, &[]),
            down: self.ttls(1.1, 2.0),
        }
    }

    /// Restarts one node (the AOF node when `persist`, else any other) while `holder` holds
    /// the lock, the rest of a minority cut off.
    fn restart(&mut self, persist: bool, holder: u32) -> Episode {
        let victim = match (persist, self.aof_node) {
            (true, Some(aof)) => aof,
            _ => {
                let except: Vec<usize> = self.aof_node.into_iter().collect();
                self.pick(1, &except).first().copied().unwrap_or(0)
            }
        };
        Episode::Restart {
            persist,
            cut: self.pick(self.cut_size(), &[victim]),
            victim,
            client: holder,
        }
    }

    /// Two nodes (never the AOF node) lose their data within `holder`'s TTL while it holds the
    /// lock taken without the rest of a minority: its key then lives on fewer than a quorum.
    fn restart_two(&mut self, holder: u32) -> Episode {
        let except: Vec<usize> = self.aof_node.into_iter().collect();
        let victims = self.pick(2, &except);
        let cut = self.pick(self.cut_size(), &victims);
        let mut victims = victims;
        self.rng.shuffle(&mut victims);
        let ttl = self.client_ttl(holder);
        Episode::RestartTwo {
            cut,
            victims,
            gap: ttl.mul_f64(0.1 + 0.8 * self.rng.f64()),
            client: holder,
        }
    }

    /// `FLUSHALL` on some of the nodes `holder` holds the lock on (taken without a minority
    /// cut off): at most a minority of all nodes where [`Mode::flushes_a_minority`] says so.
    fn flush(&mut self, holder: u32) -> Episode {
        let cut = self.pick(self.cut_size(), &[]);
        let held: Vec<usize> = (0..self.nodes).filter(|n| !cut.contains(n)).collect();
        let most = if self.flush_minority {
            self.minority().min(held.len())
        } else {
            held.len()
        };
        let k = self.rng.usize(1..=most.max(1));
        let mut nodes = held;
        self.rng.shuffle(&mut nodes);
        nodes.truncate(k);
        nodes.sort_unstable();
        Episode::Flush {
            cut,
            nodes,
            client: holder,
        }
    }

    /// Pauses up to a minority of the nodes.
    fn pause_minority(&mut self) -> Episode {
        let k = self.rng.usize(1..=self.minority());
        Episode::PauseNode {
            nodes: self.pick(k, &[]),
            pause: self.ttls(0.2, 1.5),
        }
    }

    /// Pauses `client`, two times in three after it read.
    fn pause_client(&mut self, client: u32) -> Episode {
        Episode::PauseClient {
            client,
            after_read: self.rng.u8(..3) != 0,
            // 2-3 of the paused client's own TTLs (as `ttls(2.0, 3.0)` with one TTL).
            pause: self.client_ttl(client).mul_f64(2.0 + self.rng.f64()),
        }
    }

    /// Jumps one node's clock forward while `holder` holds the lock, the rest of a minority
    /// cut off.
    fn clock_forward(&mut self, holder: u32) -> Episode {
        let node = self.rng.usize(..self.nodes);
        Episode::ClockForward {
            cut: self.pick(self.cut_size(), &[node]),
            node,
            client: holder,
            jump: self.ttls(3.0, 10.0),
        }
    }

    /// Jumps one node's clock backward.
    fn clock_backward(&mut self) -> Episode {
        Episode::ClockBackward {
            node: self.rng.usize(..self.nodes),
            jump: self.ttls(1.0, 3.0),
        }
    }

    /// Kills `client`'s supervisor: two times in three while the command and its leftovers run
    /// (what the guard must take down), else at any instant (waiting, running, or extending for
    /// the leftovers).
    fn kill_supervisor(&mut self, client: u32) -> Episode {
        let staged = self.rng.u8(..3) != 0;
        Episode::KillSupervisor {
            client,
            staged,
            after: if staged {
                self.ttls(0.0, 0.5)
            } else {
                self.ttls(0.0, 1.5)
            },
        }
    }

    /// Delays up to a minority of the nodes.
    fn latency(&mut self) -> Episode {
        let k = self.rng.usize(1..=self.minority());
        Episode::Latency {
            nodes: self.pick(k, &[]),
            delay: Duration::from_millis(self.rng.u64(20..=200)),
            lasts: self.ttls(0.5, 2.0),
        }
    }
}

/// The real processes an episode acts on.
#[derive(Debug)]
pub struct Nemesis {
    /// The nodes.
    pub nodes: Arc<Nodes>,
    /// Each node's proxy knobs.
    pub proxies: Vec<Arc<ProxyControl>>,
    /// Client process ids, by client id.
    pub clients: Vec<u32>,
    /// The clients' control directory.
    pub dir: PathBuf,
    /// The lock TTL (the shortest, when the clients' TTLs differ).
    pub ttl: Duration,
    /// Each client's TTL (empty: every client uses `ttl`).
    pub client_ttls: Vec<Duration>,
    /// The run's epoch on `CLOCK_MONOTONIC`.
    pub epoch_ns: u64,
    /// Each node's current clock offset.
    pub offsets: Vec<i64>,
    /// The mode's restart quarantine is on: a staged episode first waits for the nodes that
    /// lost their data to be marked clear (see `Nemesis::settle`).
    pub quarantine: bool,
    /// The mode fences: a staged episode first waits for the nodes that lost their counter to
    /// be seeded again.
    pub fencing: bool,
}

/// The note on a staged episode whose holder never got the lock in time.
pub const NEVER_HELD: &str = " (it never got it)";

/// What an episode touched: node indexes, client ids, and a description for people.
type Affected = (Vec<usize>, Vec<u32>, String);

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions; a vanished pid only returns ESRCH.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// The parent of a process, from `/proc/<pid>/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether the process is stopped (state `T` in /proc).
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// Polls `cond` every 5 ms until it holds or `limit` passes; whether it held.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(5));
    }
    cond()
}

impl Nemesis {
    fn now(&self) -> u64 {
        mono::now_ns().saturating_sub(self.epoch_ns)
    }

    /// Client `client`'s TTL.
    fn client_ttl(&self, client: u32) -> Duration {
        self.client_ttls
            .get(client as usize)
            .copied()
            .unwrap_or(self.ttl)
    }

    /// Runs episodes from `plan` until `stop` is set; each finished episode goes to `record`.
    pub fn run(&mut self, mut plan: Plan, stop: &AtomicBool, mut record: impl FnMut(FaultEvent)) {
        while !stop.load(Ordering::SeqCst) {
            let Some((gap, episode)) = plan.next_episode() else {
                return;
            };
            if sleep_unless(gap, stop) {
                return;
            }
            record(self.execute(&episode));
        }
    }

    /// Performs one episode and restores what it changed (bounded in time).
    pub fn execute(&mut self, episode: &Episode) -> FaultEvent {
        let start_ns = self.now();
        let (nodes, clients, detail) = match episode {
            Episode::Kill { nodes, down } => self.kill_nodes(nodes, *down),
            Episode::Restart {
                persist,
                cut,
                victim,
                client,
            } => self.restart_while_held(*persist, cut, *victim, *client),
            Episode::PauseNode { nodes, pause } => self.pause_nodes(nodes, *pause),
            Episode::KillMember { leader, pick, down } => self.kill_member(*leader, *pick, *down),
            Episode::PauseMember {
                leader,
                pick,
                pause,
            } => self.pause_member(*leader, *pick, *pause),
            Episode::PauseClient {
                client,
                after_read,
                pause,
            } => {
                let how = self.pause_client(*client, *after_read, *pause);
                (vec![], vec![*client], how)
            }
            Episode::ClockForward {
                cut,
                node,
                client,
                jump,
            } => self.clock_forward_while_held(cut, *node, *client, *jump),
            Episode::ClockBackward { node, jump } => self.clock_backward(*node, *jump),
            Episode::Latency {
                nodes,
                delay,
                lasts,
            } => self.add_latency(nodes, *delay, *lasts),
            Episode::KillSupervisor {
                client,
                staged,
                after,
            } => self.kill_supervisor(*client, *staged, *after),
            Episode::RestartTwo {
                cut,
                victims,
                gap,
                client,
            } => self.restart_two_while_held(cut, victims, *gap, *client),
            Episode::Flush { cut, nodes, client } => self.flush_while_held(cut, nodes, *client),
            Episode::Failover => match self.nodes.failover() {
                Ok(how) => (vec![0], vec![], how),
                Err(e) => (vec![0], vec![], format!("failover failed: {e}")),
            },
            Episode::TerminateBackends => match self.nodes.terminate_backends() {
                Ok(n) => (
                    vec![0],
                    vec![],
                    format!("pg_terminate_backend of {n} client connection(s)"),
                ),
                Err(e) => (vec![0], vec![], format!("pg_terminate_backend failed: {e}")),
            },
        };
        FaultEvent {
            kind: episode.kind(),
            nodes,
            clients,
            start_ns,
            end_ns: self.now(),
            detail,
        }
    }

    /// `kill`: kill -9 of `nodes`, restarted after `down` (empty, but for the AOF node). Like
    /// a staged episode it first waits for earlier losses to settle: a node that lost its fence
    /// counter gets it back only through a later grant, and nodes emptied one episode after
    /// another before that would leave fewer than a quorum with a counter, where fenced grants
    /// fail closed for good (until `fencelock reseed`): a majority lost, one at a time.
    fn kill_nodes(&mut self, nodes: &[usize], down: Duration) -> Affected {
        let unsettled = self.settle();
        for &n in nodes {
            let _ = self.nodes.kill(n);
        }
        thread::sleep(down);
        self.restart(nodes);
        (
            nodes.to_vec(),
            vec![],
            if unsettled.is_empty() {
                format!("kill -9, down {down:.1?}, restarted")
            } else {
                format!("kill -9, down {down:.1?}, restarted (nodes {unsettled:?} had not settled)")
            },
        )
    }

    /// `restart-nopersist` / `restart-persist`: `victim` killed and restarted at once while
    /// `client` holds the lock taken without the `cut` nodes.
    fn restart_while_held(
        &mut self,
        persist: bool,
        cut: &[usize],
        victim: usize,
        client: u32,
    ) -> Affected {
        let (nodes, held) = self.around_hold(cut, client, victim, |me| {
            let _ = me.nodes.kill(victim);
            me.restart(&[victim]);
        });
        (
            nodes,
            vec![client],
            format!(
                "node {victim} kill -9 + restart ({}) while client {client} held the lock{held}; nodes {cut:?} cut off while it took it",
                if persist { "AOF always" } else { "no persistence" },
            ),
        )
    }

    /// `restart-two-nopersist`: `victims` killed and restarted empty, `gap` apart, while
    /// `client` holds the lock taken without the `cut` nodes.
    fn restart_two_while_held(
        &mut self,
        cut: &[usize],
        victims: &[usize],
        gap: Duration,
        client: u32,
    ) -> Affected {
        let first = victims.first().copied().unwrap_or(0);
        let (mut nodes, held) = self.around_hold(cut, client, first, |me| {
            for (i, &v) in victims.iter().enumerate() {
                if i > 0 {
                    thread::sleep(gap);
                }
                let _ = me.nodes.kill(v);
                me.restart(&[v]);
            }
        });
        nodes.extend(victims.iter().skip(1));
        (
            nodes,
            vec![client],
            format!(
                "nodes {victims:?} kill -9 + restart (no persistence) {gap:.1?} apart while client {client} held the lock{held}; nodes {cut:?} cut off while it took it",
            ),
        )
    }

    /// `flushall`: `FLUSHALL` on `flushed` while `client` holds the lock taken without the
    /// `cut` nodes.
    fn flush_while_held(&mut self, cut: &[usize], flushed: &[usize], client: u32) -> Affected {
        let first = flushed.first().copied().unwrap_or(0);
        let mut failed = Vec::new();
        let (mut nodes, held) = self.around_hold(cut, client, first, |me| {
            for &n in flushed {
                if me.nodes.flushall(n).is_err() {
                    failed.push(n);
                }
            }
        });
        nodes.extend(flushed.iter().skip(1));
        let failed = if failed.is_empty() {
            String::new()
        } else {
            format!(" (FLUSHALL failed on {failed:?})")
        };
        (
            nodes,
            vec![client],
            format!(
                "FLUSHALL on nodes {flushed:?}{failed} while client {client} held the lock{held}; nodes {cut:?} cut off while it took it",
            ),
        )
    }

    /// `pause-node`: SIGSTOP of `nodes` for `pause`.
    fn pause_nodes(&mut self, nodes: &[usize], pause: Duration) -> Affected {
        for &n in nodes {
            let _ = self.nodes.pause(n);
        }
        thread::sleep(pause);
        for &n in nodes {
            let _ = self.nodes.resume(n);
        }
        (nodes.to_vec(), vec![], format!("SIGSTOP for {pause:.1?}"))
    }

    /// etcd `kill` / `kill-leader`: kill -9 of a member, restarted with its data after `down`.
    fn kill_member(&mut self, leader: bool, pick: usize, down: Duration) -> Affected {
        let (n, role) = self.member(leader, pick);
        let _ = self.nodes.kill(n);
        thread::sleep(down);
        let restarted = self.nodes.restart(n).is_ok();
        self.nodes.settle();
        (
            vec![n],
            vec![],
            format!(
                "kill -9 of the {role}, down {down:.1?}, {}",
                if restarted {
                    "restarted with its data"
                } else {
                    "restart failed"
                }
            ),
        )
    }

    /// etcd `pause-node` / `pause-leader`: SIGSTOP of a member for `pause`.
    fn pause_member(&mut self, leader: bool, pick: usize, pause: Duration) -> Affected {
        let (n, role) = self.member(leader, pick);
        let _ = self.nodes.pause(n);
        thread::sleep(pause);
        let _ = self.nodes.resume(n);
        self.nodes.settle();
        (
            vec![n],
            vec![],
            format!("SIGSTOP of the {role} for {pause:.1?}"),
        )
    }

    /// `clock-forward`: `node`'s clock jumps ahead by `jump` while `client` holds the lock taken
    /// without the `cut` nodes.
    fn clock_forward_while_held(
        &mut self,
        cut: &[usize],
        node: usize,
        client: u32,
        jump: Duration,
    ) -> Affected {
        let (nodes, held) = self.around_hold(cut, client, node, |me| {
            me.offsets[node] += jump.as_millis() as i64;
            let _ = me.nodes.set_clock_offset(node, me.offsets[node]);
        });
        (
            nodes,
            vec![client],
            format!(
                "node {node} clock +{jump:.1?} while client {client} held the lock{held}; nodes {cut:?} cut off while it took it",
            ),
        )
    }

    /// `clock-backward`: `node`'s clock jumps back by `jump`.
    fn clock_backward(&mut self, node: usize, jump: Duration) -> Affected {
        self.offsets[node] -= jump.as_millis() as i64;
        let _ = self.nodes.set_clock_offset(node, self.offsets[node]);
        (vec![node], vec![], format!("clock -{jump:.1?}"))
    }

    /// `latency`: `delay` added to each chunk sent to `nodes`, for `lasts`.
    fn add_latency(&mut self, nodes: &[usize], delay: Duration, lasts: Duration) -> Affected {
        for &n in nodes {
            self.proxies[n].set_delay(delay);
        }
        thread::sleep(lasts);
        for &n in nodes {
            self.proxies[n].set_delay(Duration::ZERO);
        }
        (
            nodes.to_vec(),
            vec![],
            format!("+{delay:?} per request for {lasts:.1?}"),
        )
    }

    /// `kill-supervisor`: after `after`, SIGKILL of the `fencelock run` that `client` runs at
    /// that instant (waiting for the lock, holding it with its command running, or keeping it
    /// for the command's background processes). Staged: `after` counts from the start of the
    /// client's next command, a long hold whose leftover processes outlive the TTL.
    fn kill_supervisor(&mut self, client: u32, staged: bool, after: Duration) -> Affected {
        let mut when = "into the episode";
        if staged {
            let _ = client::send(&self.dir, client, Request::LongHold);
            // Patient: `fencelock run` starts a process and a client per command, which a
            // loaded machine makes slow.
            let held = wait_for(self.client_ttl(client) * 10, || {
                client::holding(&self.dir, client)
            });
            if held {
                when = "into its command's run";
            } else {
                client::withdraw(&self.dir, client, Request::LongHold);
                when = "into the episode (its command never started)";
            }
        }
        thread::sleep(after);
        let parent = self.clients.get(client as usize).copied();
        let pid = std::fs::read_to_string(crate::runcmd::supervisor_file(&self.dir, client))
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            // The client's own child, not a pid reused after it reaped its supervisor.
            .filter(|pid| parent.is_some() && parent_of(*pid) == parent);
        let detail = match pid {
            Some(pid) => {
                signal(pid, libc::SIGKILL);
                format!("SIGKILL of client {client}'s fencelock run (pid {pid}) {after:.1?} {when}")
            }
            None => format!("client {client} ran no fencelock run {after:.1?} {when}"),
        };
        (vec![], vec![client], detail)
    }

    fn restart(&self, nodes: &[usize]) {
        for &n in nodes {
            // A restart that fails leaves the node down: a longer outage, still a minority.
            let _ = self.nodes.restart(n);
        }
    }

    /// The etcd member an episode hits, and its role: the current leader, or the
    /// `pick % followers`-th follower. With no leader known (an election that does not end),
    /// the `pick`-th member, whatever it is.
    fn member(&self, leader: bool, pick: usize) -> (usize, &'static str) {
        let n = self.nodes.len().max(1);
        match self.nodes.leader() {
            Some(l) if leader => (l, "leader"),
            Some(l) => {
                let followers: Vec<usize> = (0..n).filter(|i| *i != l).collect();
                (followers[pick % followers.len().max(1)], "follower")
            }
            None => (pick % n, "member (no leader known)"),
        }
    }

    fn heal(&self, cut: &[usize]) {
        for &n in cut {
            self.proxies[n].heal();
        }
    }

    /// A staged episode: waits for the nodes to settle, cuts `cut` off, lets `client` take a
    /// long lock on the other nodes, heals, applies `fault` to `node` while it still holds it,
    /// and waits for the hold to end. Returns the nodes involved (`node`, then `cut`) and a
    /// note for the description (empty, or what went otherwise).
    ///
    /// The cut only decides where the holder's key lives (on a bare quorum); the fault then
    /// takes one of those nodes while every node is reachable again. So at no instant are more
    /// than a minority of the nodes out (the cut ones before the fault, the ones that lost
    /// their data after it), the failure model the lock claims to survive, and the suspect
    /// nodes always have enough witnesses to be judged. Cutting a minority off while an
    /// earlier episode's node was still in quarantine left the holder (and everyone) short of
    /// a quorum for the whole wait: such runs granted almost nothing.
    fn around_hold(
        &mut self,
        cut: &[usize],
        client: u32,
        node: usize,
        fault: impl FnOnce(&mut Self),
    ) -> (Vec<usize>, String) {
        let unsettled = self.settle();
        let held = self.stage(cut, client);
        self.heal(cut);
        fault(self);
        self.finish_hold(client);
        let mut nodes = vec![node];
        nodes.extend(cut);
        let mut note = String::new();
        if !unsettled.is_empty() {
            note.push_str(&format!(" (nodes {unsettled:?} had not settled)"));
        }
        if !held {
            note.push_str(NEVER_HELD);
        }
        (nodes, note)
    }

    /// Waits (bounded) until every node has settled after earlier data losses: marked clear by
    /// the clients once its quarantine ended, seeded with a counter again. Returns the nodes
    /// that had not when the wait gave up.
    fn settle(&self) -> Vec<usize> {
        let n = self.offsets.len();
        if !self.quarantine && !self.fencing {
            return Vec::new();
        }
        let longest = self
            .client_ttls
            .iter()
            .copied()
            .max()
            .unwrap_or(self.ttl)
            .max(self.ttl);
        let all = || (0..n).all(|i| self.nodes.settled(i, self.quarantine, self.fencing));
        if wait_for(longest * 4 + Duration::from_secs(3), all) {
            return Vec::new();
        }
        (0..n)
            .filter(|&i| !self.nodes.settled(i, self.quarantine, self.fencing))
            .collect()
    }

    /// Cuts `cut` off and waits until `client` holds a long lock (taken on the other nodes);
    /// whether it did.
    fn stage(&self, cut: &[usize], client: u32) -> bool {
        for &n in cut {
            self.proxies[n].cut();
        }
        let _ = client::send(&self.dir, client, Request::LongHold);
        let held = wait_for(self.client_ttl(client) * 5, || {
            client::holding(&self.dir, client)
        });
        if !held {
            // Not taken in time: withdraw it (if it was taken just now, the hold runs anyway).
            client::withdraw(&self.dir, client, Request::LongHold);
        }
        held
    }

    fn finish_hold(&self, client: u32) {
        wait_for(self.client_ttl(client), || {
            !client::holding(&self.dir, client)
        });
    }

    fn pause_client(&self, client: u32, after_read: bool, pause: Duration) -> String {
        let Some(&pid) = self.clients.get(client as usize) else {
            return "no such client".into();
        };
        if after_read {
            let _ = client::send(&self.dir, client, Request::Pause);
            let taken = wait_for(self.client_ttl(client) * 5, || {
                client::taken(&self.dir, client, Request::Pause)
            });
            if !taken && client::withdraw(&self.dir, client, Request::Pause) {
                return "asked to stop after its reads, but it never got there".into();
            }
            if !wait_for(Duration::from_secs(5), || is_stopped(pid)) {
                signal(pid, libc::SIGCONT);
                return "asked to stop after its reads, but it did not stop".into();
            }
            thread::sleep(pause);
            signal(pid, libc::SIGCONT);
            format!("stopped itself right after its reads; SIGCONT after {pause:.1?}")
        } else {
            signal(pid, libc::SIGSTOP);
            thread::sleep(pause);
            signal(pid, libc::SIGCONT);
            format!("SIGSTOP at an arbitrary instant, SIGCONT after {pause:.1?}")
        }
    }
}

/// Sleeps `d` in small steps; `true` if `stop` was set meanwhile.
fn sleep_unless(d: Duration, stop: &AtomicBool) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stop.load(Ordering::SeqCst) {
            return true;
        }
        thread::sleep(
            Duration::from_millis(20).min(until.saturating_duration_since(Instant::now())),
        );
    }
    stop.load(Ordering::SeqCst)
}

/// The directory a client's control files live in (for tests and the run).
pub fn control_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("control")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_schedule() {
        let ttl = Duration::from_secs(1);
        let mut a = Plan::new(42, &FaultKind::ALL, Mode::RedlockFenced, 3, ttl);
        let mut b = Plan::new(42, &FaultKind::ALL, Mode::RedlockFenced, 3, ttl);
        for _ in 0..200 {
            assert_eq!(a.next_episode(), b.next_episode());
        }
    }

    #[test]
    fn the_first_episodes_cover_every_class_and_each_round_deals_every_kind() {
        let ttl = Duration::from_secs(1);
        for (mode, classes) in [(Mode::RedlockFenced, 4), (Mode::Etcd, 2)] {
            for seed in 0..20 {
                let mut plan = Plan::new(seed, &FaultKind::ALL, mode, 3, ttl);
                let kinds: Vec<FaultKind> = (0..plan.kinds.len())
                    .map(|_| plan.next_episode().unwrap().1.kind())
                    .collect();
                let first: Vec<FaultKind> = kinds[..classes].to_vec();
                assert_eq!(
                    crate::checker::uncovered(&plan.kinds, &FaultEvent::of_kinds(&first)),
                    vec![],
                    "{mode} seed {seed}: {first:?}"
                );
                let mut dealt = kinds.clone();
                dealt.sort_by_key(|k| k.name());
                let mut all = plan.kinds.clone();
                all.sort_by_key(|k| k.name());
                assert_eq!(dealt, all, "one round deals every kind once");
            }
        }
    }

    #[test]
    fn faults_stay_within_a_minority_and_restart_persist_hits_the_aof_node() {
        let ttl = Duration::from_secs(1);
        let mut plan = Plan::new(7, &FaultKind::ALL, Mode::Redlock, 3, ttl);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..500 {
            let (gap, ep) = plan.next_episode().unwrap();
            assert!(gap <= ttl);
            seen.insert(ep.kind());
            match ep {
                Episode::Kill { nodes, .. }
                | Episode::PauseNode { nodes, .. }
                | Episode::Latency { nodes, .. } => assert!((1..=2).contains(&nodes.len())),
                Episode::Restart {
                    persist,
                    cut,
                    victim,
                    client,
                } => {
                    assert_eq!(cut.len(), 2);
                    assert!(!cut.contains(&victim));
                    assert_eq!(persist, victim == 4);
                    assert!(client < 3);
                }
                Episode::ClockForward { cut, node, .. } => {
                    assert_eq!(cut.len(), 2);
                    assert!(!cut.contains(&node));
                }
                Episode::PauseClient { pause, .. } => assert!(pause >= ttl * 2),
                Episode::ClockBackward { .. } => {}
                Episode::RestartTwo {
                    cut, victims, gap, ..
                } => {
                    // The holder holds on a bare quorum, two of whose nodes lose their data
                    // within one TTL; the AOF node never does.
                    assert_eq!(cut.len(), 2);
                    assert_eq!(victims.len(), 2);
                    assert!(victims.iter().all(|v| !cut.contains(v) && *v != 4));
                    assert!(gap < ttl);
                }
                Episode::Flush { cut, nodes, .. } => {
                    // Redlock without fencing: up to every node the holder holds.
                    assert_eq!(cut.len(), 2);
                    assert!((1..=3).contains(&nodes.len()));
                    assert!(nodes.iter().all(|n| !cut.contains(n)));
                }
                Episode::KillMember { .. } | Episode::PauseMember { .. } => {
                    panic!("a member episode on Redis nodes: {ep:?}")
                }
                Episode::KillSupervisor { .. } => panic!("a supervisor kill outside run: {ep:?}"),
                Episode::TerminateBackends | Episode::Failover => {
                    panic!("a PostgreSQL or managed Redis fault on Redis: {ep:?}")
                }
            }
        }
        let applicable = FaultKind::ALL
            .iter()
            .filter(|k| Mode::Redlock.skips(**k).is_none())
            .count();
        assert_eq!(seen.len(), applicable);
        assert_eq!(
            applicable,
            FaultKind::ALL.len() - 5,
            "all but the leader faults, the supervisor kill, the backends' termination and the failover"
        );
    }

    #[test]
    fn flushes_take_a_minority_with_fencing_or_the_librarys_defaults() {
        let ttl = Duration::from_secs(1);
        for (mode, most) in [
            (Mode::Redlock, 3),
            (Mode::RedlockQuarantine, 2),
            (Mode::RedlockDefault, 2),
        ] {
            let mut plan = Plan::new(11, &[FaultKind::Flushall], mode, 3, ttl);
            let largest = (0..200)
                .filter_map(|_| match plan.next_episode().unwrap().1 {
                    Episode::Flush { nodes, cut, .. } => {
                        assert!(nodes.iter().all(|n| !cut.contains(n)), "{mode}");
                        Some(nodes.len())
                    }
                    _ => None,
                })
                .max();
            assert_eq!(largest, Some(most), "{mode}");
        }
    }

    #[test]
    fn with_mixed_ttls_the_job_holds_through_staged_faults_and_pauses_follow_each_ttl() {
        let ms = Duration::from_millis;
        let ttls = vec![ms(500), ms(3000), ms(500)];
        let mut plan = Plan::new(5, &FaultKind::ALL, Mode::RedlockQuarantine, 3, ms(500))
            .with_client_ttls(ttls.clone());
        let mut staged = 0;
        for _ in 0..300 {
            match plan.next_episode().unwrap().1 {
                Episode::Restart { client, .. } | Episode::ClockForward { client, .. } => {
                    assert_eq!(client, 1, "the job holds");
                    staged += 1;
                }
                Episode::PauseClient { client, pause, .. } => {
                    let ttl = ttls[client as usize];
                    assert!(pause >= ttl * 2 && pause <= ttl * 3, "{client}: {pause:?}");
                }
                _ => {}
            }
        }
        assert!(staged > 0);
        // One TTL for all: no job, the same schedule as without the setting.
        let mut same = Plan::new(5, &FaultKind::ALL, Mode::RedlockQuarantine, 3, ms(500))
            .with_client_ttls(vec![ms(500); 3]);
        let mut plain = Plan::new(5, &FaultKind::ALL, Mode::RedlockQuarantine, 3, ms(500));
        for _ in 0..100 {
            assert_eq!(same.next_episode(), plain.next_episode());
        }
    }

    #[test]
    fn a_single_node_has_no_partitions_and_no_aof_restarts() {
        let mut plan = Plan::new(1, &FaultKind::ALL, Mode::Single, 2, Duration::from_secs(1));
        for _ in 0..200 {
            match plan.next_episode().unwrap().1 {
                Episode::Restart {
                    persist,
                    cut,
                    victim,
                    ..
                } => assert!(!persist && cut.is_empty() && victim == 0),
                Episode::ClockForward { cut, node, .. } => assert!(cut.is_empty() && node == 0),
                Episode::Kill { nodes, .. } => assert_eq!(nodes, vec![0]),
                _ => {}
            }
        }
        assert!(Plan::new(1, &[], Mode::Single, 1, Duration::from_secs(1))
            .next_episode()
            .is_none());
    }

    #[test]
    fn etcd_gets_member_kills_and_pauses_of_leader_and_followers_and_no_clock_faults() {
        let ttl = Duration::from_secs(1);
        let mut plan = Plan::new(3, &FaultKind::ALL, Mode::Etcd, 3, ttl);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..500 {
            let (_, ep) = plan.next_episode().unwrap();
            seen.insert(ep.kind());
            match ep {
                Episode::KillMember { down, .. } => assert!(down > ttl),
                Episode::PauseMember { .. } | Episode::PauseClient { .. } => {}
                Episode::Latency { nodes, .. } => assert_eq!(nodes.len(), 1),
                other => panic!("not an etcd episode: {other:?}"),
            }
        }
        let expected: std::collections::HashSet<FaultKind> = [
            FaultKind::Kill,
            FaultKind::KillLeader,
            FaultKind::PauseNode,
            FaultKind::PauseLeader,
            FaultKind::PauseClient,
            FaultKind::Latency,
        ]
        .into_iter()
        .collect();
        assert_eq!(seen, expected);
    }
}
