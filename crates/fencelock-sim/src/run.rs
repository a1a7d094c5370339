//! One seeded run: several real `fencelock::Client`s (their own TTLs, node timeouts and
//! fencing) take and release locks on simulated nodes while a fault task breaks things, and a
//! checker judges the history. A run is a function of its seed and options.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::{Duration, Instant as StdInstant};

use fencelock::{AutoExtend, Client, Config, RetryPolicy};

use crate::net::{Net, World, EPOCH_MS};
use crate::node::Persistence;

mod cluster;
mod edges;
mod failover;
mod labels;
mod leaders;
mod remains;

/// Which faults a run may inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Faults {
    /// None: the protocol alone, with seeded delays.
    None,
    /// What the library claims to survive on today's main: restarts with persistence and
    /// without (with the quarantine on), script cache flushes, broken connections, partitions,
    /// late replies.
    Claimed,
    /// `All` without FLUSHALL: the amnesia paths (issue 27 items 1 and 3) without item 4, whose
    /// hole is found at once and would hide them.
    Amnesia,
    /// Everything, known holes included (FLUSHALL of a majority while a lock is held, issue 27
    /// item 4; several nodes restarting empty within a TTL; short TTLs beside long ones).
    All,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub nodes: usize,
    pub clients: usize,
    /// Virtual run length.
    pub duration: Duration,
    pub faults: Faults,
    /// Keep every command and reply in the trace.
    pub verbose: bool,
    /// Issue 27 item 1's roles: client 0 takes plain locks only with a 4 s TTL (L), client 1
    /// has a 1 s TTL with a 980 ms node timeout (S: an ahead margin longer than its TTL); no
    /// overlapping node lists (their two holders would hide the rest).
    pub ttl_roles: bool,
    /// A scripted interleaving instead of the random mix (`Scenario::Mixed`).
    pub scenario: Scenario,
}

/// What a run's clients do: the random mix, or a script aimed at one interleaving that the mix
/// reaches too rarely (each script's times are drawn from the seed within the window it needs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scenario {
    /// The random mix of the family's primitives under `Options::faults`.
    #[default]
    Mixed,
    /// Issue 27 item 1: L (TTL 4 s) takes `r0` late in its announcement's window while a
    /// stranger holds node 2; node 1 restarts empty; S (TTL 1 s, node timeout 980 ms) takes an
    /// unrelated lock while L's entry has less than S's ahead margin left, then goes quiet; C
    /// (TTL 1 s) then tries `r0` while L's lock lives.
    ShortTtl,
    /// Issue 27 item 2: a lock of TTL 1 s auto-extended for seconds while node 0 replies up to
    /// 600 ms late, command by command (an extension lands well after the announcement sent
    /// before it in the same pipeline); then node 0 is cut off, so the last extension it ran is
    /// the last write there while the lock lives on.
    HeldExtension,
    /// Issue 27 item 4: A (TTL 4 s) holds `r0`, plainly or auto-extended; FLUSHALL on two of
    /// the three nodes (they stay up, every connection stays open); B (TTL 1 s), connected
    /// before the flush, and N (TTL 1 s), whose first request comes after it, try `r0` until
    /// A's lock has ended.
    Flush,
    /// The validity counted from before the request: A takes `r0` (TTL 1 s) while every node's
    /// replies come back 150-400 ms after the command ran; B tries `r0` from just before A's
    /// keys expire.
    SlowReply,
    /// Issue 27 item 3, the real client in the order the item gives (quarantine off, fencing
    /// on, one counter per node shared by resources): A's request to node 2 stays in flight
    /// while node 1 restarts empty and G, on another resource, is issued a smaller token and
    /// seeds node 1; A is then issued its larger one; B, after A, must get a token above A's.
    CounterRestart,
    /// The one-round path's acceptance rule and the write-back, step by step on one resource X
    /// (fencing on, quarantine off): B sets every counter; A, with node 0 cut off, is issued pA
    /// by nodes 1 and 2 only; B, its clock behind pA, proposes a value node 0 alone takes (a
    /// derived token must follow); A, its clock now far behind, proposes its last token + 1,
    /// exactly B's derived token, which the written-back counters must refuse; then nodes 0 and
    /// 1 restart empty and D, its clock a minute behind, must not be issued a token by them.
    CounterOrder,
    /// A held lock's liveness: A holds `r0` (TTL 1 s, auto-extended, node timeout 100 ms)
    /// through a passing failure of a majority, which its lost signal must not report: on half
    /// the seeds the connections of nodes 0 and 1 break at once; on the other half node 0 hangs
    /// for 1.5 s (requests neither answered nor refused) while node 1's connections break once.
    /// Then nodes 0 and 1 hang, and an attempt on `r1` must be refused within two node
    /// timeouts (its round, then the release of what it set).
    PassingFailure,
    /// The waiting lines' order. A semaphore of `PERMITS` permits, all held by H; W1 then W2
    /// wait in line; H frees one permit, then the other; T tries for a permit just after each
    /// release. W1 must be admitted before W2 and T never while they wait. A read-write lock:
    /// R1 reads; W waits to write; R2 then waits to read; R1 leaves: W must write before R2
    /// reads.
    LineOrder,
    /// A reader held to the last millisecond of its validity while a writer tries through its
    /// last 1.5 s (the readers' marker).
    ReaderToTheEnd,
    /// The kind of error a refused attempt reports: a held lock with one node hung
    /// (contention), a majority hung (unavailable).
    Refusals,
    /// Overlapping node lists whose shared node answers a new client last (five nodes).
    NodeSetFirst,
    /// One client extends hundreds of locks on nodes 20 ms away.
    ManyLocks,
    /// The end of the tokens' range: a proposal past i64::MAX by hand, a reseed near it, a
    /// client clock past it, the last token issued and the next attempt refused.
    RangeEnd,
    /// A node restarted without its counter beside a node with a stale one: no quorum of
    /// trusted reads, no token.
    UntrustedRead,
    /// An election's terms crossing 10^18, past what a sorted set's double score tells apart.
    TermsPastTenToThe18,
    /// A key deleted on one node between an attempt's grant round and its write-back, and
    /// taken there by another client.
    DeletedBetweenRounds,
    /// A node's counter lost between an attempt's trusted read and its write-back.
    CounterLost,
    /// What a node keeps once every lock and record expired; a reader after its resource's
    /// writer record expired.
    RecordsExpire,
    /// Calls cut short and waiters that give up: no key or place left behind, no wake-up by
    /// one's own release.
    CutShort,
    /// An election across a restart: the log's kept connection replaced, and an observer that
    /// does not count a node restarted empty.
    LeadersRestart,
    /// Sentinel-managed primaries as nodes: failovers that lose the last writes, Sentinels
    /// late to name the new primary, a primary demoted under a kept connection.
    Failover,
    /// Holder labels (issue 33): two labelled and two unlabelled clients, TTLs of 1 s and 4 s,
    /// three resources (one lock at a time, two at once, waited for, auto-extended), a restart
    /// without persistence and later a FLUSHALL, beside a label key an older client left on
    /// `r2`. Besides exclusion: the label a node shows for each grant is its holder's, or none
    /// for an unlabelled holder.
    Labels,
    /// A Redis Cluster as one node (issue 31): a failover that loses a held lock, a manual
    /// failover under a kept connection, a waiter woken on the tagged release channel, a slot
    /// half moved (`ASK`) and one moved key by key (`TRYAGAIN`, the election log read meanwhile)
    /// (`run/cluster.rs`).
    Cluster,
    /// A node whose `maxmemory-policy` evicts drops a held lock's key: no second holder, and
    /// each client's log warns of that node once.
    Evicting,
}

impl Scenario {
    /// The name `--scenario` takes.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Mixed => "mixed",
            Scenario::ShortTtl => "short-ttl",
            Scenario::HeldExtension => "held-extension",
            Scenario::Flush => "flush",
            Scenario::SlowReply => "slow-reply",
            Scenario::CounterRestart => "counter-restart",
            Scenario::CounterOrder => "counter-order",
            Scenario::PassingFailure => "passing-failure",
            Scenario::LineOrder => "line-order",
            Scenario::ReaderToTheEnd => "reader-to-the-end",
            Scenario::Refusals => "refusals",
            Scenario::NodeSetFirst => "node-set-first",
            Scenario::ManyLocks => "many-locks",
            Scenario::RangeEnd => "range-end",
            Scenario::UntrustedRead => "untrusted-read",
            Scenario::TermsPastTenToThe18 => "terms-past-1e18",
            Scenario::DeletedBetweenRounds => "deleted-between-rounds",
            Scenario::CounterLost => "counter-lost",
            Scenario::RecordsExpire => "records-expire",
            Scenario::CutShort => "cut-short",
            Scenario::LeadersRestart => "leaders-restart",
            Scenario::Failover => "failover",
            Scenario::Labels => "labels",
            Scenario::Cluster => "cluster",
            Scenario::Evicting => "evicting",
        }
    }

    /// The scenario named `name` (`--scenario`'s value).
    pub fn parse(name: &str) -> Option<Scenario> {
        [
            Scenario::Mixed,
            Scenario::ShortTtl,
            Scenario::HeldExtension,
            Scenario::Flush,
            Scenario::SlowReply,
            Scenario::CounterRestart,
            Scenario::CounterOrder,
            Scenario::PassingFailure,
            Scenario::LineOrder,
            Scenario::ReaderToTheEnd,
            Scenario::Refusals,
            Scenario::NodeSetFirst,
            Scenario::ManyLocks,
            Scenario::RangeEnd,
            Scenario::UntrustedRead,
            Scenario::TermsPastTenToThe18,
            Scenario::DeletedBetweenRounds,
            Scenario::CounterLost,
            Scenario::RecordsExpire,
            Scenario::CutShort,
            Scenario::LeadersRestart,
            Scenario::Failover,
            Scenario::Labels,
            Scenario::Cluster,
            Scenario::Evicting,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    /// The virtual length a scripted run needs (the mix takes `Options::duration`).
    fn length(self) -> Option<Duration> {
        match self {
            Scenario::Mixed => None,
            Scenario::ShortTtl => Some(Duration::from_secs(9)),
            Scenario::HeldExtension => Some(Duration::from_secs(6)),
            Scenario::Flush => Some(Duration::from_secs(7)),
            Scenario::SlowReply => Some(Duration::from_secs(4)),
            Scenario::CounterRestart => Some(Duration::from_secs(4)),
            Scenario::CounterOrder => Some(Duration::from_secs(4)),
            Scenario::PassingFailure => Some(Duration::from_secs(5)),
            Scenario::LineOrder => Some(Duration::from_secs(4)),
            Scenario::ReaderToTheEnd => Some(Duration::from_secs(4)),
            Scenario::Refusals => Some(Duration::from_secs(3)),
            Scenario::NodeSetFirst => Some(Duration::from_secs(3)),
            Scenario::ManyLocks => Some(Duration::from_secs(4)),
            Scenario::RangeEnd => Some(Duration::from_secs(3)),
            Scenario::UntrustedRead => Some(Duration::from_secs(4)),
            Scenario::TermsPastTenToThe18 => Some(Duration::from_secs(5)),
            Scenario::DeletedBetweenRounds => Some(Duration::from_secs(3)),
            Scenario::CounterLost => Some(Duration::from_secs(3)),
            Scenario::RecordsExpire => Some(Duration::from_secs(6)),
            Scenario::CutShort => Some(Duration::from_secs(5)),
            Scenario::LeadersRestart => Some(Duration::from_secs(8)),
            Scenario::Failover => Some(Duration::from_secs(14)),
            Scenario::Labels => Some(Duration::from_secs(10)),
            Scenario::Cluster => Some(Duration::from_secs(12)),
            Scenario::Evicting => Some(Duration::from_secs(2)),
        }
    }

    /// How many nodes a scripted run needs, when not `Options::nodes`.
    fn nodes(self) -> Option<usize> {
        match self {
            Scenario::NodeSetFirst => Some(5),
            // Four Sentinel groups of a primary and two replicas (three for one node list, one
            // for a client of its own).
            Scenario::Failover => Some(12),
            // Four shards of a primary and a replica.
            Scenario::Cluster => Some(8),
            _ => None,
        }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            nodes: 3,
            clients: 3,
            duration: Duration::from_secs(6),
            faults: Faults::Claimed,
            verbose: false,
            ttl_roles: false,
            scenario: Scenario::Mixed,
        }
    }
}

/// What a grant was of: the family's primitives, each judged by its own rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A mutex (plain or fenced, one resource of a multi-resource lock, a waiter's lock).
    Mutex,
    /// A semaphore's permit (`PERMITS` permits).
    Permit,
    Read,
    Write,
    /// Leadership of the election; the token is the term.
    Leader,
}

/// The semaphore's permits.
const PERMITS: u32 = 2;

