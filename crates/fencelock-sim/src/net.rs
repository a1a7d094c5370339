//! The simulated network: nodes behind in-memory streams that the real client connects to
//! through `fencelock::sim` (its one connection seam). Each connection is served by a task that
//! reads the client's commands in order and answers each after a seeded delay, at the node's
//! own clock; faults break connections, partition nodes, restart them with or without their
//! data, flush them, and move their clocks. Everything runs on one thread, on tokio's paused
//! clock: a run is a function of its seed.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use fencelock::sim::{Connecting, Connector, Stream};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::keyspace::Migrated;
use crate::node::{Node, Persistence};
use crate::resp::{decode_command, Incomplete, Reply};
use crate::slots::{command_keys, key_slot, SLOTS};

/// The node time (ms since the epoch) at the start of every run.
pub const EPOCH_MS: i64 = 1_767_225_600_000;

/// A node as the network sees it.
#[allow(missing_debug_implementations)]
pub struct SimNode {
    pub node: Node,
    /// The node clock's offset from the virtual time (ms).
    pub offset_ms: i64,
    /// Unreachable: connections hang, new ones time out.
    pub partitioned: bool,
    /// Bumped by a restart or a cut: connections of an older incarnation are dropped.
    incarnation: u64,
    kill: Rc<Notify>,
    /// Subscribers: channel -> (connection id, its push queue).
    subs: HashMap<Vec<u8>, Vec<(u64, mpsc::UnboundedSender<Reply>)>>,
    /// Delay of each reply: uniform in [min, max] ms.
    pub delay_ms: (u64, u64),
    /// A delay after the command ran, before its reply leaves (ms): the way back is slow, the
    /// command took effect on time.
    pub reply_delay_ms: u64,
    /// How long each message (what the node reads at once: a command, or a whole pipeline)
    /// takes to arrive, on top of `delay_ms` per command.
    pub latency_ms: u64,
    /// How fast the node's clock runs, in millionths more than the virtual time.
    pub drift_ppm: i64,
    /// When a fault last touched the node (virtual ms), for the checker's "quiet node".
    pub troubled_at: i64,
    /// The primary this node replicates (`ROLE` says `slave`; writes are refused with
    /// `READONLY`); `None` for a primary.
    pub replica_of: Option<usize>,
    /// The process is gone (a cluster primary killed): connections are refused at once.
    pub down: bool,
}

/// A Sentinel-managed group of nodes (`redis+sentinel://`): a primary and its replicas, and
/// three Sentinels, each naming the primary it believes in.
#[derive(Debug, Clone)]
pub struct Group {
    /// The name the Sentinels know the primary by.
    pub name: String,
    /// The nodes of the group (indices into `World::nodes`).
    pub members: Vec<usize>,
    /// Per Sentinel: the node it names as the primary.
    pub named: Vec<usize>,
    /// Replication stopped (the replicas keep what they had: a link down, a replica far
    /// behind).
    pub stalled: bool,
}

/// The simulated world: the nodes, the virtual clock, the seeded randomness and the trace.
#[allow(missing_debug_implementations)]
pub struct World {
    pub nodes: Vec<RefCell<SimNode>>,
    start: Instant,
    rng: RefCell<fastrand::Rng>,
    next_conn: Cell<u64>,
    next_run: Cell<u64>,
    pub trace: RefCell<Vec<String>>,
    /// Whether each command and reply goes to the trace (costly; on for a rerun of one seed).
    pub verbose: bool,
    /// Commands served, for the throughput figures.
    pub commands: Cell<u64>,
    /// Whether some node lost data in this run (a restart without persistence, a FLUSHALL).
    /// Extra delay (ms) of every command one client sends to one node: (node, client) -> ms.
    /// A request of that client stays in flight while others' reach the node.
    pub client_delay: RefCell<std::collections::BTreeMap<(usize, usize), u64>>,
    pub lost_data: Cell<bool>,
    /// When a node lost its data (a restart without persistence, a FLUSHALL), in virtual ms.
    pub losses: RefCell<Vec<i64>>,
    /// The clients paused now (a whole process stopped): their connections, told apart by the
    /// user name they authenticate with (`c<client>`), neither send nor receive meanwhile.
    pub frozen: RefCell<std::collections::HashSet<usize>>,
    /// The Sentinel groups (none unless a scenario makes them; see [`World::group_up`]).
    pub groups: RefCell<Vec<Group>>,
    /// The Redis Cluster the nodes form (none unless a scenario makes one; see
    /// [`World::cluster_up`]).
    pub cluster: RefCell<Option<Cluster>>,
}

/// A Redis Cluster of the world's nodes: shards of a primary and its replica (Sentinel-less
/// [`Group`]s, for their replication), 16384 slots, and the slot moves under way.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The primary serving each slot (`None`: not served, `CLUSTERDOWN`).
    pub owner: Vec<Option<usize>>,
    /// Slots migrating: slot -> (the owner, the importing node).
    pub moving: HashMap<u16, (usize, usize)>,
}