/// A grant as the client saw it, in virtual ms since the run began.
#[derive(Clone, Debug)]
struct Grant {
    client: usize,
    kind: Kind,
    /// Exclusion is claimed across restarts without persistence only with the quarantine on.
    quarantine: bool,
    resource: String,
    token: Option<u64>,
    /// When the attempt began.
    started: i64,
    granted: i64,
    valid_until: i64,
    /// When the holder stopped acting (released, lost, or its validity ran out first).
    ended: Option<i64>,
    /// The owner token its keys hold (a mutex's), for the coverage check.
    owner: Option<String>,
    /// The nodes whose grant the client counted.
    counted: Vec<usize>,
    /// An extended holder's lost signal: held while it has not fired.
    lost: Option<fencelock::LostSignal>,
    /// A fenced read lock's `last_writer_token()`: the token of the last writer it learned.
    last_writer: Option<u64>,
}

impl Grant {
    fn end(&self) -> i64 {
        self.ended.unwrap_or(self.valid_until).min(self.valid_until)
    }
}

/// A write a holder sent to the simulated fenced storage.
#[derive(Clone, Debug)]
struct Write {
    grant: usize,
    at: i64,
    token: u64,
    accepted: bool,
}

/// A campaign's outcome.
#[derive(Clone, Debug)]
struct Campaign {
    client: usize,
    value: String,
    /// When the campaign returned.
    ended: i64,
    /// The term won, or `None` for a failed campaign.
    term: Option<u64>,
    /// For a failed campaign: no node held its log entry when it returned (it was withdrawn
    /// everywhere, or never appended).
    gone_everywhere: bool,
    /// For a failed campaign: the nodes that kept its entry though no fault had touched them
    /// for `QUIET_MS` (the withdrawal reaches every node that answers, issue 35 item 4).
    left_on_quiet: Vec<usize>,
}

/// Everything a run's clients saw, for the checker.
#[derive(Default)]
struct History {
    grants: Vec<Grant>,
    writes: Vec<Write>,
    /// The fenced storage: per resource, the last token it accepted.
    storage: HashMap<String, u64>,
    campaigns: Vec<Campaign>,
    /// The observer's reports: (virtual ms, term, value).
    reports: Vec<(i64, u64, String)>,
    /// Violations the clients see as they happen (the lost signal's timing).
    seen: Vec<String>,
    /// The (grant, node) pairs already reported by the coverage check.
    uncovered: std::collections::HashSet<(usize, usize)>,
}

impl History {
    /// A write with `token` under grant `grant`: the storage takes it unless it accepted a
    /// larger token for the resource (equal tokens are the same holder writing again).
    fn write(&mut self, grant: usize, at: i64) {
        let g = &self.grants[grant];
        let Some(token) = g.token else { return };
        let last = self.storage.entry(g.resource.clone()).or_insert(0);
        let accepted = token >= *last;
        if accepted {
            *last = token;
        }
        self.writes.push(Write {
            grant,
            at,
            token,
            accepted,
        });
    }
}

#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub violations: Vec<String>,
    pub trace: Vec<String>,
    pub grants: usize,
    pub commands: u64,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// A client's last pause (virtual ms, from and until).
type Pause = Rc<Cell<(i64, i64)>>;

/// How a client is set up in a run.
#[derive(Clone, Debug)]
struct Setup {
    c: usize,
    ttl: u64,
    quarantine: bool,
    fencing: bool,
    /// The client's wall clock's offset (ms), moved by the faults.
    wall: Rc<Cell<i64>>,
    /// The client's last pause, set by the faults.
    paused: Pause,
    /// Plain locks only (`Options::ttl_roles`).
    plain_only: bool,
    /// Long gaps between operations (`Options::ttl_roles`' short-TTL client).
    quiet_gaps: bool,
}

/// Runs seed `seed` on this thread (a fresh current-thread runtime on tokio's paused clock).
pub fn run(seed: u64, opts: &Options) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let local = tokio::task::LocalSet::new();
    // The library's jitter and retry delays draw from fastrand's thread-local generator.
    fastrand::seed(seed);
    local.block_on(&rt, async move {
        let _clock = crate::clock::activate(EPOCH_MS);
        let _logs = crate::logs::capture();
        // Overlapping node lists (one run in four under faults): one more node, and the last
        // client is given the list shifted by one (it shares all but one node with the others).
        let overlap = opts.faults != Faults::None
            && opts.scenario == Scenario::Mixed
            && !opts.ttl_roles
            && opts.clients > 1
            && fastrand::Rng::with_seed(seed ^ 0x6f76_6572).u32(..4) == 0;
        let nodes = opts.scenario.nodes().unwrap_or(opts.nodes);
        let world = World::new(nodes + usize::from(overlap), seed, opts.verbose);
        let urls = world.urls();
        if overlap {
            world.log(format!(
                "client {}'s node list is nodes 1..={}, the others' 0..{}",
                opts.clients - 1,
                opts.nodes,
                opts.nodes
            ));
        }
        let (net, accept) = Net::new(world.clone());
        let _seam = fencelock::sim::install(Rc::new(net));
        let acceptor = tokio::task::spawn_local(accept);
        let history: Rc<RefCell<History>> = Rc::default();
        let end = opts.scenario.length().unwrap_or(opts.duration).as_millis() as i64;
        let mixed = opts.scenario == Scenario::Mixed;
        let all = matches!(opts.faults, Faults::All | Faults::Amnesia);
        let mut tasks = Vec::new();
        let mut walls = Vec::new();
        let mut pauses = Vec::new();
        let mut drift = fastrand::Rng::with_seed(seed ^ 0x0d71_f7c1_0c4d_0000);
        let clients = if mixed { opts.clients } else { 0 };
        for c in 0..clients {
            // Under every fault, clients with short and long TTLs side by side; under `All`,
            // node timeouts near a short TTL (issue 27 item 1) and the quarantine off for some
            // (issue 27 item 3: the amnesia guard alone), and wall clocks behind the counters
            // (the amnesia guard's derive path).
            let (ttl, timeout, quarantine, fencing, wall) = world.rng(|r| {
                let ttl = [1000, 2000, 4000][r.usize(..3)];
                let timeout = if all {
                    [50, 500, 980][r.usize(..3)]
                } else {
                    // 980 ms beside a 1 s TTL: an ahead margin (drift + 2 node timeouts) longer
                    // than the TTL, which README claims safe since issue 27 item 1.
                    [50, 100, 200, 980][r.usize(..4)]
                };
                let wall = if opts.faults == Faults::None || r.bool() {
                    0
                } else {
                    -[5, 300, 3000, 60_000][r.usize(..4)]
                };
                (ttl, timeout, !all || r.bool(), r.bool(), wall)
            });
            let (ttl, timeout, quarantine) = match (opts.ttl_roles, c) {
                (true, 0) => (4000, 50, true),
                (true, 1) => (1000, 980, true),
                _ => (ttl, timeout, quarantine),
            };
            let plain_only = opts.ttl_roles && c == 0;
            let list = if overlap && c == opts.clients - 1 {
                urls[1..].to_vec()
            } else {
                urls[..opts.nodes].to_vec()
            };
            // Each client authenticates as `c<client>`: the network tells its connections
            // apart by that (a pause stops them all).
            let list: Vec<String> = list
                .iter()
                .map(|u| as_client(u, c))
                .collect();
            let config = Config::new(list)
                .with_ttl(Duration::from_millis(ttl))
                .with_node_timeout(Duration::from_millis(timeout))
                .with_quarantine(quarantine)
                .with_fencing(fencing)
                .with_retry(
                    RetryPolicy::new()
                        .with_wait(Duration::from_millis(ttl * 2))
                        .with_base_delay(Duration::from_millis(20)),
                );
            world.log(format!(
                "client {c}: ttl {ttl}ms, node timeout {timeout}ms, fencing {}, quarantine {}, wall clock {wall}ms",
                if fencing { "on" } else { "off" },
                if quarantine { "on" } else { "off" }
            ));
            let client = match Client::new(config) {
                Ok(client) => client,
                Err(e) => {
                    world.log(format!("client {c}: refused configuration: {e}"));
                    continue;
                }
            };
            let setup = Setup {
                c,
                ttl,
                quarantine,
                fencing,
                wall: Rc::new(Cell::new(wall)),
                paused: Rc::new(Cell::new((i64::MAX, i64::MIN))),
                plain_only,
                quiet_gaps: opts.ttl_roles && c == 1,
            };
            walls.push(setup.wall.clone());
            pauses.push((c, setup.paused.clone()));
            // Each client's wall clock drifts (from a generator of its own, so that the draw
            // moves nothing else in the run): up to 0.5 %, as the nodes' clocks do.
            let ppm = drift.i64(-5000..=5000);
            world.log(format!("client {c}: wall clock drifts {ppm} ppm"));
            let body = client_loop(world.clone(), history.clone(), client, setup.clone(), end);
            tasks.push(tokio::task::spawn_local(
                crate::clock::WallOffset::new(setup.wall, body).with_drift(ppm),
            ));
        }
        tasks.push(tokio::task::spawn_local(coverage_loop(
            world.clone(),
            history.clone(),
            end,
        )));
        tasks.extend(scripted(
            opts.scenario,
            world.clone(),
            history.clone(),
            &urls[..nodes],
        ));
        // One observer of the election, on a client of its own.
        let observer = mixed
            .then(|| observe(world.clone(), history.clone(), urls[..opts.nodes].to_vec()))
            .flatten();
        if mixed && opts.faults != Faults::None {
            tasks.push(tokio::task::spawn_local(fault_loop(
                world.clone(),
                opts.faults,
                walls,
                pauses,
                end,
            )));
        }
        let mut broken = Vec::new();
        for t in tasks {
            if let Err(e) = t.await {
                broken.push(format!("the simulation itself failed (a bug of the harness): {e}"));
            }
        }
        // Let the observer catch up with the last leaders before it is judged.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        if let Some(o) = observer {
            o.abort();
        }
        acceptor.abort();
        let h = history.borrow();
        let mut violations = check(&h, &world, end);
        violations.extend(h.seen.iter().cloned());
        violations.extend(broken);
        let mut trace = world.trace.borrow().clone();
        for g in &h.grants {
            trace.push(format!(
                "grant: client {} {:?} {} token {:?} attempt {}ms granted {}ms valid until {}ms ended {:?}",
                g.client, g.kind, g.resource, g.token, g.started, g.granted, g.valid_until, g.ended
            ));
        }
        for w in &h.writes {
            trace.push(format!(
                "write: client {} {} token {} at {}ms {}",
                h.grants[w.grant].client,
                h.grants[w.grant].resource,
                w.token,
                w.at,
                if w.accepted { "accepted" } else { "refused" }
            ));
        }
        for c in &h.campaigns {
            trace.push(format!(
                "campaign: client {} {} returned {}ms term {:?}{}",
                c.client,
                c.value,
                c.ended,
                c.term,
                if c.term.is_none() && !c.gone_everywhere {
                    " (its entry still on some node)"
                } else {
                    ""
                }
            ));
        }
        for (at, term, value) in &h.reports {
            trace.push(format!("observer: {at}ms term {term} {value}"));
        }
        Outcome {
            seed,
            violations,
            trace,
            grants: h.grants.len(),
            commands: world.commands.get(),
        }
    })
}

fn virtual_ms(world: &World, at: StdInstant) -> i64 {
    let now_std = StdInstant::now();
    let now = world.elapsed_ms();
    if at >= now_std {
        now + at.duration_since(now_std).as_millis() as i64
    } else {
        now - now_std.duration_since(at).as_millis() as i64
    }
}

/// What a holder holds, kept to its end.
enum Held {
    Lock(fencelock::Lock),
    /// An extended lock, and the ones extended beside it (their grants).
    Guard(fencelock::LockGuard, Vec<(usize, fencelock::LockGuard)>),
    Leader(fencelock::Leadership),
}

impl Held {
    fn deadline(&self) -> StdInstant {
        match self {
            Held::Lock(l) => l.validity_deadline(),
            Held::Guard(g, _) => g.validity_deadline(),
            Held::Leader(l) => l.validity_deadline(),
        }
    }

    /// The lost signal (a plain lock has none: it is lost at its deadline).
    fn lost(&self) -> fencelock::LostSignal {
        match self {
            Held::Guard(g, _) => g.lost(),
            Held::Leader(l) => l.lost(),
            Held::Lock(_) => unreachable!("a plain lock has no lost signal"),
        }
    }
}

/// A mutex's owner token and the nodes (world indices) whose grant the client counted.
fn held_by(lock: &fencelock::Lock) -> (Option<String>, Vec<usize>) {
    let counted = lock
        .votes()
        .as_slice()
        .iter()
        .filter(|v| v.outcome.is_granted())
        .filter_map(|v| {
            let at = v.node.find("sim")? + 3;
            let digits: String = v.node[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .collect();
    (Some(lock.owner().to_string()), counted)
}

// Each argument is one fact about the grant, named at the call (a struct would only repeat them).
#[allow(clippy::too_many_arguments)]
fn record(
    world: &World,
    history: &RefCell<History>,
    s: &Setup,
    kind: Kind,
    resource: &str,
    (token, deadline): (Option<u64>, StdInstant),
    started: i64,
    (owner, counted): (Option<String>, Vec<usize>),
) -> usize {
    let granted = world.elapsed_ms();
    let valid_until = virtual_ms(world, deadline);
    world.log(format!(
        "client {}: granted {kind:?} {resource} token {token:?} valid until {valid_until}ms{}",
        s.c,
        if counted.is_empty() {
            String::new()
        } else {
            format!(" on nodes {counted:?}")
        }
    ));
    let mut h = history.borrow_mut();
    h.grants.push(Grant {
        client: s.c,
        kind,
        quarantine: s.quarantine,
        resource: resource.to_string(),
        token,
        started,
        granted,
        valid_until,
        ended: None,
        owner,
        counted,
        lost: None,
        last_writer: None,
    });
    h.grants.len() - 1
}

async fn client_loop(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    client: Client,
    s: Setup,
    end: i64,
) {
    let c = s.c;
    let ttl = s.ttl;
    let mut campaigns = 0;
    while world.elapsed_ms() < end {
        // Item 1's S goes quiet between its locks (up to 3 s): its announcements no longer
        // push the set's expiry on, the moment the old Lua let the set lapse.
        let pause = world.rng(|r| r.u64(0..if s.quiet_gaps { 3000 } else { 100 }));
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let resource = world.rng(|r| format!("r{}", r.usize(..2)));
        let op = world.rng(|r| r.u32(..100));
        let op = if s.plain_only { 70 + op % 30 } else { op };
        let started = world.elapsed_ms();
        // Each attempt: the grants it records (one per resource), and what it holds.
        let attempt: Result<(Vec<usize>, Held), fencelock::Error> = async {
            Ok(match op {
                // The waiting line.
                0..=14 => {
                    let lock = client.acquire(&resource).await?;
                    let g = record(
                        &world,
                        &history,
                        &s,
                        Kind::Mutex,
                        &resource,
                        (
                            lock.fencing_token().map(|t| t.value()),
                            lock.validity_deadline(),
                        ),
                        started,
                        held_by(&lock),
                    );
                    (vec![g], Held::Lock(lock))
                }
                // Both resources in one lock.
                15..=24 => {
                    let lock = client.try_acquire_many(&["r0", "r1"]).await?;
                    let gs = ["r0", "r1"]
                        .iter()
                        .map(|r| {
                            record(
                                &world,
                                &history,
                                &s,
                                Kind::Mutex,
                                r,
                                (
                                    lock.fencing_token().map(|t| t.value()),
                                    lock.validity_deadline(),
                                ),
                                started,
                                held_by(&lock),
                            )
                        })
                        .collect();
                    (gs, Held::Lock(lock))
                }
                // Auto-extension: held past the TTL, the lost signal watched.
                // Half the time a second resource too, extended beside the first: the
                // engine extends both in one batch (issue 27 item 2: the batch's pipeline).
                25..=39 => {
                    let mut names = vec![resource.clone()];
                    if world.rng(|r| r.bool()) {
                        names.push(if resource == "r0" { "r1" } else { "r0" }.to_string());
                    }
                    let mut locks = Vec::new();
                    for (k, name) in names.iter().enumerate() {
                        match client.try_acquire(name).await {
                            Ok(lock) => locks.push(lock),
                            Err(e) if k == 0 => return Err(e),
                            Err(_) => break,
                        }
                    }
                    // Every guard is watched from the moment it exists (no await from here on):
                    // a lock whose validity ran out while the next was taken is let go unheld.
                    let (locks, mut expired): (Vec<_>, Vec<_>) = locks
                        .into_iter()
                        .partition(|l| l.validity_deadline() > StdInstant::now());
                    if locks.is_empty() {
                        // Nothing held: nothing recorded, the lock released in turn.
                        return Ok((Vec::new(), Held::Lock(expired.remove(0))));
                    }
                    for lock in expired {
                        tokio::task::spawn_local(async move {
                            let _ = lock.release().await;
                        });
                    }
                    let mut gs = Vec::new();
                    let mut guards = Vec::new();
                    for lock in locks {
                        let who = held_by(&lock);
                        let name = lock.resource().to_string();
                        let guard = lock.auto_extend(AutoExtend::new());
                        let g = record(
                            &world,
                            &history,
                            &s,
                            Kind::Mutex,
                            &name,
                            (
                                guard.fencing_token().map(|t| t.value()),
                                guard.validity_deadline(),
                            ),
                            started,
                            who,
                        );
                        history.borrow_mut().grants[g].lost = Some(guard.lost());
                        gs.push(g);
                        guards.push(guard);
                    }
                    let first = guards.remove(0);
                    let extra = gs[1..].iter().copied().zip(guards).collect();
                    (gs, Held::Guard(first, extra))
                }
                40..=49 => {
                    let sem = client.semaphore("sem", PERMITS)?;
                    let lock = sem.try_acquire().await?;
                    let g = record(
                        &world,
                        &history,
                        &s,
                        Kind::Permit,
                        "sem",
                        (None, lock.validity_deadline()),
                        started,
                        (None, Vec::new()),
                    );
                    (vec![g], Held::Lock(lock))
                }
                50..=59 => {
                    let rw = client.rwlock("rw")?;
                    let (kind, lock) = if world.rng(|r| r.bool()) {
                        (Kind::Write, rw.try_write().await?)
                    } else {
                        (Kind::Read, rw.try_read().await?)
                    };
                    // A writer's token, and what a reader learned of the last writer's.
                    let token = match kind {
                        Kind::Write => lock.fencing_token().map(|t| t.value()),
                        _ => None,
                    };
                    let g = record(
                        &world,
                        &history,
                        &s,
                        kind,
                        "rw",
                        (token, lock.validity_deadline()),
                        started,
                        (None, Vec::new()),
                    );
                    if kind == Kind::Read {
                        history.borrow_mut().grants[g].last_writer = lock.last_writer_token();
                    }
                    (vec![g], Held::Lock(lock))
                }
                60..=69 if s.fencing => {
                    campaigns += 1;
                    let value = format!("c{c}#{campaigns}");
                    let election = client.election("e")?;
                    let won = election.campaign(&value).await;
                    let ended = world.elapsed_ms();
                    let term = won.as_ref().ok().map(|l| l.term());
                    let holding = if term.is_some() {
                        Vec::new()
                    } else {
                        world.holding_member("fencelock:leaders:e", &value)
                    };
                    let left_on_quiet = holding
                        .iter()
                        .copied()
                        .filter(|&i| world.quiet(i, QUIET_MS))
                        .collect();
                    history.borrow_mut().campaigns.push(Campaign {
                        client: c,
                        value: value.clone(),
                        ended,
                        term,
                        gone_everywhere: holding.is_empty(),
                        left_on_quiet,
                    });
                    let leader = won?;
                    let g = record(
                        &world,
                        &history,
                        &s,
                        Kind::Leader,
                        "election",
                        (Some(leader.term()), leader.validity_deadline()),
                        started,
                        (None, Vec::new()),
                    );
                    (vec![g], Held::Leader(leader))
                }
                _ => {
                    let lock = client.try_acquire(&resource).await?;
                    let g = record(
                        &world,
                        &history,
                        &s,
                        Kind::Mutex,
                        &resource,
                        (
                            lock.fencing_token().map(|t| t.value()),
                            lock.validity_deadline(),
                        ),
                        started,
                        held_by(&lock),
                    );
                    (vec![g], Held::Lock(lock))
                }
            })
        }
        .await;
        let (grants, held) = match attempt {
            Ok(x) => x,
            Err(e) => {
                if world.verbose {
                    world.log(format!("client {c}: op {op} on {resource} refused: {e}"));
                }
                continue;
            }
        };
        for &g in &grants {
            history.borrow_mut().write(g, world.elapsed_ms());
        }
        // Hold for a while; sometimes past the validity (a paused or slow holder); extended
        // holds up to three TTLs, watching the lost signal.
        // A pause of the whole client (`fault_loop`) that begins while it holds: the holder
        // acts again only when the pause ends, and then writes with the token it has.
        let hold_began = world.elapsed_ms();
        let pause_ends = || {
            let (_, until) = s.paused.get();
            let now = world.elapsed_ms();
            tokio::time::sleep(Duration::from_millis(
                until.saturating_sub(now).max(0) as u64
            ))
        };
        let paused_in_hold = || {
            let (from, until) = s.paused.get();
            from <= world.elapsed_ms() && until > hold_began
        };
        let (valid_until, stopped) = match &held {
            Held::Lock(lock) => {
                let hold = world.rng(|r| r.u64(0..ttl * 5 / 4));
                tokio::time::sleep(Duration::from_millis(hold)).await;
                pause_ends().await;
                (
                    virtual_ms(&world, lock.validity_deadline()),
                    world.elapsed_ms(),
                )
            }
            Held::Guard(..) | Held::Leader(_) => {
                let hold = world.rng(|r| r.u64(0..ttl * 3));
                let lost = held.lost();
                let fired = tokio::select! {
                    biased;
                    () = lost.fired() => true,
                    () = tokio::time::sleep(Duration::from_millis(hold)) => false,
                };
                pause_ends().await;
                let deadline = held.deadline();
                let (at, dl) = (world.elapsed_ms(), virtual_ms(&world, deadline));
                if paused_in_hold() {
                    // A stopped process acts on nothing in time: its writes are fencing's to
                    // refuse (the stale-write check), not the lost signal's.
                    world.log(format!(
                        "client {c}: resumed at {at}ms holding a lock valid until {dl}ms (lost signal fired: {})",
                        lost.is_fired()
                    ));
                } else if StdInstant::now() > deadline {
                    let what = history.borrow().grants[grants[0]].resource.clone();
                    let verdict = late_signal(c, &what, fired, at, dl);
                    history.borrow_mut().seen.push(verdict);
                }
                if fired {
                    world.log(format!(
                        "client {c}: lost signal at {at}ms (deadline {dl}ms)"
                    ));
                }
                (dl, at)
            }
        };
        {
            let mut h = history.borrow_mut();
            for &g in &grants {
                // The validity the holder last knew (an extension moves it), and when it stopped.
                h.grants[g].valid_until = valid_until;
                h.grants[g].ended = Some(stopped.min(valid_until));
            }
            // Locks extended beside the first have validities of their own.
            if let Held::Guard(_, extra) = &held {
                for (g, guard) in extra {
                    let dl = virtual_ms(&world, guard.validity_deadline());
                    h.grants[*g].valid_until = dl;
                    h.grants[*g].ended = Some(stopped.min(dl));
                }
            }
            // The holder writes once more as it stops, late or not: the storage must refuse
            // it if a successor wrote since.
            for &g in &grants {
                h.write(g, stopped);
            }
        }
        match held {
            Held::Lock(lock) => {
                let _ = lock.release().await;
            }
            Held::Guard(guard, extra) => {
                let _ = guard.release().await;
                for (_, g) in extra {
                    let _ = g.release().await;
                }
            }
            Held::Leader(leader) => {
                let _ = leader.resign().await;
            }
        }
    }
    client.close().await;
}

/// A client of a scripted run: node list `urls`, quarantine on, fencing off.
fn scripted_client(
    world: &World,
    urls: &[String],
    c: usize,
    ttl: u64,
    timeout: u64,
) -> Option<(Client, Setup)> {
    scripted_client_with(world, urls, c, (ttl, timeout), true, 0)
}

/// `url` with the user name client `c` authenticates as (`c<client>`: the network tells its
/// connections apart by it), whatever the scheme.
fn as_client(url: &str, c: usize) -> String {
    url.replacen("://", &format!("://c{c}:sim@"), 1)
}

/// The client of a scripted run for `config`, and its setup; `None` (logged) when the
/// configuration is refused.
fn open_client(
    world: &World,
    c: usize,
    config: Config,
    (ttl, quarantine, fencing, wall): (u64, bool, bool, i64),
) -> Option<(Client, Setup)> {
    let client = match Client::new(config) {
        Ok(client) => client,
        Err(e) => {
            world.log(format!("client {c}: refused configuration: {e}"));
            return None;
        }
    };
    let setup = Setup {
        c,
        ttl,
        quarantine,
        fencing,
        wall: Rc::new(Cell::new(wall)),
        paused: Rc::new(Cell::new((i64::MAX, i64::MIN))),
        plain_only: true,
        quiet_gaps: false,
    };
    Some((client, setup))
}

/// A client of a scripted run; fenced (quarantine off) when `quarantine` is false, its wall
/// clock `wall` ms off the run's.
fn scripted_client_with(
    world: &World,
    urls: &[String],
    c: usize,
    (ttl, timeout): (u64, u64),
    quarantine: bool,
    wall: i64,
) -> Option<(Client, Setup)> {
    let fencing = !quarantine;
    let list: Vec<String> = urls.iter().map(|u| as_client(u, c)).collect();
    let config = Config::new(list)
        .with_ttl(Duration::from_millis(ttl))
        .with_node_timeout(Duration::from_millis(timeout))
        .with_quarantine(quarantine)
        .with_fencing(fencing);
    world.log(format!(
        "client {c}: ttl {ttl}ms, node timeout {timeout}ms, fencing {}, quarantine {}, wall clock {wall}ms",
        if fencing { "on" } else { "off" },
        if quarantine { "on" } else { "off" }
    ));
    open_client(world, c, config, (ttl, quarantine, fencing, wall))
}

/// Sleeps until virtual ms `at` of the run.
async fn until(world: &World, at: i64) {
    let left = at - world.elapsed_ms();
    if left > 0 {
        tokio::time::sleep(Duration::from_millis(left as u64)).await;
    }
}

/// Takes `resource` once (a plain lock) and records the grant; `None` when refused.
async fn take(
    world: &World,
    history: &RefCell<History>,
    client: &Client,
    s: &Setup,
    resource: &str,
) -> Option<(usize, fencelock::Lock)> {
    match take_or_error(world, history, client, s, resource).await {
        Ok(taken) => Some(taken),
        Err(e) => {
            if world.verbose {
                world.log(format!("client {}: {resource} refused: {e}", s.c));
            }
            None
        }
    }
}

/// As [`take`], with the error of a refusal.
async fn take_or_error(
    world: &World,
    history: &RefCell<History>,
    client: &Client,
    s: &Setup,
    resource: &str,
) -> fencelock::Result<(usize, fencelock::Lock)> {
    let started = world.elapsed_ms();
    let lock = client.try_acquire(resource).await?;
    let g = record(
        world,
        history,
        s,
        Kind::Mutex,
        resource,
        (
            lock.fencing_token().map(|t| t.value()),
            lock.validity_deadline(),
        ),
        started,
        held_by(&lock),
    );
    Ok((g, lock))
}

/// Ends grant `g` now (or at its validity, if that came first) and releases its lock.
async fn give_back(world: &World, history: &RefCell<History>, g: usize, lock: fencelock::Lock) {
    {
        let mut h = history.borrow_mut();
        let now = world.elapsed_ms();
        let valid_until = h.grants[g].valid_until;
        h.grants[g].ended = Some(now.min(valid_until));
    }
    let _ = lock.release().await;
}

/// The tasks of scenario `scenario` (none for the mix).
fn scripted(
    scenario: Scenario,
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Vec<tokio::task::JoinHandle<()>> {
    match scenario {
        Scenario::Mixed => Vec::new(),
        Scenario::ShortTtl => short_ttl(world, history, urls),
        Scenario::HeldExtension => held_extension(world, history, urls),
        Scenario::Flush => flush(world, history, urls),
        Scenario::SlowReply => slow_reply(world, history, urls),
        Scenario::CounterRestart => counter_restart(world, history, urls),
        Scenario::CounterOrder => counter_order(world, history, urls),
        Scenario::PassingFailure => passing_failure(world, history, urls),
        Scenario::LineOrder => line_order(world, history, urls),
        Scenario::ReaderToTheEnd => edges::reader_to_the_end(world, history, urls),
        Scenario::Refusals => edges::refusals(world, history, urls),
        Scenario::NodeSetFirst => edges::node_set_first(world, history, urls),
        Scenario::ManyLocks => edges::many_locks(world, history, urls),
        Scenario::RangeEnd => edges::range_end(world, history, urls),
        Scenario::UntrustedRead => edges::untrusted_read(world, history, urls),
        Scenario::TermsPastTenToThe18 => edges::terms_past_ten_to_the_18(world, history, urls),
        Scenario::DeletedBetweenRounds => edges::deleted_between_rounds(world, history, urls),
        Scenario::CounterLost => remains::counter_lost(world, history, urls),
        Scenario::RecordsExpire => remains::records_expire(world, history, urls),
        Scenario::CutShort => remains::cut_short(world, history, urls),
        Scenario::LeadersRestart => leaders::leaders_restart(world, history, urls),
        Scenario::Failover => failover::failover(world, history),
        Scenario::Labels => labels::labels(world, history, urls),
        Scenario::Cluster => cluster::cluster(world, history),
        Scenario::Evicting => edges::evicting(world, history, urls),
    }
}

/// What a holder's lost signal did wrong, seen when the validity deadline has passed: it fired
/// late, or it never fired.
fn late_signal(c: usize, what: &str, fired: bool, at: i64, dl: i64) -> String {
    if fired {
        format!("client {c}: the lost signal of {what} fired at {at}ms, after the validity deadline {dl}ms")
    } else {
        format!("client {c}: the validity deadline of {what} ({dl}ms) passed at {at}ms without the lost signal")
    }
}

/// Holds the auto-extended grant `g` for `ms` or until its lost signal fires; a signal late or
/// missing is a violation; the grant then ends with the validity the holder last knew. Whether
/// the signal fired.
async fn hold_watching(
    world: &World,
    history: &RefCell<History>,
    g: usize,
    guard: &fencelock::LockGuard,
    ms: u64,
) -> bool {
    let lost = guard.lost();
    let fired = tokio::select! {
        biased;
        () = lost.fired() => true,
        () = tokio::time::sleep(Duration::from_millis(ms)) => false,
    };
    let at = world.elapsed_ms();
    let dl = virtual_ms(world, guard.validity_deadline());
    let mut h = history.borrow_mut();
    if StdInstant::now() > guard.validity_deadline() {
        let verdict = late_signal(h.grants[g].client, &h.grants[g].resource, fired, at, dl);
        h.seen.push(verdict);
    }
    h.grants[g].valid_until = dl;
    h.grants[g].ended = Some(at.min(dl));
    fired
}

/// Records a violation a scenario saw itself (not the checker): in the trace and the verdict.
fn violation(world: &World, history: &RefCell<History>, what: String) {
    world.log(what.clone());
    history.borrow_mut().seen.push(what);
}

/// Waits until `cell` is set (another task of the scenario sets it).
async fn set_by(cell: &Cell<i64>) -> i64 {
    while cell.get() == i64::MAX {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cell.get()
}

/// Takes `resource` once and releases it at once, if granted (a client's first request, which
/// opens its connections and leaves its announcement).
async fn take_once(
    world: &World,
    history: &RefCell<History>,
    client: &Client,
    s: &Setup,
    resource: &str,
) -> Option<usize> {
    let (g, lock) = take(world, history, client, s, resource).await?;
    give_back(world, history, g, lock).await;
    Some(g)
}

/// Issue 27 item 1 (see `Scenario::ShortTtl`). With L's TTL `T` = 4 s announced at `ta` (its
/// entry until `ta + 2T`), a later plain grant of L at `tg` stops at the mark while the mark has
/// more than `T` + L's margin left: `tg` up to `ta + 3.9 s`. S's announcement (margin 1,971 ms)
/// finds L's entry short of its need once `ta + 2T - now < 2,971 ms`: after `ta + 5,029 ms`.
/// A record that then expired with S's own entry (`now + 2 s`) would lapse before L's key
/// (`tg + T`) when S comes before `tg + 2 s`. Each time is drawn inside its window.
fn short_ttl(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Vec<tokio::task::JoinHandle<()>> {
    let (Some(l), Some(s), Some(c)) = (
        scripted_client(&world, urls, 0, 4000, 50),
        scripted_client(&world, urls, 1, 1000, 980),
        scripted_client(&world, urls, 2, 1000, 50),
    ) else {
        return Vec::new();
    };
    // Times (virtual ms) the roles hand each other: L's announcement and its second grant.
    let announced = Rc::new(Cell::new(i64::MAX));
    let granted = Rc::new(Cell::new(i64::MAX));
    // When S's entry (and, on the old Lua, the whole record) ends: S's grant + 2 s.
    let lapse = Rc::new(Cell::new(i64::MAX));
    let mut tasks = Vec::new();
    {
        let (world, history) = (world.clone(), history.clone());
        let (announced, granted) = (announced.clone(), granted.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let (client, setup) = l;
            until(&world, world.rng(|r| r.i64(0..100))).await;
            // L's first lock announces its TTL; released at once.
            let Some((g, lock)) = take(&world, &history, &client, &setup, "r0").await else {
                world.log("client 0: the first lock was refused; the scenario is void");
                return;
            };
            let ta = history.borrow().grants[g].started;
            announced.set(ta);
            give_back(&world, &history, g, lock).await;
            let tg = ta + world.rng(|r| r.i64(3100..3800));
            // A stranger holds node 2 for a second: L is granted on nodes 0 and 1 alone.
            until(&world, tg - 5).await;
            world.stranger(2, "r0", 1000);
            until(&world, tg).await;
            granted.set(world.elapsed_ms());
            let Some((g, lock)) = take(&world, &history, &client, &setup, "r0").await else {
                world.log("client 0: the second lock was refused; the scenario is void");
                return;
            };
            // Held to its validity, not extended (an extension would announce again).
            let left = history.borrow().grants[g].valid_until - world.elapsed_ms();
            tokio::time::sleep(Duration::from_millis(left.max(0) as u64)).await;
            give_back(&world, &history, g, lock).await;
            client.close().await;
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        let (announced, granted) = (announced.clone(), granted.clone());
        let lapse = lapse.clone();
        tasks.push(tokio::task::spawn_local(async move {
            let (client, setup) = s;
            let (tg, ta) = (set_by(&granted).await, announced.get());
            // Node 1 restarts empty while L holds it.
            until(&world, tg + world.rng(|r| r.i64(100..1000))).await;
            world.restart(1, Persistence::None);
            // S's first request (no earlier one: its announcement, remembered, would cover it).
            let t1 = world.rng(|r| r.i64(ta + 5100..(tg + 1700).max(ta + 5101)));
            until(&world, t1).await;
            if let Some((g, lock)) = take(&world, &history, &client, &setup, "r9").await {
                // Its announcement ran just before the grant: its entry ends by then + 2 s.
                lapse.set(history.borrow().grants[g].granted + 2000);
                give_back(&world, &history, g, lock).await;
            }
            // S is quiet from here on: its announcements no longer carry the record.
            client.close().await;
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let (client, setup) = c;
            // C connects early (an unrelated lock, before node 1 restarts) and then stays
            // away: the first client to meet node 1 restarted is S, whose marker dates its
            // quarantine; C judges node 1 only after S's record would have lapsed.
            until(&world, world.rng(|r| r.i64(150..300))).await;
            take_once(&world, &history, &client, &setup, "r8").await;
            let tg = set_by(&granted).await;
            until(&world, set_by(&lapse).await + 2).await;
            while world.elapsed_ms() < tg + 4500 {
                if let Some((g, lock)) = take(&world, &history, &client, &setup, "r0").await {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    give_back(&world, &history, g, lock).await;
                }
                tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(5..30)))).await;
            }
            client.close().await;
        }));
    }
    tasks
}

/// Issue 27 item 2 (see `Scenario::HeldExtension`).
fn held_extension(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Vec<tokio::task::JoinHandle<()>> {
    // A node timeout of 200 ms: node 0's late replies time out, its commands still run there.
    let Some((client, setup)) = scripted_client(&world, urls, 0, 1000, 200) else {
        return Vec::new();
    };
    let end = Scenario::HeldExtension
        .length()
        .map_or(0, |d| d.as_millis() as i64);
    vec![tokio::task::spawn_local(async move {
        until(&world, world.rng(|r| r.i64(0..200))).await;
        // Node 0 replies late from a moment on, each command by itself (a pipeline's second
        // command waits its own delay after the first ran); nodes 1 and 2 keep the quorum.
        let Some((g, lock)) = take(&world, &history, &client, &setup, "r0").await else {
            world.log("client 0: the lock was refused; the scenario is void");
            return;
        };
        let hi = world.rng(|r| r.u64(300..600));
        world.nodes[0].borrow_mut().delay_ms = (0, hi);
        world.log(format!("fault: node 0 replies late, up to {hi}ms"));
        let guard = lock.auto_extend(AutoExtend::new());
        history.borrow_mut().grants[g].lost = Some(guard.lost());
        // Later, node 0 is cut off from everyone: the last extension that reached it is the
        // last write there, and its key must not outlive the record it left (the lock goes on
        // on nodes 1 and 2).
        // The cut comes at a random moment, or earlier, the moment node 0 holds the key
        // longer than any entry of its record lives (the state item 2 left behind an
        // extension; the code that announces in the extension's own script never reaches it).
        let cut_at = world.rng(|r| r.i64(1500..3500));
        {
            let (world, history) = (world.clone(), history.clone());
            tokio::task::spawn_local(async move {
                until(&world, 1000).await;
                loop {
                    let (key, record) = world.key_and_record_left(0, "r0");
                    if key > 0 && !history.borrow().grants[g].counted.contains(&0) {
                        // Node 0 extended the lock: the holder counts it from then on (the
                        // grant itself may have been counted on nodes 1 and 2 alone).
                        history.borrow_mut().grants[g].counted.push(0);
                    }
                    if key > record || world.elapsed_ms() >= cut_at {
                        world.nodes[0].borrow_mut().partitioned = true;
                        world.log(format!(
                            "fault: node 0 partitioned until the hold ends (r0 lives {key}ms more there, its record {record}ms)"
                        ));
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
        }
        let hold = end - 800 - world.elapsed_ms();
        hold_watching(&world, &history, g, &guard, hold.max(0) as u64).await;
        world.nodes[0].borrow_mut().delay_ms = (0, 2);
        world.nodes[0].borrow_mut().partitioned = false;
        world.trouble(0);
        let _ = guard.release().await;
        client.close().await;
    })]
}

/// Issue 27 item 4 (see `Scenario::Flush`).
fn flush(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Vec<tokio::task::JoinHandle<()>> {
    let (Some(a), Some(b), Some(n)) = (
        scripted_client(&world, urls, 0, 4000, 50),
        scripted_client(&world, urls, 1, 1000, 50),
        scripted_client(&world, urls, 2, 1000, 50),
    ) else {
        return Vec::new();
    };
    // Nodes up for an hour, as production nodes are: a flushed node's uptime says nothing of
    // its data.
    for node in &world.nodes {
        node.borrow_mut().node.age(3_600_000);
    }
    // When A's lock ends (virtual ms), once it is held, and when the flush came.
    let ends = Rc::new(Cell::new(i64::MAX));
    let flushed = Rc::new(Cell::new(i64::MAX));
    let mut tasks = Vec::new();
    {
        let (world, history, ends) = (world.clone(), history.clone(), ends.clone());
        let flushed = flushed.clone();
        tasks.push(tokio::task::spawn_local(async move {
            let (client, setup) = a;
            until(&world, world.rng(|r| r.i64(100..300))).await;
            let Some((g, lock)) = take(&world, &history, &client, &setup, "r0").await else {
                world.log("client 0: the lock was refused; the scenario is void");
                return;
            };
            // The flush of two nodes, while A holds.
            let at = world.elapsed_ms() + world.rng(|r| r.i64(100..1500));
            let spared = world.rng(|r| r.usize(..3));
            {
                let world = world.clone();
                tokio::task::spawn_local(async move {
                    until(&world, at).await;
                    for j in (0..3).filter(|&j| j != spared) {
                        let now = world.node_now(j);
                        world.lost_data.set(true);
                        world.losses.borrow_mut().push(world.elapsed_ms());
                        world.trouble(j);
                        world.nodes[j]
                            .borrow_mut()
                            .node
                            .exec(now, &[b"FLUSHALL".to_vec()]);
                        world.log(format!("fault: node {j} FLUSHALL"));
                    }
                    flushed.set(at);
                });
            }
            if world.rng(|r| r.bool()) {
                // Held plainly to its validity.
                let until_ms = history.borrow().grants[g].valid_until;
                ends.set(until_ms);
                until(&world, until_ms).await;
                give_back(&world, &history, g, lock).await;
            } else {
                // Auto-extended: the flush takes its keys from two nodes, so its extensions
                // fail there and its lost signal must fire before its validity ends.
                let guard = lock.auto_extend(AutoExtend::new());
                history.borrow_mut().grants[g].lost = Some(guard.lost());
                ends.set(world.elapsed_ms() + 4000);
                hold_watching(&world, &history, g, &guard, 4000).await;
                let _ = guard.release().await;
            }
            client.close().await;
        }));
    }
    {
        // N's first request comes after the flush: it meets the flushed nodes without their
        // markers, never having seen them before.
        let (world, history, ends) = (world.clone(), history.clone(), ends.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let (client, setup) = n;
            let at = set_by(&flushed).await;
            set_by(&ends).await;
            until(&world, at + world.rng(|r| r.i64(0..500))).await;
            while world.elapsed_ms() < ends.get().saturating_add(300).min(6500) {
                if let Some((g, lock)) = take(&world, &history, &client, &setup, "r0").await {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    give_back(&world, &history, g, lock).await;
                }
                tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(10..60)))).await;
            }
            client.close().await;
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let (client, setup) = b;
            // B connects before the flush (its connections stay open through it).
            until(&world, world.rng(|r| r.i64(20..80))).await;
            take_once(&world, &history, &client, &setup, "r8").await;
            set_by(&ends).await;
            while world.elapsed_ms() < ends.get().saturating_add(300).min(6500) {
                if let Some((g, lock)) = take(&world, &history, &client, &setup, "r0").await {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    give_back(&world, &history, g, lock).await;
                }
                tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(10..60)))).await;
            }
            client.close().await;
        }));
    }
    tasks
}

/// The validity counted from before the request (see `Scenario::SlowReply`).
fn slow_reply(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Vec<tokio::task::JoinHandle<()>> {
    let (Some(a), Some(b)) = (
        scripted_client(&world, urls, 0, 1000, 980),
        scripted_client(&world, urls, 1, 1000, 50),
    ) else {
        return Vec::new();
    };
    // When A's keys were set (virtual ms, just before A's attempt).
    let sent = Rc::new(Cell::new(i64::MAX));
    let mut tasks = Vec::new();
    {
        let (world, history, sent) = (world.clone(), history.clone(), sent.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let (client, setup) = a;
            // Connected first (a plain lock of another resource), so that the slow replies
            // below meet the lock itself.
            until(&world, world.rng(|r| r.i64(0..100))).await;
            take_once(&world, &history, &client, &setup, "r8").await;
            until(&world, 1000 + world.rng(|r| r.i64(0..200))).await;
            let back = world.rng(|r| r.u64(150..400));
            for j in 0..3 {
                world.nodes[j].borrow_mut().reply_delay_ms = back;
            }
            world.log(format!(
                "fault: every node's replies come back {back}ms late"
            ));
            sent.set(world.elapsed_ms());
            let taken = take(&world, &history, &client, &setup, "r0").await;
            for j in 0..3 {
                world.nodes[j].borrow_mut().reply_delay_ms = 0;
            }
            let Some((g, lock)) = taken else {
                world.log("client 0: the lock was refused; the scenario is void");
                return;
            };
            // Held to the validity it was told.
            let until_ms = history.borrow().grants[g].valid_until;
            until(&world, until_ms).await;
            give_back(&world, &history, g, lock).await;
            client.close().await;
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let (client, setup) = b;
            until(&world, world.rng(|r| r.i64(0..100))).await;
            take_once(&world, &history, &client, &setup, "r9").await;
            set_by(&sent).await;
            // From just before A's keys expire (set right after A's attempt began).
            until(&world, sent.get() + 900).await;
            while world.elapsed_ms() < sent.get() + 1800 {
                if let Some((g, lock)) = take(&world, &history, &client, &setup, "r0").await {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    give_back(&world, &history, g, lock).await;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(5..20)))).await;
            }
            client.close().await;
        }));
    }
    tasks
}