impl World {
    pub fn new(nodes: usize, seed: u64, verbose: bool) -> Rc<World> {
        let start = Instant::now();
        let w = World {
            nodes: Vec::new(),
            start,
            rng: RefCell::new(fastrand::Rng::with_seed(seed)),
            next_conn: Cell::new(0),
            next_run: Cell::new(0),
            trace: RefCell::new(Vec::new()),
            verbose,
            commands: Cell::new(0),
            client_delay: RefCell::default(),
            lost_data: Cell::new(false),
            losses: RefCell::new(Vec::new()),
            frozen: RefCell::default(),
            groups: RefCell::default(),
            cluster: RefCell::default(),
        };
        let mut w = w;
        for i in 0..nodes {
            let run_id = w.run_id();
            let mut node = Node::new(run_id.clone(), EPOCH_MS, Persistence::None, 6379 + i as u16);
            // Fresh nodes that never held a lock, marked new as `fencelock up` does: counted
            // at once.
            let marker = fencelock::protocol::new_node_marker(&run_id);
            node.exec(
                EPOCH_MS,
                &[
                    b"SET".to_vec(),
                    fencelock::protocol::NODE_MARKER_KEY.as_bytes().to_vec(),
                    marker.into_bytes(),
                ],
            );
            w.nodes.push(RefCell::new(SimNode {
                node,
                offset_ms: 0,
                partitioned: false,
                incarnation: 0,
                kill: Rc::new(Notify::new()),
                subs: HashMap::new(),
                delay_ms: (0, 2),
                reply_delay_ms: 0,
                latency_ms: 0,
                drift_ppm: 0,
                troubled_at: i64::MIN / 2,
                replica_of: None,
                down: false,
            }));
        }
        Rc::new(w)
    }

    fn run_id(&self) -> String {
        let n = self.next_run.get();
        self.next_run.set(n + 1);
        format!("{:040x}", 0x51u128 << 100 | u128::from(n))
    }

    /// Virtual milliseconds since the run began.
    pub fn elapsed_ms(&self) -> i64 {
        Instant::now().duration_since(self.start).as_millis() as i64
    }

    pub fn node_now(&self, i: usize) -> i64 {
        let n = self.nodes[i].borrow();
        let elapsed = self.elapsed_ms();
        EPOCH_MS + elapsed + elapsed * n.drift_ppm / 1_000_000 + n.offset_ms
    }

    /// Makes node `i` refuse writes as Redis does over its `maxmemory` (or takes that back).
    pub fn set_oom(&self, i: usize, oom: bool) {
        self.nodes[i].borrow().node.keyspace().oom = oom;
    }

    /// Node `i` evicts `key` under memory pressure, as its `maxmemory-policy` allows (a
    /// fault); whether the key went.
    pub fn evict(&self, i: usize, key: &str) -> bool {
        self.trouble(i);
        let now = self.node_now(i);
        let mut n = self.nodes[i].borrow_mut();
        let evicted = n.node.evict(now, key);
        let policy = n.node.policy().to_string();
        drop(n);
        self.log(format!(
            "fault: memory pressure on node {i} (maxmemory-policy {policy}): {key} {}",
            if evicted { "evicted" } else { "kept" }
        ));
        evicted
    }

    /// The nodes whose sorted set `key` has a member containing `text` (the checker's look at
    /// the nodes themselves, not a command).
    pub fn holding_member(&self, key: &str, text: &str) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                let n = self.nodes[i].borrow();
                let mut ks = n.node.keyspace();
                ks.zset_members(key.as_bytes())
                    .iter()
                    .any(|m| String::from_utf8_lossy(m).contains(text))
            })
            .collect()
    }

    /// Whether node `i` has been free of faults for `ms` (reachable, prompt, not restarted).
    pub fn quiet(&self, i: usize, ms: i64) -> bool {
        let n = self.nodes[i].borrow();
        !n.partitioned && n.delay_ms.1 <= 50 && self.elapsed_ms() - n.troubled_at >= ms
    }

    /// Notes that a fault touches node `i` now.
    pub fn trouble(&self, i: usize) {
        self.nodes[i].borrow_mut().troubled_at = self.elapsed_ms();
    }

    pub fn rng<R>(&self, f: impl FnOnce(&mut fastrand::Rng) -> R) -> R {
        f(&mut self.rng.borrow_mut())
    }

    pub fn log(&self, line: impl Into<String>) {
        let line = format!("{:>7}ms {}", self.elapsed_ms(), line.into());
        self.trace.borrow_mut().push(line);
    }

    /// The node URLs the clients are given.
    pub fn urls(&self) -> Vec<String> {
        (0..self.nodes.len())
            .map(|i| format!("redis://sim{i}:6379"))
            .collect()
    }

    /// Breaks every connection to node `i`.
    pub fn cut(&self, i: usize) {
        self.trouble(i);
        let mut n = self.nodes[i].borrow_mut();
        n.incarnation += 1;
        n.subs.clear();
        n.node.keyspace().subscribers.clear();
        n.kill.notify_waiters();
    }

    /// Partitions node `i` (`on`: requests hang, connects time out) or heals it, as a fault.
    pub fn hang(&self, i: usize, on: bool) {
        self.trouble(i);
        self.nodes[i].borrow_mut().partitioned = on;
        self.log(format!(
            "fault: node {i} {}",
            if on { "hangs" } else { "answers again" }
        ));
    }

    /// Runs `args` on node `i` at its own time, as an operator's `redis-cli` would (no client,
    /// no delay, no fault in between).
    pub fn by_hand(&self, i: usize, args: &[&str]) -> Reply {
        let now = self.node_now(i);
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        self.nodes[i].borrow_mut().node.exec(now, &args)
    }

    /// `GET key` on node `i` by hand: the string, or `None` when there is none.
    pub fn get(&self, i: usize, key: &str) -> Option<String> {
        match self.by_hand(i, &["GET", key]) {
            Reply::Bulk(v) => Some(String::from_utf8_lossy(&v).into_owned()),
            _ => None,
        }
    }

    /// Sets `key` on node `i` for `ms` as another program would (`SET key stranger NX PX ms`).
    pub fn stranger(&self, i: usize, key: &str, ms: u64) {
        let reply = self.by_hand(i, &["SET", key, "stranger", "NX", "PX", &ms.to_string()]);
        self.log(format!(
            "fault: a stranger sets {key} on node {i} for {ms}ms: {reply:?}"
        ));
    }

    /// On node `i`: how long `key` lives (ms; 0 when it does not) and how long the latest entry
    /// of the quarantine's record (`fencelock:ttls`) does.
    pub fn key_and_record_left(&self, i: usize, key: &str) -> (i64, i64) {
        let now = self.node_now(i);
        let mut n = self.nodes[i].borrow_mut();
        let key_left = match n
            .node
            .exec(now, &[b"PTTL".to_vec(), key.as_bytes().to_vec()])
        {
            Reply::Int(ms) => ms.max(0),
            _ => 0,
        };
        let top = n.node.exec(
            now,
            &[
                b"ZRANGE".to_vec(),
                fencelock::protocol::TTLS_KEY.as_bytes().to_vec(),
                b"-1".to_vec(),
                b"-1".to_vec(),
                b"WITHSCORES".to_vec(),
            ],
        );
        let record_left = match top {
            Reply::Array(items) => match items.as_slice() {
                [_, Reply::Bulk(score)] => {
                    String::from_utf8_lossy(score).parse::<f64>().unwrap_or(0.0) as i64 - now
                }
                _ => 0,
            },
            _ => 0,
        };
        (key_left, record_left.max(0))
    }

    /// Restarts node `i` (its connections break; its data survives only with persistence).
    pub fn restart(&self, i: usize, persistence: Persistence) {
        if persistence == Persistence::None {
            self.lost_data.set(true);
            self.losses.borrow_mut().push(self.elapsed_ms());
        }
        let run_id = self.run_id();
        let now = self.node_now(i);
        {
            let mut n = self.nodes[i].borrow_mut();
            n.node.set_persistence(persistence);
            n.node.restart(run_id.clone(), now);
        }
        self.cut(i);
        self.log(format!(
            "fault: node {i} restarts ({persistence:?}), run {}",
            &run_id[36..]
        ));
    }

    /// Makes Sentinel groups of the nodes, `size` nodes each in order (nodes `0..size` are group
    /// 0, its primary node 0): the first node of each is the primary, the others replicate it,
    /// and every Sentinel names the primary. Replication runs at [`World::replicate`].
    pub fn group_up(&self, size: usize) {
        let mut groups = self.groups.borrow_mut();
        for (g, first) in (0..self.nodes.len()).step_by(size).enumerate() {
            let members: Vec<usize> = (first..(first + size).min(self.nodes.len())).collect();
            for &m in &members[1..] {
                self.nodes[m].borrow_mut().replica_of = Some(first);
            }
            groups.push(Group {
                name: format!("g{g}"),
                members,
                named: vec![first; 3],
                stalled: false,
            });
        }
        drop(groups);
        self.replicate();
    }

    /// The `redis+sentinel://` URL of each group: its three Sentinels and its name.
    pub fn group_urls(&self) -> Vec<String> {
        self.groups
            .borrow()
            .iter()
            .enumerate()
            .map(|(g, group)| {
                let sentinels: Vec<String> = (0..group.named.len())
                    .map(|k| format!("sentinel{g}x{k}:26379"))
                    .collect();
                format!("redis+sentinel://{}/{}", sentinels.join(","), group.name)
            })
            .collect()
    }

    /// One replication step: every replica of a group whose replication runs takes its
    /// primary's data as it is now (a full synchronisation; asynchronous replication is this
    /// copy, made every few milliseconds by the scenario, and what a primary wrote since the
    /// last one is what a failover loses).
    pub fn replicate(&self) {
        for group in self.groups.borrow().iter().filter(|g| !g.stalled) {
            for &m in &group.members {
                let Some(p) = self.nodes[m].borrow().replica_of else {
                    continue;
                };
                if self.nodes[p].borrow().partitioned || self.nodes[m].borrow().partitioned {
                    continue;
                }
                let primary = self.nodes[p].borrow();
                let data = primary.node.keyspace();
                self.nodes[m].borrow().node.keyspace().sync_from(&data);
            }
        }
    }

    /// Stops (or resumes) group `g`'s replication.
    pub fn stall(&self, g: usize, on: bool) {
        self.groups.borrow_mut()[g].stalled = on;
        self.log(format!(
            "fault: group {g}'s replication {}",
            if on { "stalls" } else { "runs again" }
        ));
    }

    /// Makes node `to` the primary of its group: it stops replicating, and the group's other
    /// nodes replicate it (the old primary too, once it answers). The Sentinels still name the
    /// old primary until [`World::name_primary`]. `cut`: the old primary's connections break
    /// (as Sentinel's failover does: it kills the demoted node's clients); without it, a
    /// client's kept connection meets `READONLY` at its next write.
    pub fn promote(&self, to: usize, cut: bool) {
        let (g, members) = {
            let groups = self.groups.borrow();
            let g = groups
                .iter()
                .position(|g| g.members.contains(&to))
                .expect("a node of a group");
            (g, groups[g].members.clone())
        };
        let old: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&m| m != to && self.nodes[m].borrow().replica_of.is_none())
            .collect();
        for &m in &members {
            self.nodes[m].borrow_mut().replica_of = (m != to).then_some(to);
        }
        self.trouble(to);
        self.log(format!(
            "fault: node {to} is promoted primary of group {g} (run {}); nodes {old:?} replicate it{}",
            &self.nodes[to].borrow().node.run_id()[36..],
            if cut { ", their connections broken" } else { "" }
        ));
        if cut {
            for m in old {
                self.cut(m);
            }
        }
    }

    /// Sentinel `k` of group `g` names node `node` as the primary from now on.
    pub fn name_primary(&self, g: usize, k: usize, node: usize) {
        self.groups.borrow_mut()[g].named[k] = node;
        self.log(format!("sentinel {k} of group {g} names node {node}"));
    }

    /// Makes a Redis Cluster of the nodes: shards of two nodes in order (node `2s` the primary
    /// of shard `s`, node `2s + 1` its replica, replicated as a [`Group`] is), the 16384 slots
    /// split evenly among the primaries in order.
    pub fn cluster_up(&self) {
        self.group_up(2);
        let primaries: Vec<usize> = self.groups.borrow().iter().map(|g| g.members[0]).collect();
        // As `redis-cli --cluster create` splits them: shard k from round(k * 16384 / n).
        let n = primaries.len() as f64;
        let first = |k: usize| (k as f64 * f64::from(SLOTS) / n).round() as usize;
        let owner = (0..usize::from(SLOTS))
            .map(|s| {
                let k = (0..primaries.len())
                    .rev()
                    .find(|&k| first(k) <= s)
                    .unwrap_or(0);
                Some(primaries[k])
            })
            .collect();
        *self.cluster.borrow_mut() = Some(Cluster {
            owner,
            moving: HashMap::new(),
        });
    }

    /// The `redis+cluster://` URL of the cluster with hash tag `tag`: every primary a seed.
    pub fn cluster_url(&self, tag: &str) -> String {
        let seeds: Vec<String> = self
            .groups
            .borrow()
            .iter()
            .map(|g| format!("sim{}:6379", g.members[0]))
            .collect();
        format!("redis+cluster://{}/?tag={tag}", seeds.join(","))
    }

    /// The primary serving `slot` now.
    pub fn slot_owner(&self, slot: u16) -> Option<usize> {
        self.cluster.borrow().as_ref()?.owner[usize::from(slot)]
    }

    /// A failover in the cluster: replica `to` becomes the primary of its shard and serves its
    /// old primary's slots (replication is asynchronous: what the old primary wrote since the
    /// last copy is lost). `kill`: the old primary died (hung, its connections broken); else it
    /// is demoted (`CLUSTER FAILOVER` on the replica), keeps its connections and answers
    /// `MOVED` for the shard's keys.
    pub fn cluster_failover(&self, to: usize, kill: bool) {
        let old = self.nodes[to]
            .borrow()
            .replica_of
            .expect("a failover promotes a replica");
        if kill {
            self.nodes[old].borrow_mut().down = true;
            self.hang(old, true);
            self.cut(old);
        }
        self.promote(to, false);
        let mut cluster = self.cluster.borrow_mut();
        let cluster = cluster.as_mut().expect("a cluster");
        for o in cluster.owner.iter_mut().filter(|o| **o == Some(old)) {
            *o = Some(to);
        }
        for (from, into) in cluster.moving.values_mut() {
            for n in [from, into] {
                if *n == old {
                    *n = to;
                }
            }
        }
    }

    /// Starts moving `slot` to primary `to` (`CLUSTER SETSLOT IMPORTING` on `to`, `MIGRATING`
    /// on the owner); the owner.
    pub fn begin_move(&self, slot: u16, to: usize) -> usize {
        let mut guard = self.cluster.borrow_mut();
        let cluster = guard.as_mut().expect("a cluster");
        let from = cluster.owner[usize::from(slot)].expect("a served slot");
        cluster.moving.insert(slot, (from, to));
        drop(guard);
        self.log(format!(
            "fault: slot {slot} starts moving from node {from} to node {to}"
        ));
        from
    }

    /// `MIGRATE` of `key` (of a moving slot) from its owner to the importing node, with its
    /// value and TTL.
    pub fn migrate(&self, slot: u16, key: &[u8], replace: bool) -> Migrated {
        let (from, to) = self.cluster.borrow().as_ref().expect("a cluster").moving[&slot];
        let (now_from, now_to) = (self.node_now(from), self.node_now(to));
        let src = self.nodes[from].borrow();
        let dst = self.nodes[to].borrow();
        let (mut src, mut dst) = (src.node.keyspace(), dst.node.keyspace());
        src.now = now_from;
        dst.now = now_to;
        let moved = src.migrate(key, &mut dst, replace);
        drop((src, dst));
        self.log(format!(
            "fault: MIGRATE {} from node {from} to node {to}{}: {moved:?}",
            String::from_utf8_lossy(key),
            if replace { " REPLACE" } else { "" }
        ));
        moved
    }

    /// Ends the move of `slot` (`CLUSTER SETSLOT NODE` on both): the importing node owns it.
    pub fn finish_move(&self, slot: u16) {
        let mut guard = self.cluster.borrow_mut();
        let cluster = guard.as_mut().expect("a cluster");
        let (from, to) = cluster.moving.remove(&slot).expect("a moving slot");
        cluster.owner[usize::from(slot)] = Some(to);
        drop(guard);
        self.log(format!(
            "fault: slot {slot} moved from node {from} to node {to}"
        ));
    }

    /// The live keys of `slot` on node `i`.
    pub fn keys_in_slot(&self, i: usize, slot: u16) -> Vec<Vec<u8>> {
        let now = self.node_now(i);
        let n = self.nodes[i].borrow();
        let mut ks = n.node.keyspace();
        ks.now = now;
        ks.keys_in_slot(slot)
    }

    /// Runs `args` on node `i` as a client's connection would, right after `ASKING` when
    /// `asking` (for the conformance test: the node's reply, routed by the cluster if any).
    pub fn command(&self, i: usize, args: &[&[u8]], asking: bool) -> Reply {
        let (push, _) = mpsc::unbounded_channel();
        let args = args.iter().map(|a| a.to_vec()).collect();
        self.exec(i, u64::MAX, &push, (args, asking)).remove(0)
    }

    /// `CLUSTER ...` on node `i` (`own`: the primary it replicates).
    fn cluster_command(&self, (i, own): (usize, Option<usize>), args: &[Vec<u8>]) -> Reply {
        let cluster = self.cluster.borrow();
        let Some(cluster) = cluster.as_ref() else {
            return Reply::err("ERR This instance has cluster support disabled");
        };
        let sub = args
            .get(1)
            .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
            .unwrap_or_default();
        let node = |n: usize| {
            Reply::Array(vec![
                Reply::bulk(format!("sim{n}")),
                Reply::Int(6379),
                Reply::bulk(node_id(n)),
                Reply::Array(Vec::new()),
            ])
        };
        match (sub.as_str(), args.len()) {
            ("SLOTS", 2) => {
                let mut ranges = Vec::new();
                let mut start = 0;
                for s in 1..=cluster.owner.len() {
                    if s < cluster.owner.len() && cluster.owner[s] == cluster.owner[start] {
                        continue;
                    }
                    if let Some(p) = cluster.owner[start] {
                        let mut range =
                            vec![Reply::Int(start as i64), Reply::Int(s as i64 - 1), node(p)];
                        range.extend(
                            (0..self.nodes.len())
                                .filter(|&r| {
                                    // Node `i` is borrowed by the command being served.
                                    let of = if r == i {
                                        own
                                    } else {
                                        self.nodes[r].borrow().replica_of
                                    };
                                    of == Some(p)
                                })
                                .map(node),
                        );
                        ranges.push(Reply::Array(range));
                    }
                    start = s;
                }
                Reply::Array(ranges)
            }
            ("MYID", 2) => Reply::bulk(node_id(i)),
            ("KEYSLOT", 3) => Reply::Int(i64::from(key_slot(&args[2]))),
            ("INFO", 2) => {
                let assigned = cluster.owner.iter().flatten().count();
                let state = if assigned == cluster.owner.len() {
                    "ok"
                } else {
                    "fail"
                };
                Reply::Bulk(
                    format!(
                        "cluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\ncluster_known_nodes:{}\r\n",
                        self.nodes.len()
                    )
                    .into_bytes(),
                )
            }
            _ => Reply::err(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLUSTER HELP.",
                args.get(1)
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .unwrap_or_default()
            )),
        }
    }

    /// Runs one command of connection `conn` on node `i`: the replies (a subscription answers
    /// once per channel).
    fn exec(
        &self,
        i: usize,
        conn: u64,
        push: &mpsc::UnboundedSender<Reply>,
        (args, asking): (Vec<Vec<u8>>, bool),
    ) -> Vec<Reply> {
        self.commands.set(self.commands.get() + 1);
        let now = self.node_now(i);
        let mut n = self.nodes[i].borrow_mut();
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        n.node.keyspace().now = now;
        let routed = match self.cluster.borrow().as_ref() {
            Some(cluster) => route(cluster, i, &n, &args, asking),
            None => Ok(None),
        };
        let replies = match (routed, name.as_str()) {
            (Err(refused), _) => vec![refused],
            (Ok(_), "CLUSTER") => vec![self.cluster_command((i, n.replica_of), &args)],
            (Ok(_), "INFO")
                if self.cluster.borrow().is_some()
                    && args
                        .get(1)
                        .is_some_and(|s| s.eq_ignore_ascii_case(b"cluster")) =>
            {
                vec![Reply::bulk("# Cluster\r\ncluster_enabled:1\r\n")]
            }
            (Ok(slot), _) => {
                n.node.keyspace().script_slot = slot;
                let replies = self.serve_command(i, conn, push, &mut n, &args, &name, now);
                n.node.keyspace().script_slot = None;
                replies
            }
        };
        let published = n.node.take_published();
        drop(n);
        let reached: Vec<usize> = if self.cluster.borrow().is_some() {
            // A cluster's bus carries every PUBLISH to every node.
            (0..self.nodes.len()).collect()
        } else {
            vec![i]
        };
        for (ch, msg) in published {
            for &j in &reached {
                if let Some(list) = self.nodes[j].borrow().subs.get(&ch) {
                    for (_, tx) in list {
                        let _ = tx.send(Reply::Array(vec![
                            Reply::bulk("message"),
                            Reply::Bulk(ch.clone()),
                            Reply::Bulk(msg.clone()),
                        ]));
                    }
                }
            }
        }
        if self.verbose {
            let shown: Vec<String> = args
                .iter()
                .map(|a| {
                    let s = String::from_utf8_lossy(a);
                    if s.len() > 40 {
                        format!("{}…", &s[..40.min(s.len())])
                    } else {
                        s.into_owned()
                    }
                })
                .collect();
            self.log(format!("n{i} c{conn} {} -> {:?}", shown.join(" "), replies));
        }
        replies
    }

    /// One command on node `i`, once the cluster (if any) let it through.
    #[allow(clippy::too_many_arguments)]
    fn serve_command(
        &self,
        i: usize,
        conn: u64,
        push: &mpsc::UnboundedSender<Reply>,
        n: &mut SimNode,
        args: &[Vec<u8>],
        name: &str,
        now: i64,
    ) -> Vec<Reply> {
        let _ = i;
        match name {
            "SUBSCRIBE" => args[1..]
                .iter()
                .map(|ch| {
                    let list = n.subs.entry(ch.clone()).or_default();
                    if !list.iter().any(|(c, _)| *c == conn) {
                        list.push((conn, push.clone()));
                    }
                    let count = list.len() as i64;
                    n.node.keyspace().subscribers.insert(ch.clone(), count);
                    let mine = n
                        .subs
                        .values()
                        .filter(|l| l.iter().any(|(c, _)| *c == conn))
                        .count();
                    Reply::Array(vec![
                        Reply::bulk("subscribe"),
                        Reply::Bulk(ch.clone()),
                        Reply::Int(mine as i64),
                    ])
                })
                .collect(),
            "UNSUBSCRIBE" => {
                let chans: Vec<Vec<u8>> = if args.len() > 1 {
                    args[1..].to_vec()
                } else {
                    n.subs
                        .iter()
                        .filter(|(_, l)| l.iter().any(|(c, _)| *c == conn))
                        .map(|(k, _)| k.clone())
                        .collect()
                };
                chans
                    .into_iter()
                    .map(|ch| {
                        if let Some(list) = n.subs.get_mut(&ch) {
                            list.retain(|(c, _)| *c != conn);
                            let count = list.len() as i64;
                            n.node.keyspace().subscribers.insert(ch.clone(), count);
                        }
                        let mine = n
                            .subs
                            .values()
                            .filter(|l| l.iter().any(|(c, _)| *c == conn))
                            .count();
                        Reply::Array(vec![
                            Reply::bulk("unsubscribe"),
                            Reply::Bulk(ch),
                            Reply::Int(mine as i64),
                        ])
                    })
                    .collect()
            }
            "ROLE" => vec![match n.replica_of {
                None => Reply::Array(vec![
                    Reply::bulk("master"),
                    Reply::Int(0),
                    Reply::Array(Vec::new()),
                ]),
                Some(p) => Reply::Array(vec![
                    Reply::bulk("slave"),
                    Reply::bulk(format!("sim{p}")),
                    Reply::Int(6379),
                    Reply::bulk("connected"),
                    Reply::Int(0),
                ]),
            }],
            // A replica refuses every write (`replica-read-only yes`, the default). The scripts
            // of the library all may write; Redis 7 refuses a script's first write command with
            // the same error, which the client reads as the same kind.
            name if n.replica_of.is_some() && !READ_ONLY.contains(&name) => vec![Reply::err(
                "READONLY You can't write against a read only replica.",
            )],
            _ => vec![n.node.exec(now, args)],
        }
    }
}