/// Issue 27 item 3 (see `Scenario::CounterRestart`). Wall clocks set the proposals: G's is the
/// run's, A's ahead by 500 ms (its proposal above G's), B's a minute behind (its proposal below
/// every counter: its token is derived from the counters it reads).
fn counter_restart(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Vec<tokio::task::JoinHandle<()>> {
    // Half the seeds: G's clock 3 s behind the counters, so that its token on Z is derived from
    // the reads (the two-round path, which seeds node 1 once issued) instead of proposed.
    let g_wall = if world.rng(|r| r.bool()) { -3000 } else { 0 };
    let (Some(a), Some(g), Some(b)) = (
        scripted_client_with(&world, urls, 0, (2000, 980), false, 500),
        scripted_client_with(&world, urls, 1, (2000, 980), false, g_wall),
        scripted_client_with(&world, urls, 2, (2000, 980), false, -60_000),
    ) else {
        return Vec::new();
    };
    let t0 = 1000 + world.rng(|r| r.i64(0..200));
    let in_flight = world.rng(|r| r.u64(300..600));
    let restart_at = t0 + world.rng(|r| r.i64(20..80));
    let g_at = restart_at + world.rng(|r| r.i64(20..(in_flight as i64 - 150)));
    let b_at = t0 + in_flight as i64 + world.rng(|r| r.i64(400..900));
    let mut tasks = Vec::new();
    {
        let (world, history) = (world.clone(), history.clone());
        let (client, setup) = a;
        let wall = setup.wall.clone();
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            wall,
            async move {
                // A connects early (a lock of another resource, released).
                until(&world, world.rng(|r| r.i64(0..100))).await;
                take_once(&world, &history, &client, &setup, "r8").await;
                // A stale key of X on node 0 (refuses A there), and A's request to node 2 in flight.
                until(&world, t0 - 5).await;
                world.stranger(0, "X", 200);
                world.client_delay.borrow_mut().insert((2, 0), in_flight);
                until(&world, t0).await;
                let taken = take(&world, &history, &client, &setup, "X").await;
                world.client_delay.borrow_mut().remove(&(2, 0));
                if let Some((g, lock)) = taken {
                    give_back(&world, &history, g, lock).await;
                }
                client.close().await;
            },
        )));
    }
    {
        let world2 = world.clone();
        tasks.push(tokio::task::spawn_local(async move {
            until(&world2, restart_at).await;
            world2.restart(1, Persistence::None);
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        let (client, setup) = g;
        let wall = setup.wall.clone();
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            wall,
            async move {
                // G's first lock sets every counter (C); its next, on Z, is issued just above.
                until(&world, world.rng(|r| r.i64(0..100))).await;
                take_once(&world, &history, &client, &setup, "r9").await;
                // Its connection to node 1 broke with the restart: a first request finds that out
                // (it fails there), the next one connects anew.
                until(&world, restart_at + 5).await;
                take_once(&world, &history, &client, &setup, "r5").await;
                until(&world, g_at).await;
                if let Some((g, lock)) = take(&world, &history, &client, &setup, "Z").await {
                    give_back(&world, &history, g, lock).await;
                }
                client.close().await;
            },
        )));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        let (client, setup) = b;
        let wall = setup.wall.clone();
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            wall,
            async move {
                until(&world, world.rng(|r| r.i64(0..100))).await;
                take_once(&world, &history, &client, &setup, "r7").await;
                until(&world, restart_at + 5).await;
                take_once(&world, &history, &client, &setup, "r4").await;
                // After A has ended: node 2 slow for B, so its quorum is nodes 0 and 1.
                until(&world, b_at).await;
                world.client_delay.borrow_mut().insert((2, 2), 600);
                let taken = take(&world, &history, &client, &setup, "X").await;
                world.client_delay.borrow_mut().remove(&(2, 2));
                if let Some((g, lock)) = taken {
                    give_back(&world, &history, g, lock).await;
                }
                client.close().await;
            },
        )));
    }
    tasks
}