/// The cluster node id of node `i` (40 hex digits, as Redis's).
fn node_id(i: usize) -> String {
    format!("{:040x}", 0xc1u128 << 100 | i as u128)
}

/// Where a cluster sends a command reaching node `i` (`asking`: the connection sent `ASKING`
/// just before), as Redis 7.0's `getNodeByQuery` decides: `Ok` with the slot of its keys and
/// whether that slot migrates away (for the checks of a script's own commands), or the
/// refusal: `CROSSSLOT`, `CLUSTERDOWN`, `MOVED`, `ASK` (the slot migrates and no key is
/// here), `TRYAGAIN` (the slot migrates and only some keys are here; or imported with `ASKING`,
/// several keys, one missing).
fn route(
    cluster: &Cluster,
    i: usize,
    n: &SimNode,
    args: &[Vec<u8>],
    asking: bool,
) -> Result<Option<(u16, bool)>, Reply> {
    let keys = command_keys(args);
    let Some(first) = keys.first() else {
        return Ok(None);
    };
    let slot = key_slot(first);
    if keys.iter().any(|k| key_slot(k) != slot) {
        return Err(Reply::err(
            "CROSSSLOT Keys in request don't hash to the same slot",
        ));
    }
    let Some(owner) = cluster.owner[usize::from(slot)] else {
        return Err(Reply::err("CLUSTERDOWN Hash slot not served"));
    };
    let moving = cluster.moving.get(&slot).copied();
    let missing = {
        let mut ks = n.node.keyspace();
        keys.iter().filter(|k| !ks.holds(k)).count()
    };
    if owner == i {
        if let (Some((_, to)), true) = (moving, missing > 0) {
            // Some keys here and some not: the move split them (Redis 7.0.15 answers so; the
            // conformance test found it).
            if missing < keys.len() {
                return Err(Reply::err(
                    "TRYAGAIN Multiple keys request during rehashing of slot",
                ));
            }
            return Err(Reply::err(format!("ASK {slot} sim{to}:6379")));
        }
        return Ok(Some((slot, moving.is_some())));
    }
    if asking && moving.is_some_and(|(_, to)| to == i) {
        if keys.len() > 1 && missing > 0 {
            return Err(Reply::err(
                "TRYAGAIN Multiple keys request during rehashing of slot",
            ));
        }
        return Ok(Some((slot, false)));
    }
    Err(Reply::err(format!("MOVED {slot} sim{owner}:6379")))
}