/// The one-round path's rule and the write-back (see `Scenario::CounterOrder`). Wall clocks set
/// the proposals: A's 500 ms ahead of the run's, B's 2 s behind (its proposal at X lies between
/// node 0's counter and A's token), D's a minute behind (below every counter).
fn counter_order(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Vec<tokio::task::JoinHandle<()>> {
    let (Some(a), Some(b), Some(d)) = (
        scripted_client_with(&world, urls, 0, (2000, 980), false, 500),
        scripted_client_with(&world, urls, 1, (2000, 980), false, -2000),
        scripted_client_with(&world, urls, 2, (2000, 980), false, -60_000),
    ) else {
        return Vec::new();
    };
    let t1 = world.rng(|r| r.i64(50..200));
    let t2 = t1 + world.rng(|r| r.i64(200..400));
    let t3 = t2 + world.rng(|r| r.i64(1400..1600));
    let t4 = t3 + world.rng(|r| r.i64(200..400));
    let t5 = t4 + world.rng(|r| r.i64(300..500));
    // Half the seeds: node 1 refuses writes (out of memory) after B's grant there and before
    // its write-back, so B's derived token reaches one node only and must not be issued; A's
    // last token + 1 is then free again.
    let oom = world.rng(|r| r.bool());
    let mut tasks = Vec::new();
    {
        // Node 0 hears nothing from t2 until A's request there has timed out.
        let world = world.clone();
        tasks.push(tokio::task::spawn_local(async move {
            until(&world, t2 - 5).await;
            world.trouble(0);
            world.nodes[0].borrow_mut().partitioned = true;
            world.log("fault: node 0 partitioned");
            until(&world, t2 + 1200).await;
            world.nodes[0].borrow_mut().partitioned = false;
            world.log("fault: node 0 heals");
            // Nodes 0 and 1 lose their counters (quarantine off: they grant at once).
            until(&world, t5).await;
            world.restart(0, Persistence::None);
            world.restart(1, Persistence::None);
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        let (client, setup) = a;
        let wall = setup.wall.clone();
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            wall.clone(),
            async move {
                until(&world, t2).await;
                if let Some((g, lock)) = take(&world, &history, &client, &setup, "X").await {
                    give_back(&world, &history, g, lock).await;
                }
                // Its clock a minute behind: the proposal is its last token + 1.
                until(&world, t4).await;
                wall.set(-60_000);
                // The offset is read when the task is polled: the next poll runs with it.
                tokio::task::yield_now().await;
                if let Some((g, lock)) = take(&world, &history, &client, &setup, "X").await {
                    give_back(&world, &history, g, lock).await;
                }
                client.close().await;
            },
        )));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        let (client, setup) = b;
        let wall = setup.wall.clone();
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            wall,
            async move {
                until(&world, t1).await;
                take_once(&world, &history, &client, &setup, "X").await;
                until(&world, t3).await;
                // Its quorum is nodes 0 and 1: node 2's reply comes after both.
                {
                    let mut delays = world.client_delay.borrow_mut();
                    delays.insert((2, 1), 600);
                    if oom {
                        delays.insert((1, 1), 50);
                    }
                }
                if oom {
                    let world = world.clone();
                    tokio::task::spawn_local(async move {
                        until(&world, t3 + 75).await;
                        world.set_oom(1, true);
                        world.log("fault: node 1 out of memory");
                        until(&world, t3 + 150).await;
                        world.set_oom(1, false);
                        world.log("fault: node 1 takes writes again");
                    });
                }
                take_once(&world, &history, &client, &setup, "X").await;
                world.client_delay.borrow_mut().retain(|&(_, c), _| c != 1);
                client.close().await;
            },
        )));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        let (client, setup) = d;
        let wall = setup.wall.clone();
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            wall,
            async move {
                until(&world, t5 + world.rng(|r| r.i64(50..150))).await;
                take_once(&world, &history, &client, &setup, "X").await;
                client.close().await;
            },
        )));
    }
    tasks
}

/// A held lock's liveness (see `Scenario::PassingFailure`).
fn passing_failure(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Vec<tokio::task::JoinHandle<()>> {
    let Some((client, setup)) = scripted_client(&world, urls, 0, 1000, 100) else {
        return Vec::new();
    };
    let end = Scenario::PassingFailure
        .length()
        .map_or(0, |d| d.as_millis() as i64);
    vec![tokio::task::spawn_local(async move {
        until(&world, world.rng(|r| r.i64(0..200))).await;
        let Some((g, lock)) = take(&world, &history, &client, &setup, "r0").await else {
            world.log("client 0: the lock was refused; the scenario is void");
            return;
        };
        let guard = lock.auto_extend(AutoExtend::new());
        history.borrow_mut().grants[g].lost = Some(guard.lost());
        let hang = world.rng(|r| r.bool());
        let fault_at = world.elapsed_ms() + world.rng(|r| r.i64(800..1500));
        let broken_at = fault_at + world.rng(|r| r.i64(0..150));
        {
            let world = world.clone();
            tokio::task::spawn_local(async move {
                until(&world, fault_at).await;
                if hang {
                    world.trouble(0);
                    world.nodes[0].borrow_mut().partitioned = true;
                    world.log("fault: node 0 hangs");
                    until(&world, broken_at).await;
                    world.cut(1);
                    world.log("fault: node 1 connections cut");
                    until(&world, fault_at + 1500).await;
                    world.nodes[0].borrow_mut().partitioned = false;
                    world.trouble(0);
                    world.log("fault: node 0 answers again");
                } else {
                    world.cut(0);
                    world.cut(1);
                    world.log("fault: nodes 0 and 1 connections cut");
                }
            });
        }
        let hold = end - 500 - world.elapsed_ms();
        if hold_watching(&world, &history, g, &guard, hold.max(0) as u64).await {
            let at = world.elapsed_ms();
            let what = format!(
                "client 0: the lost signal of r0 fired at {at}ms: a spurious loss (node 2 never failed, {} answered on a new connection at once)",
                if hang { "node 0 hung, node 1" } else { "nodes 0 and 1" }
            );
            violation(&world, &history, what);
        }
        let _ = guard.release().await;
        // Then two nodes hang: an attempt cannot reach a quorum, and must say so after two node
        // timeouts (100 ms each: the attempt's round, then the release of what it set), not
        // more.
        until(&world, end - 300).await;
        for i in [0, 1] {
            world.trouble(i);
            world.nodes[i].borrow_mut().partitioned = true;
        }
        world.log("fault: nodes 0 and 1 hang");
        let started = world.elapsed_ms();
        let refused = take(&world, &history, &client, &setup, "r1")
            .await
            .is_none();
        let took = world.elapsed_ms() - started;
        if !refused || took > 250 {
            let what = format!(
                "client 0: an attempt with two of three nodes hung took {took}ms (node timeout 100ms){}",
                if refused { "" } else { " and was granted" }
            );
            violation(&world, &history, what);
        }
        client.close().await;
    })]
}

/// Takes `resource` once (`try_acquire`); the grant is recorded (the checker judges it), the
/// error logged.
async fn try_take(
    world: &World,
    history: &RefCell<History>,
    (client, s): (&Client, &Setup),
    resource: &str,
) -> Option<(usize, fencelock::Lock)> {
    take_with(
        world,
        history,
        s,
        (Kind::Mutex, resource),
        client.try_acquire(resource),
    )
    .await
}

/// Records a grant of the family (a permit, a read or a write lock) taken by `attempt`.
async fn take_with(
    world: &World,
    history: &RefCell<History>,
    s: &Setup,
    (kind, resource): (Kind, &str),
    attempt: impl std::future::Future<Output = fencelock::Result<fencelock::Lock>>,
) -> Option<(usize, fencelock::Lock)> {
    let started = world.elapsed_ms();
    match attempt.await {
        Ok(lock) => {
            let token = lock.fencing_token().map(|t| t.value());
            let g = record(
                world,
                history,
                s,
                kind,
                resource,
                (
                    token.filter(|_| kind != Kind::Read),
                    lock.validity_deadline(),
                ),
                started,
                (None, Vec::new()),
            );
            history.borrow_mut().grants[g].last_writer = lock.last_writer_token();
            Some((g, lock))
        }
        Err(e) => {
            world.log(format!("client {}: {kind:?} {resource} refused: {e}", s.c));
            None
        }
    }
}

/// The waiting lines' order (see `Scenario::LineOrder`).
fn line_order(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Vec<tokio::task::JoinHandle<()>> {
    let clients: Vec<(Client, Setup)> = (0..8)
        .filter_map(|c| scripted_client(&world, urls, c, 2000, 200))
        .collect();
    if clients.len() < 8 {
        return Vec::new();
    }
    let t0 = world.rng(|r| r.i64(100..300));
    let (free1, free2) = (t0 + 400, t0 + 400 + world.rng(|r| r.i64(200..400)));
    // When each waiter was admitted (virtual ms; i64::MAX while it waits).
    let admitted: Rc<Vec<Cell<i64>>> = Rc::new((0..3).map(|_| Cell::new(i64::MAX)).collect());
    let mut tasks = Vec::new();
    for (c, (client, setup)) in clients.into_iter().enumerate() {
        let (world, history, admitted) = (world.clone(), history.clone(), admitted.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let sem = client.semaphore("sem", PERMITS);
            let rw = client.rwlock("rw");
            let (Ok(sem), Ok(rw)) = (sem, rw) else {
                world.log(format!("client {c}: refused the semaphore or the read-write lock"));
                return;
            };
            let permit = (Kind::Permit, "sem");
            match c {
                // H: every permit, freed one at a time.
                0 => {
                    until(&world, t0).await;
                    let mut held = Vec::new();
                    for _ in 0..PERMITS {
                        held.extend(take_with(&world, &history, &setup, permit, sem.try_acquire()).await);
                    }
                    for (at, (g, lock)) in [free1, free2].into_iter().zip(held) {
                        until(&world, at).await;
                        give_back(&world, &history, g, lock).await;
                    }
                }
                // W1 and W2, in line in that order; each holds its permit to the end.
                1 | 2 => {
                    until(&world, t0 + 50 * c as i64).await;
                    if let Some((g, lock)) = take_with(&world, &history, &setup, permit, sem.acquire()).await {
                        admitted[c - 1].set(world.elapsed_ms());
                        until(&world, free2 + 600).await;
                        give_back(&world, &history, g, lock).await;
                    }
                }
                // T: a try just after each release, while W1 or W2 waits.
                3 => {
                    for at in [free1, free2] {
                        until(&world, at + 1).await;
                        let waiting = admitted[1].get() == i64::MAX;
                        if let Some((g, lock)) = take_with(&world, &history, &setup, permit, sem.try_acquire()).await {
                            if waiting {
                                let what = format!("client 3's try for a permit of sem was granted at {}ms while client 2 waited in line since {}ms", world.elapsed_ms(), t0 + 100);
                                violation(&world, &history, what);
                            }
                            give_back(&world, &history, g, lock).await;
                        }
                    }
                }
                // R1 reads until W and R2 wait; W writes; R2 reads after it.
                4 => {
                    until(&world, t0).await;
                    if let Some((g, lock)) = take_with(&world, &history, &setup, (Kind::Read, "rw"), rw.try_read()).await {
                        until(&world, t0 + 400).await;
                        give_back(&world, &history, g, lock).await;
                    }
                }
                5 | 6 => {
                    let (kind, at) = if c == 5 { (Kind::Write, t0 + 50) } else { (Kind::Read, t0 + 100) };
                    until(&world, at).await;
                    let attempt = async {
                        if kind == Kind::Write { rw.write().await } else { rw.read().await }
                    };
                    if let Some((g, lock)) = take_with(&world, &history, &setup, (kind, "rw"), attempt).await {
                        let now = world.elapsed_ms();
                        if c == 5 {
                            admitted[2].set(now);
                        } else if admitted[2].get() > now {
                            let what = format!("client 6's read of rw was granted at {now}ms before client 5's write, which waited in line ahead of it since {}ms", t0 + 50);
                            violation(&world, &history, what);
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        give_back(&world, &history, g, lock).await;
                    }
                }
                // W3: first in line for `hand` while a release is on its way to the nodes
                // (issue 33's stalls). A stranger holds `hand` on every node; the release
                // reaches node 0 first, so W3's first attempt is granted there only; W3 takes
                // its place in line, and its attempt in line is granted on node 0 and refused on
                // the others; the release reaches them just after. The lock is then free and W3
                // first in line: it must take it within a few rounds, not after a retry delay.
                7 => {
                    let start = t0 + 1600;
                    until(&world, start).await;
                    for i in 0..world.nodes.len() {
                        world.stranger(i, "hand", 2000);
                    }
                    world.by_hand(0, &["DEL", "hand"]);
                    world.log("the release of hand reached node 0");
                    let freed = Rc::new(Cell::new(i64::MAX));
                    let rest = {
                        let (world, freed) = (world.clone(), freed.clone());
                        tokio::task::spawn_local(async move {
                            let queued = |i: usize| {
                                world.by_hand(i, &["EXISTS", "fencelock:queue:hand"])
                                    == crate::resp::Reply::Int(1)
                            };
                            while !(1..world.nodes.len()).all(queued) {
                                if world.elapsed_ms() > start + 1000 {
                                    return;
                                }
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                            for i in 1..world.nodes.len() {
                                world.by_hand(i, &["DEL", "hand"]);
                            }
                            world.log("the release of hand reached the other nodes");
                            freed.set(world.elapsed_ms());
                        })
                    };
                    if let Some((g, lock)) = take_with(&world, &history, &setup, (Kind::Mutex, "hand"), client.acquire("hand")).await {
                        let (at, free) = (world.elapsed_ms(), freed.get());
                        if free == i64::MAX {
                            let what = format!("client 7 was granted hand at {at}ms before its release reached every node");
                            violation(&world, &history, what);
                        } else if at - free > HANDOVER_MS {
                            let what = format!("client 7, first in line, was granted hand at {at}ms, {}ms after it was free on every node ({free}ms): more than {HANDOVER_MS}ms", at - free);
                            violation(&world, &history, what);
                        }
                        give_back(&world, &history, g, lock).await;
                    }
                    let _ = rest.await;
                }
                _ => {}
            }
            client.close().await;
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        tasks.push(tokio::task::spawn_local(async move {
            until(&world, free2 + 500).await;
            let (w1, w2) = (admitted[0].get(), admitted[1].get());
            if w2 < w1 {
                let what = format!("client 2 was admitted to sem at {w2}ms before client 1 ({w1}ms), which came to the line first");
                violation(&world, &history, what);
            }
        }));
    }
    tasks
}

/// How long after the lock came free on every node the first in line may take it in
/// `line-order` (virtual ms): a few rounds, well below the retry delays (100-200 ms by then).
const HANDOVER_MS: i64 = 40;

/// How often the coverage check looks at the nodes (virtual ms).
const COVERAGE_EVERY_MS: u64 = 10;

/// The restart quarantine's record, checked on the nodes themselves while the run goes on: on
/// every node whose grant a holder counted, while the holder holds, the TTLs in use there
/// (`fencelock:ttls`: the longest TTL among entries still live, what a client judging a
/// restarted node reads) cover what the lock key has left. A key outliving the record is the
/// state in which a node restarted empty would count again while the lock lives (issue 27 item
/// 1: a short TTL's announcement expired the set; item 2: a batched extension landed after its
/// announcement's reach): found here whether or not a restart and a third client then met it.
async fn coverage_loop(world: Rc<World>, history: Rc<RefCell<History>>, end: i64) {
    while world.elapsed_ms() < end {
        tokio::time::sleep(Duration::from_millis(COVERAGE_EVERY_MS)).await;
        let mut h = history.borrow_mut();
        for (gi, i, what) in uncovered(&world, &h) {
            h.uncovered.insert((gi, i));
            world.log(what.clone());
            h.seen.push(what);
        }
    }
}

/// The keys of held mutexes that outlive the quarantine's record on a node that counted them
/// (not yet reported): (grant, node, what).
fn uncovered(world: &World, h: &History) -> Vec<(usize, usize, String)> {
    use crate::resp::Reply;
    let mut found = Vec::new();
    for (gi, g) in h.grants.iter().enumerate() {
        let (Some(owner), Kind::Mutex, None) = (&g.owner, g.kind, g.ended) else {
            continue;
        };
        let holding = match &g.lost {
            Some(lost) => !lost.is_fired(),
            None => world.elapsed_ms() < g.valid_until,
        };
        if !holding {
            continue;
        }
        for &i in &g.counted {
            if i >= world.nodes.len() || h.uncovered.contains(&(gi, i)) {
                continue;
            }
            let now = world.node_now(i);
            let mut n = world.nodes[i].borrow_mut();
            let key = g.resource.as_bytes().to_vec();
            if n.node.exec(now, &[b"GET".to_vec(), key.clone()])
                != Reply::Bulk(owner.as_bytes().to_vec())
            {
                continue;
            }
            let Reply::Int(left) = n.node.exec(now, &[b"PTTL".to_vec(), key]) else {
                continue;
            };
            let entries = n.node.exec(
                now,
                &[
                    b"ZRANGE".to_vec(),
                    fencelock::protocol::TTLS_KEY.as_bytes().to_vec(),
                    b"0".to_vec(),
                    b"-1".to_vec(),
                    b"WITHSCORES".to_vec(),
                ],
            );
            // What a client judging a restarted node reads: the longest TTL whose entry lives.
            let mut longest = 0i64;
            let mut shown = Vec::new();
            if let Reply::Array(items) = entries {
                for pair in items.chunks(2) {
                    if let [Reply::Bulk(m), Reply::Bulk(score)] = pair {
                        let m = String::from_utf8_lossy(m);
                        let until =
                            String::from_utf8_lossy(score).parse::<f64>().unwrap_or(0.0) as i64;
                        if until > now {
                            longest = longest.max(m.parse().unwrap_or(0));
                        }
                        shown.push(format!("{m} until {}ms", until - now));
                    }
                }
            }
            if left > longest {
                found.push((gi, i, format!(
                    "quarantine record cut on node {i}: client {}'s key {} (granted {}ms) lives {left}ms more, but the TTLs in use there cover {longest}ms (entries, time left: [{}]): a node restarted empty now would count again while the lock lives (issue 27 items 1 and 2)",
                    g.client, g.resource, g.granted, shown.join(", ")
                )));
            }
        }
    }
    found
}

/// Starts the election's observer on a client of its own: each report goes to the history.
fn observe(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: Vec<String>,
) -> Option<tokio::task::JoinHandle<()>> {
    let config = Config::new(urls)
        .with_ttl(Duration::from_millis(2000))
        .with_node_timeout(Duration::from_millis(200))
        .with_fencing(true);
    let client = Client::new(config).ok()?;
    let election = client.election("e").ok()?;
    Some(tokio::task::spawn_local(async move {
        let mut observer = election.observe();
        loop {
            let leader = observer.next().await;
            let at = world.elapsed_ms();
            history
                .borrow_mut()
                .reports
                .push((at, leader.term(), leader.value().to_string()));
        }
    }))
}

async fn fault_loop(
    world: Rc<World>,
    faults: Faults,
    walls: Vec<Rc<Cell<i64>>>,
    pauses: Vec<(usize, Pause)>,
    end: i64,
) {
    let n = world.nodes.len();
    let majority = n / 2 + 1;
    // Every node's clock runs a little fast or slow (within the drift the validity allows
    // for: 1% of the TTL by default).
    for node in &world.nodes {
        let ppm = world.rng(|r| r.i64(-5000..=5000));
        node.borrow_mut().drift_ppm = ppm;
    }
    // The claim for restarts without persistence: at most one node of a lock's quorum loses
    // its data within the longest TTL (4 s here); `Claimed` keeps such restarts 5 s apart.
    let mut last_amnesia = i64::MIN / 2;
    while world.elapsed_ms() < end {
        let wait = world.rng(|r| r.u64(100..1500));
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let i = world.rng(|r| r.usize(..n));
        let pick = world.rng(|r| r.u32(..120));
        let now_ms = world.elapsed_ms();
        world.trouble(i);
        match pick {
            0..=14 if faults != Faults::Claimed || now_ms - last_amnesia >= 5000 => {
                last_amnesia = now_ms;
                world.restart(i, Persistence::None);
            }
            0..=29 => world.restart(i, Persistence::AofAlways),
            30..=44 => {
                let now = world.node_now(i);
                world.nodes[i]
                    .borrow_mut()
                    .node
                    .exec(now, &[b"SCRIPT".to_vec(), b"FLUSH".to_vec()]);
                world.log(format!("fault: node {i} SCRIPT FLUSH"));
            }
            45..=59 => {
                world.cut(i);
                world.log(format!("fault: node {i} connections cut"));
            }
            60..=74 => {
                let ms = world.rng(|r| r.u64(100..2000));
                world.nodes[i].borrow_mut().partitioned = true;
                world.log(format!("fault: node {i} partitioned for {ms}ms"));
                let w = world.clone();
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    w.nodes[i].borrow_mut().partitioned = false;
                    w.trouble(i);
                    w.log(format!("fault: node {i} partition heals"));
                });
            }
            75..=84 => {
                let hi = world.rng(|r| r.u64(5..400));
                world.nodes[i].borrow_mut().delay_ms = (0, hi);
                world.log(format!("fault: node {i} replies late, up to {hi}ms"));
            }
            // Issue 27 item 4: FLUSHALL on a majority while locks are held.
            85..=92 if faults == Faults::All => {
                for k in 0..majority {
                    let j = (i + k) % n;
                    let now = world.node_now(j);
                    world.lost_data.set(true);
                    world.losses.borrow_mut().push(world.elapsed_ms());
                    world.trouble(j);
                    world.nodes[j]
                        .borrow_mut()
                        .node
                        .exec(now, &[b"FLUSHALL".to_vec()]);
                    world.log(format!("fault: node {j} FLUSHALL"));
                }
            }
            // Issue 27 item 3: a second node loses its data within a TTL of the first.
            93..=99 if faults != Faults::Claimed => {
                world.restart(i, Persistence::None);
                let gap = world.rng(|r| r.u64(0..1000));
                tokio::time::sleep(Duration::from_millis(gap)).await;
                world.restart((i + 1) % n, Persistence::None);
            }
            // Out of memory: the node refuses writes for a while.
            100..=104 => {
                let ms = world.rng(|r| r.u64(100..2000));
                world.set_oom(i, true);
                world.log(format!("fault: node {i} out of memory for {ms}ms"));
                let w = world.clone();
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    w.set_oom(i, false);
                    w.trouble(i);
                    w.log(format!("fault: node {i} has memory again"));
                });
            }
            // A client's wall clock jumps (token proposals follow it; the counters must keep
            // tokens in order whatever it reads).
            105..=109 if !walls.is_empty() => {
                let k = world.rng(|r| r.usize(..walls.len()));
                let by = world.rng(|r| [-60_000, -2000, -300, 300, 2000][r.usize(..5)]);
                walls[k].set(walls[k].get() + by);
                world.log(format!("fault: client {k}'s wall clock jumps {by}ms"));
            }
            // A node's clock jumps (README: unsafe for Redlock without fencing, so not claimed).
            110..=114 if faults == Faults::All => {
                let by = world.rng(|r| [-3000, -500, 500, 3000][r.usize(..4)]);
                world.nodes[i].borrow_mut().offset_ms += by;
                world.log(format!("fault: node {i}'s clock jumps {by}ms"));
            }
            // A whole client paused (a stopped process, a long GC, a VM migrated): its
            // connections neither send nor receive and its holder acts on nothing, past its
            // TTL; then it writes with the token it holds (fencing must refuse it).
            115..=119 if !pauses.is_empty() => {
                let (c, paused) = &pauses[world.rng(|r| r.usize(..pauses.len()))];
                let ms = world.rng(|r| r.i64(1000..4000));
                let (from, until) = (world.elapsed_ms(), world.elapsed_ms() + ms);
                paused.set((from, until));
                world.frozen.borrow_mut().insert(*c);
                world.log(format!("fault: client {c} paused for {ms}ms"));
                let w = world.clone();
                let c = *c;
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(Duration::from_millis(ms as u64)).await;
                    w.frozen.borrow_mut().remove(&c);
                    w.log(format!("fault: client {c} runs again"));
                });
            }
            _ => world.nodes[i].borrow_mut().delay_ms = (0, 2),
        }
    }
}