/// The commands a replica serves (the rest are refused with `READONLY`).
const READ_ONLY: [&str; 16] = [
    "GET", "MGET", "PTTL", "TTL", "EXISTS", "TYPE", "INFO", "PING", "ECHO", "TIME", "SCRIPT",
    "CONFIG", "CLIENT", "SELECT", "ZRANGE", "ZSCORE",
];

/// The connector the client's seam calls. The library opens connections from tasks of its own,
/// outside the run's `LocalSet`: each new connection's server end goes to `accept`, which
/// serves it from inside.
#[allow(missing_debug_implementations)]
pub struct Net {
    world: Rc<World>,
    accepted: mpsc::UnboundedSender<(Endpoint, u64, DuplexStream)>,
}

/// What a connection reaches: a node, or Sentinel `.1` of group `.0`.
enum Endpoint {
    Node(usize),
    Sentinel(usize, usize),
}

impl Net {
    /// The connector, and the task that must run (spawned locally) to serve its connections.
    pub fn new(world: Rc<World>) -> (Net, impl std::future::Future<Output = ()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<(Endpoint, u64, DuplexStream)>();
        let w = world.clone();
        let accept = async move {
            while let Some((to, conn, stream)) = rx.recv().await {
                match to {
                    Endpoint::Node(i) => {
                        tokio::task::spawn_local(serve(w.clone(), i, conn, stream))
                    }
                    Endpoint::Sentinel(g, k) => {
                        tokio::task::spawn_local(serve_sentinel(w.clone(), g, k, stream))
                    }
                };
            }
        };
        (
            Net {
                world,
                accepted: tx,
            },
            accept,
        )
    }
}