/// How long a node must have been free of faults for a failed campaign's withdrawal to be
/// sure to reach it (longer than any client's node timeout).
const QUIET_MS: i64 = 2000;

/// After a failed campaign returned, how long a read that began before its withdrawal may take
/// to come back to the observer (its poll, then a read bounded by its node timeout).
const REPORT_SLACK_MS: i64 = 1000;

/// Judges a history: two holders of one resource at once (a writer beside anyone on the
/// read-write lock, more than `PERMITS` permits), a later grant (its attempt began after an
/// earlier holder stopped) with a token not above the earlier one's, two leaders of one term, a
/// stale write the storage accepted, and the observer's reports.
fn check(h: &History, world: &World, end: i64) -> Vec<String> {
    let grants = &h.grants;
    let mut out = Vec::new();
    for (a_i, a) in grants.iter().enumerate() {
        let a_end = a.end();
        for b in grants.iter().skip(a_i + 1) {
            if a.resource != b.resource {
                continue;
            }
            let b_end = b.end();
            let overlap = a.granted < b_end && b.granted < a_end && a.quarantine && b.quarantine;
            let exclusive = matches!(
                (a.kind, b.kind),
                (Kind::Mutex | Kind::Leader, _) | (Kind::Write, _) | (_, Kind::Write)
            );
            if overlap && exclusive {
                out.push(format!(
                    "two holders of {}: client {} ({:?}, granted {}ms, valid to {}ms, token {:?}) and client {} ({:?}, granted {}ms, valid to {}ms, token {:?})",
                    a.resource, a.client, a.kind, a.granted, a_end, a.token, b.client, b.kind, b.granted, b_end, b.token
                ));
            }
            if a.kind == Kind::Leader && b.kind == Kind::Leader && a.token == b.token {
                out.push(format!(
                    "two leaders of term {:?}: client {} (granted {}ms) and client {} (granted {}ms)",
                    a.token, a.client, a.granted, b.client, b.granted
                ));
            }
            for (first, first_end, second) in [(a, a_end, b), (b, b_end, a)] {
                if first_end <= second.started {
                    if let (Some(t1), Some(t2)) = (first.token, second.token) {
                        if t2 <= t1 {
                            out.push(format!(
                                "token order on {}: client {} (token {t1}, ended {first_end}ms) then client {} (attempt {}ms) got token {t2}",
                                first.resource, first.client, second.client, second.started
                            ));
                        }
                    }
                }
            }
        }
    }
    // Every token fits the fences' signed 64-bit column.
    for g in grants {
        if let Some(t) = g.token.filter(|&t| t > i64::MAX.unsigned_abs()) {
            out.push(format!(
                "client {} was issued token {t} for {} at {}ms: past i64::MAX, which no fenced storage holds",
                g.client, g.resource, g.granted
            ));
        }
    }
    // A fenced reader learns every writer that ended before it began: its last writer's token
    // is at least theirs.
    for r in grants.iter().filter(|g| g.kind == Kind::Read) {
        let Some(learned) = r.last_writer else {
            continue;
        };
        for w in grants
            .iter()
            .filter(|g| g.kind == Kind::Write && g.resource == r.resource)
        {
            if let Some(t) = w.token.filter(|&t| t > learned && w.end() <= r.started) {
                out.push(format!(
                    "a reader of {} learned writer token {learned}: client {} (attempt {}ms) after client {}'s write (token {t}, ended {}ms)",
                    r.resource, r.client, r.started, w.client, w.end()
                ));
            }
        }
    }
    // N + 1 permits: at each permit's grant, the permits held then.
    for p in grants
        .iter()
        .filter(|g| g.kind == Kind::Permit && g.quarantine)
    {
        let held: Vec<&Grant> = grants
            .iter()
            .filter(|q| {
                q.kind == Kind::Permit
                    && q.quarantine
                    && q.granted <= p.granted
                    && p.granted < q.end()
            })
            .collect();
        if held.len() > PERMITS as usize {
            out.push(format!(
                "{} permits of {PERMITS} held at {}ms: clients {:?}",
                held.len(),
                p.granted,
                held.iter().map(|q| q.client).collect::<Vec<_>>()
            ));
        }
    }
    // A stale write accepted: a write of a holder that a successor (its attempt began after the
    // holder stopped) had written before.
    for w in h.writes.iter().filter(|w| w.accepted) {
        let a = &grants[w.grant];
        let superseded = h.writes.iter().find(|v| {
            let b = &grants[v.grant];
            v.accepted && v.at < w.at && b.resource == a.resource && b.started >= a.end()
        });
        if let Some(v) = superseded {
            let b = &grants[v.grant];
            out.push(format!(
                "stale write accepted on {}: client {} (token {}) wrote at {}ms after client {}'s successor write (token {}, {}ms)",
                a.resource, a.client, w.token, w.at, b.client, v.token, v.at
            ));
        }
    }
    // The observer: terms rising, each report a campaign's, none of a campaign that failed and
    // was withdrawn everywhere (issue 35 item 4), none skipped (item 3).
    let mut last = 0;
    for (at, term, value) in &h.reports {
        if *term <= last {
            out.push(format!(
                "observer reported term {term} ({value}) at {at}ms after term {last}"
            ));
        }
        last = last.max(*term);
        match h.campaigns.iter().find(|c| &c.value == value) {
            None => out.push(format!(
                "observer reported {value} (term {term}) at {at}ms: no such campaign"
            )),
            // Late is allowed after a data loss: the observer then waits for trusted witnesses
            // and reports what its earlier reads met (issue 35 item 3), which is what a report
            // of a withdrawn campaign means (docs/guarantees.md, A-elect-observe).
            Some(c)
                if c.term.is_none()
                    && c.gone_everywhere
                    && *at > c.ended + REPORT_SLACK_MS
                    && !world
                        .losses
                        .borrow()
                        .iter()
                        .any(|t| (c.ended - QUIET_MS..=*at).contains(t)) =>
            {
                out.push(format!(
                    "observer reported {value} (term {term}) at {at}ms, a leader that never led: its campaign failed at {}ms and no node kept its entry (issue 35 item 4)",
                    c.ended
                ))
            }
            Some(c) if c.term.is_some_and(|t| t != *term) => out.push(format!(
                "observer reported {value} with term {term}, its campaign won term {:?}",
                c.term
            )),
            _ => {}
        }
    }
    for c in h.campaigns.iter().filter(|c| !c.left_on_quiet.is_empty()) {
        out.push(format!(
            "campaign {} failed at {}ms and left its log entry on node(s) {:?}, which answered (issue 35 item 4: observers report a leader that never led)",
            c.value, c.ended, c.left_on_quiet
        ));
    }
    for c in &h.campaigns {
        let Some(term) = c.term else { continue };
        // Skipped: the observer moved past the term after the campaign won (a larger term
        // reported before it, as after every node lost its counters, is a token order matter).
        let later = h
            .reports
            .iter()
            .any(|(at, t, _)| *t > term && *at >= c.ended);
        let seen = h.reports.iter().any(|(_, t, _)| *t == term);
        // A term below one reported before it won came out of order (every node's counters
        // lost, a clock behind): the token order check reports that; rising terms cannot
        // report it.
        let behind = h
            .reports
            .iter()
            .any(|(at, t, _)| *t > term && *at < c.ended);
        // Issue 35 item 3: a violation in every run, data lost or not (an observer counts only
        // the nodes the quarantine and the amnesia guard trust).
        if later && !seen && !behind && c.ended < end {
            out.push(format!(
                "observer skipped {} (term {term}, won at {}ms) and reported a later term (issue 35 item 3)",
                c.value, c.ended
            ));
        }
    }
    out
}