impl Connector for Net {
    fn connect(&self, addr: &str) -> Connecting {
        let world = self.world.clone();
        if let Some((g, k)) = addr
            .strip_prefix("sentinel")
            .and_then(|r| r.split(':').next())
            .and_then(|r| r.split_once('x'))
            .and_then(|(g, k)| Some((g.parse::<usize>().ok()?, k.parse::<usize>().ok()?)))
            .filter(|&(g, k)| {
                world
                    .groups
                    .borrow()
                    .get(g)
                    .is_some_and(|x| k < x.named.len())
            })
        {
            let (client, server) = tokio::io::duplex(1 << 12);
            if self
                .accepted
                .send((Endpoint::Sentinel(g, k), 0, server))
                .is_err()
            {
                return ended();
            }
            return Box::pin(async move { Ok(Box::new(client) as Box<dyn Stream>) });
        }
        let i: Option<usize> = addr
            .strip_prefix("sim")
            .and_then(|r| r.split(':').next())
            .and_then(|n| n.parse().ok())
            .filter(|i| *i < world.nodes.len());
        let Some(i) = i else {
            let addr = addr.to_string();
            return Box::pin(async move {
                Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no simulated node at {addr}"),
                ))
            });
        };
        if world.nodes[i].borrow().down {
            let addr = addr.to_string();
            return Box::pin(async move {
                Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("{addr}: connection refused (the node is down)"),
                ))
            });
        }
        if world.nodes[i].borrow().partitioned {
            // No answer at all: the client's connect timeout decides.
            return Box::pin(std::future::pending());
        }
        let (client, server) = tokio::io::duplex(1 << 16);
        let conn = world.next_conn.get();
        world.next_conn.set(conn + 1);
        if self
            .accepted
            .send((Endpoint::Node(i), conn, server))
            .is_err()
        {
            return ended();
        }
        Box::pin(async move { Ok(Box::new(client) as Box<dyn Stream>) })
    }
}