/// The report of a failing seed: its violations, its trace and the command that reruns it.
pub fn report(outcome: &Outcome, opts: &Options) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "seed {} FAILED: {} violation(s)",
        outcome.seed,
        outcome.violations.len()
    );
    for v in &outcome.violations {
        let _ = writeln!(s, "  {v}");
    }
    let _ = writeln!(s, "trace:");
    for line in &outcome.trace {
        let _ = writeln!(s, "  {line}");
    }
    let _ = writeln!(
        s,
        "rerun: ./dev sim --seed {} --faults {} --duration {}s{}{} --verbose",
        outcome.seed,
        match opts.faults {
            Faults::None => "none",
            Faults::Claimed => "claimed",
            Faults::Amnesia => "amnesia",
            Faults::All => "all",
        },
        opts.duration.as_secs(),
        if opts.ttl_roles { " --ttl-roles" } else { "" },
        if opts.scenario == Scenario::Mixed {
            String::new()
        } else {
            format!(" --scenario {}", opts.scenario.name())
        }
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(client: usize, token: Option<u64>, started: i64, granted: i64, ended: i64) -> Grant {
        Grant {
            client,
            kind: Kind::Mutex,
            quarantine: true,
            resource: "r".into(),
            token,
            started,
            granted,
            valid_until: ended + 100,
            ended: Some(ended),
            owner: None,
            counted: Vec::new(),
            lost: None,
            last_writer: None,
        }
    }

    fn judged(grants: &[Grant]) -> Vec<String> {
        let world = World::new(1, 0, false);
        let h = History {
            grants: grants.to_vec(),
            ..History::default()
        };
        check(&h, &world, 1000)
    }

    #[test]
    fn the_checker_sees_two_holders_and_a_smaller_later_token() {
        // In turn, tokens rising: nothing to report.
        let fine = [grant(0, Some(5), 0, 1, 10), grant(1, Some(6), 10, 11, 20)];
        assert!(judged(&fine).is_empty());
        // Overlapping validity.
        let two = [grant(0, None, 0, 1, 10), grant(1, None, 5, 6, 20)];
        assert_eq!(judged(&two).len(), 1, "{:?}", judged(&two));
        assert!(judged(&two)[0].starts_with("two holders of r"));
        // A later attempt, a smaller token.
        let order = [grant(0, Some(9), 0, 1, 10), grant(1, Some(7), 12, 13, 20)];
        assert_eq!(judged(&order).len(), 1);
        assert!(judged(&order)[0].starts_with("token order on r"));
        // Exclusion is not judged for a client without the quarantine.
        let mut off = two.clone();
        off[1].quarantine = false;
        assert!(judged(&off).is_empty());
    }

    #[test]
    fn the_checker_sees_the_family_rules_broken() {
        let with = |kind, resource: &str, g: Grant| Grant {
            kind,
            resource: resource.into(),
            ..g
        };
        // Two readers side by side are fine; a writer beside a reader is not.
        let readers = [
            with(Kind::Read, "rw", grant(0, None, 0, 1, 10)),
            with(Kind::Read, "rw", grant(1, None, 0, 2, 10)),
        ];
        assert!(judged(&readers).is_empty());
        let mut writer = readers.clone();
        writer[1].kind = Kind::Write;
        assert!(judged(&writer)[0].starts_with("two holders of rw"));
        // PERMITS permits at once are fine, one more is not.
        let permits: Vec<Grant> = (0..=PERMITS as usize)
            .map(|c| with(Kind::Permit, "sem", grant(c, None, 0, 1 + c as i64, 10)))
            .collect();
        assert!(judged(&permits[..PERMITS as usize]).is_empty());
        assert!(judged(&permits)[0].starts_with("3 permits of 2"));
        // Two leaders of one term (one after the other: the term is not judged as a token
        // order alone).
        let leaders = [
            with(Kind::Leader, "election", grant(0, Some(4), 0, 1, 10)),
            with(Kind::Leader, "election", grant(1, Some(4), 5, 20, 30)),
        ];
        assert!(judged(&leaders)
            .iter()
            .any(|v| v.starts_with("two leaders of term Some(4)")));
    }

    #[test]
    fn the_coverage_check_sees_a_key_outliving_the_record() {
        let world = World::new(1, 0, false);
        let now = world.node_now(0);
        let exec = |args: &[&str]| {
            let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
            world.nodes[0].borrow_mut().node.exec(now, &args)
        };
        exec(&["SET", "r", "owner", "PX", "3000"]);
        let ttls = fencelock::protocol::TTLS_KEY;
        let mut held = grant(0, None, 0, 1, 0);
        (held.owner, held.counted, held.ended, held.valid_until) =
            (Some("owner".into()), vec![0], None, 5000);
        let h = History {
            grants: vec![held],
            ..History::default()
        };
        // No record at all, then a 1 s TTL's: neither covers 3 s.
        assert_eq!(uncovered(&world, &h).len(), 1);
        exec(&["ZADD", ttls, &(now + 2000).to_string(), "1000"]);
        assert_eq!(uncovered(&world, &h).len(), 1);
        // A 4 s TTL's entry still live covers it; an expired one does not.
        exec(&["ZADD", ttls, &(now - 1).to_string(), "4000"]);
        assert!(uncovered(&world, &h)[0].2.contains("cover 1000ms"));
        exec(&["ZADD", ttls, &(now + 10).to_string(), "4000"]);
        assert!(uncovered(&world, &h).is_empty());
        // Another owner's key is not this holder's to judge.
        exec(&["ZREM", ttls, "4000"]);
        exec(&["SET", "r", "other", "PX", "3000"]);
        assert!(uncovered(&world, &h).is_empty());
    }

    #[test]
    fn the_checker_sees_a_stale_write_and_the_observers_faults() {
        let world = World::new(1, 0, false);
        let mut h = History {
            grants: vec![grant(0, Some(5), 0, 1, 10), grant(1, Some(6), 10, 11, 20)],
            ..History::default()
        };
        h.write(1, 12);
        // The storage refuses the old holder's late write...
        h.write(0, 15);
        assert!(!h.writes[1].accepted);
        assert!(check(&h, &world, 1000).is_empty());
        // ...and a storage that took it is caught.
        h.writes[1].accepted = true;
        assert!(check(&h, &world, 1000)[0].starts_with("stale write accepted on r"));
        // The observer: a failed campaign whose entry was withdrawn everywhere, reported well
        // after; a won term skipped for a later one; terms going back.
        let campaign = |value: &str, ended, term| Campaign {
            client: 0,
            value: value.into(),
            ended,
            term,
            gone_everywhere: true,
            left_on_quiet: Vec::new(),
        };
        let h = History {
            campaigns: vec![
                campaign("a", 100, Some(3)),
                campaign("b", 200, None),
                campaign("c", 300, Some(7)),
            ],
            reports: vec![
                (2000, 5, "b".into()),
                (2100, 7, "c".into()),
                (2200, 3, "a".into()),
            ],
            ..History::default()
        };
        let v = check(&h, &world, 5000);
        assert!(
            v.iter().any(|v| v.contains("a leader that never led")),
            "{v:?}"
        );
        assert!(v.iter().any(|v| v.contains("after term 7")), "{v:?}");
        let h = History {
            reports: vec![(2100, 7, "c".into())],
            ..h
        };
        assert!(check(&h, &world, 5000)[0].starts_with("observer skipped a"));
        // A term below one reported before it won (out of order: the token order check's) is
        // not a skip.
        let h = History {
            campaigns: vec![
                campaign("a", 100, Some(3)),
                campaign("c", 20, Some(7)),
                campaign("d", 2000, Some(9)),
            ],
            reports: vec![(50, 7, "c".into()), (2100, 9, "d".into())],
            ..History::default()
        };
        assert!(
            check(&h, &world, 5000).is_empty(),
            "{:?}",
            check(&h, &world, 5000)
        );
    }
}