/// A connection opened after the run's acceptor stopped.
fn ended() -> Connecting {
    Box::pin(async {
        Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "the simulation has ended",
        ))
    })
}

/// A Sentinel's connection: `SENTINEL GET-MASTER-ADDR-BY-NAME` answers the node this Sentinel
/// names (`sim<i>`, port 6379), after a delay like a node's.
async fn serve_sentinel(world: Rc<World>, g: usize, k: usize, mut io: DuplexStream) {
    let mut buf = Vec::with_capacity(512);
    let mut out = Vec::with_capacity(512);
    loop {
        loop {
            let (args, used) = match decode_command(&buf) {
                Ok(c) => c,
                Err(Incomplete::More) => break,
                Err(Incomplete::Bad(_)) => return,
            };
            buf.drain(..used);
            let delay = world.rng(|r| r.u64(0..=2));
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let word = |i: usize| {
                args.get(i)
                    .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
                    .unwrap_or_default()
            };
            let reply = match (word(0).as_str(), word(1).as_str()) {
                ("SENTINEL", "GET-MASTER-ADDR-BY-NAME") => {
                    let groups = world.groups.borrow();
                    let group = &groups[g];
                    if args.get(2).map(Vec::as_slice) == Some(group.name.as_bytes()) {
                        Reply::Array(vec![
                            Reply::bulk(format!("sim{}", group.named[k])),
                            Reply::bulk("6379"),
                        ])
                    } else {
                        Reply::Nil
                    }
                }
                ("PING", _) => Reply::Status("PONG".into()),
                ("CLIENT", _) => Reply::ok(),
                (other, _) => Reply::err(format!(
                    "ERR the simulated Sentinel answers SENTINEL GET-MASTER-ADDR-BY-NAME only, not {other}"
                )),
            };
            if world.verbose {
                world.log(format!(
                    "sentinel {k} of group {g}: {} -> {reply:?}",
                    word(0)
                ));
            }
            reply.encode(&mut out);
            if io.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        match io.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

async fn serve(world: Rc<World>, i: usize, conn: u64, mut io: DuplexStream) {
    let (incarnation, kill) = {
        let n = world.nodes[i].borrow();
        (n.incarnation, n.kill.clone())
    };
    let alive =
        |w: &World| w.nodes[i].borrow().incarnation == incarnation && !w.nodes[i].borrow().down;
    let (push_tx, mut push_rx) = mpsc::unbounded_channel::<Reply>();
    let mut buf = Vec::with_capacity(4096);
    let mut out = Vec::with_capacity(4096);
    // The client this connection belongs to, once it authenticated as `c<client>`.
    let mut client: Option<usize> = None;
    // `ASKING` was the connection's last command (a cluster node).
    let mut asking = false;
    let frozen = |w: &World, c: Option<usize>| c.is_some_and(|c| w.frozen.borrow().contains(&c));
    loop {
        loop {
            let (args, used) = match decode_command(&buf) {
                Ok(c) => c,
                Err(Incomplete::More) => break,
                Err(Incomplete::Bad(_)) => return,
            };
            buf.drain(..used);
            let (lo, hi) = world.nodes[i].borrow().delay_ms;
            let delay = world.rng(|r| r.u64(lo..=hi));
            if delay > 0 {
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
                    _ = kill.notified() => return,
                }
            }
            let extra = client.and_then(|c| world.client_delay.borrow().get(&(i, c)).copied());
            if let Some(ms) = extra {
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    _ = kill.notified() => return,
                }
            }
            // A partitioned node hears nothing until the partition heals; the connection is
            // then gone (as TCP's would be, after its retransmissions gave up).
            while world.nodes[i].borrow().partitioned {
                if world.nodes[i].borrow().down {
                    // A dead process: the connection is reset.
                    return;
                }
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    _ = kill.notified() => return,
                }
                if !world.nodes[i].borrow().partitioned {
                    return;
                }
            }
            // A paused client's command reaches the node when its process runs again.
            while frozen(&world, client) {
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                    _ = kill.notified() => return,
                }
            }
            if !alive(&world) || args.is_empty() {
                return;
            }
            if args[0].eq_ignore_ascii_case(b"AUTH") {
                // Not a node command here: it names the client (`AUTH c<client> <password>`).
                client = args
                    .get(1)
                    .and_then(|u| std::str::from_utf8(u).ok())
                    .and_then(|u| u.strip_prefix('c'))
                    .and_then(|n| n.parse().ok());
                if world.verbose {
                    world.log(format!("n{i} c{conn} AUTH: client {client:?}"));
                }
                Reply::ok().encode(&mut out);
                if io.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
                continue;
            }
            if args[0].eq_ignore_ascii_case(b"ASKING") {
                // The next command of this connection may reach a slot being imported here.
                asking = true;
                Reply::ok().encode(&mut out);
                if io.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
                continue;
            }
            for r in world.exec(i, conn, &push_tx, (args, std::mem::take(&mut asking))) {
                r.encode(&mut out);
            }
            let back = world.nodes[i].borrow().reply_delay_ms;
            if back > 0 {
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep(Duration::from_millis(back)) => {}
                    _ = kill.notified() => return,
                }
            }
            if io.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        tokio::select! {
            biased;
            read = io.read_buf(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let latency = world.nodes[i].borrow().latency_ms;
                    if latency > 0 {
                        tokio::select! {
                            biased;
                            _ = tokio::time::sleep(Duration::from_millis(latency)) => {}
                            _ = kill.notified() => return,
                        }
                    }
                }
            },
            // While the client is paused, its messages wait.
            _ = tokio::time::sleep(Duration::from_millis(10)), if frozen(&world, client) => {}
            Some(push) = push_rx.recv(), if !frozen(&world, client) => {
                push.encode(&mut out);
                if io.write_all(&out).await.is_err() {
                    break;
                }
                out.clear();
            }
            _ = kill.notified() => break,
        }
        if !alive(&world) {
            break;
        }
    }
    let mut n = world.nodes[i].borrow_mut();
    if n.incarnation == incarnation {
        let mut emptied = Vec::new();
        for (ch, list) in n.subs.iter_mut() {
            if list.iter().any(|(c, _)| *c == conn) {
                list.retain(|(c, _)| *c != conn);
                emptied.push((ch.clone(), list.len() as i64));
            }
        }
        for (ch, count) in emptied {
            n.node.keyspace().subscribers.insert(ch, count);
        }
    }
}
