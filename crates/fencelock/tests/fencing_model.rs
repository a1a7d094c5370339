//! Machine check of the fencing-token protocol that `docs/fencing.md` argues for.
//!
//! The protocol is modelled as a pure state machine (no servers, no clocks, no I/O): Redis nodes
//! that hold a lock key and the node's fence counter, clients that walk through the acquisition
//! steps, a fenced storage, and faults that fire at any moment. The checker explores every
//! interleaving breadth-first (so each counterexample it prints is a shortest one) and checks
//! these properties at every token issue and every accepted storage write:
//!
//! * P1 uniqueness: no two fencing tokens are equal.
//! * P2 order: a token issued after another is larger.
//! * P2q (the form of P2 that the protocol can promise): a token issued while its holder still
//!   has its key on a quorum of nodes is larger than every token issued before it.
//! * P3 storage: once the storage accepted a write from a holder, it accepts no write from a
//!   holder whose token was issued earlier.
//!
//! Which faults each variant survives is asserted test by test; the tests that expect a hole
//! assert that the checker finds it and print the trace.
//!
//! Time is not modelled; it is over-approximated. A key may expire at any moment. An "honest"
//! expiry (the TTL ran out on a node whose clock behaves) also means the owner's validity
//! (`ttl - elapsed - drift`) ran out, so an owner still acquiring fails its validity check. A
//! "clock jump" expiry removes a key early without the owner's validity noticing. A paused
//! client is one that takes no step while other events happen; nothing bounds how long.
//!
//! Modelling choices that keep the space small without hiding behaviour (the reason is given
//! beside each one in the code):
//! * Each request is applied atomically together with its reply, in any order across nodes; a
//!   request may time out instead (not applied). A set-if-absent that is applied but whose reply
//!   is lost acts like a timeout plus a key that only blocks others, which a refusal already
//!   covers. A write-back may be delayed: applied at any later moment while its client lives.
//! * A release deletes the client's keys on every node at once. A lost release leaves a key that
//!   only blocks others until it expires, which timeouts of the others already cover.
//! * A restart *with* persistence (appendfsync always) keeps the node's keys and counter; its
//!   only effects are timeouts and expiries during the downtime, which are already events.
//!
//! * Tokens and trust are the client's: each decision calls `fencing::derive` and
//!   `fencing::is_epoch_start` on what the attempt heard. The node side of each step is
//!   `node_acquire` / `node_write_back` below, held to the Lua scripts on a real node by
//!   `the_model_fences_as_the_lua_does`. The client's clock (the first token of a new epoch) is
//!   an oracle: honest (above every token derived so far) or behind (1). Validity is checked
//!   where the client checks it, once, after the write-back.
//!
//! Not modelled here (EXTEND, several keys per lock, the waiting line's grant rule) and why the
//! argument still covers them: `docs/fencing.md`, "How the model follows the code".
//!
//! Run: `cargo test -p fencelock --test fencing_model -- --nocapture` (small bounds, debug) or
//! `cargo test -p fencelock-model -- --nocapture` (the bounds the docs cite, optimised).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use fencelock::fencing::{derive, is_epoch_start, next_token, one_round, CounterRead, Derivation};

const MAX_NODES: usize = 5;
const MAX_CLIENTS: usize = 3;
/// Resources whose lock keys share the node's one counter (issue 27 item 3): X and Z.
const RESOURCES: usize = 2;

/// Model tokens stay below 64 (the `issued` bit set).
const TOKEN_LIMIT: u64 = 64;

/// Whether the larger exhaustive bounds are affordable (optimised build): the "release" column
/// of docs/fencing.md's table, which `cargo test -p fencelock-model` (so `./dev test`) runs.
const FAST_BUILD: bool = !cfg!(debug_assertions);

/// The cases of millions of states each (two attempts per client under each fault, three
/// clients, proposals with two attempts): minutes and up to 17 GB together, over a third of the
/// suite's 10-minute budget on 2 cores. Run by hand, optimised:
/// `FENCELOCK_MODEL_FULL=1 cargo test -p fencelock-model -- --nocapture` (the variable is read
/// when the file compiles; cargo rebuilds the model when it changes).
const FULL: bool = FAST_BUILD && option_env!("FENCELOCK_MODEL_FULL").is_some();

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// Which variant of the protocol the clients run.
#[derive(Debug, Clone, Copy)]
struct Protocol {
    /// Step 3: write the token back to the granting nodes. Without it the token is step 2's.
    write_back: bool,
    /// The write-back applies only where the node still holds the writer's key.
    ownership_check: bool,
    /// Amnesia guard (the client's): a read is trusted iff the node has its counter; a quorum of
    /// trusted reads; write-back to the trusted nodes; the untrusted granting nodes are seeded
    /// once the token is issued; a new epoch only when all N nodes granted without a counter.
    /// Without it (the protocol before issue 13): every read counts, a missing counter as 0.
    guard: bool,
    /// A restarted node refuses every request until max-TTL has passed.
    quarantine: bool,
    /// MUTANT: a new epoch when the granting nodes (a quorum) lack the counter, not all N.
    epoch_on_quorum: bool,
    /// MUTANT: the untrusted granting nodes are seeded during the write-back, before issue.
    seed_before_issue: bool,
    /// MUTANT: one trusted read among a granting quorum is enough (the write-back then goes to
    /// every granting node, as without the guard: else its quorum would still be missing).
    trust_one: bool,
    /// The one-round path (issue 18): each attempt proposes a token; a node that grants and has
    /// its counter accepts the proposal when it is above the counter, raising the counter to it
    /// in the same atomic step; a quorum of acceptances issues the proposal with no write-back.
    /// Otherwise the attempt falls back to the two rounds above.
    propose: bool,
    /// Which proposals the clients make (see [`Proposals`]).
    proposals: Proposals,
    /// MUTANT: a node accepts a proposal equal to its counter.
    accept_equal: bool,
    /// MUTANT: a node without its counter accepts a proposal (the guard's trust rule ignored).
    accept_untrusted: bool,
    /// The seed wait (issue 27 item 3): a node that lost its counter (restart, eviction) is
    /// seeded only by an attempt that started once every round in flight at the loss was over
    /// (the client waits its TTL, longer than any client's node timeout, which bounds a round),
    /// and that found the node still without its counter at its grant there. A round that
    /// recorded a token on the node before the loss may still land counted records elsewhere
    /// until it ends; a seed taken from reads before those records can make the node trusted
    /// below a token it had recorded. Without it (the protocol before issue 27): any issued
    /// attempt seeds its untrusted granting nodes.
    seed_wait: bool,
    /// MUTANT (`write_back.lua` before issue 27's fix): a plain write-back (neither a seed nor
    /// an epoch start's) on a node that has no counter creates it at the token. A node that lost
    /// its counter (eviction, a `DEL`) while a key of another resource stayed then became
    /// trusted below a token it had recorded. Without it such a write-back writes nothing and
    /// is not counted.
    write_back_creates: bool,
}

/// The proposals an attempt may make, relative to M, the largest token that can still matter
/// (issued, on a node, or held by an attempt: [`State::max_known_token`]). A real client's
/// proposal is a hint (its clock, the last token it saw), so it can be anything; these sets
/// cover every position a value can take against the tokens that exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proposals {
    /// Every value from 0 (no usable hint: below every counter) to M + 2.
    All,
    /// 0 (a hint below every counter), M (equal to the largest counter: what the accept-equal
    /// mutant needs) and M + 1 (the hint that hits).
    Few,
}

/// The client's protocol (its restart quarantine is on by default).
const GUARDED: Protocol = Protocol {
    write_back: true,
    ownership_check: true,
    guard: true,
    quarantine: true,
    epoch_on_quorum: false,
    seed_before_issue: false,
    trust_one: false,
    propose: true,
    proposals: if FAST_BUILD {
        Proposals::All
    } else {
        Proposals::Few
    },
    accept_equal: false,
    accept_untrusted: false,
    seed_wait: true,
    write_back_creates: false,
};

/// The two-round protocol alone (before issue 18): no proposals.
const TWO_ROUNDS: Protocol = Protocol {
    propose: false,
    ..GUARDED
};

/// The protocol before issue 13 (no guard, no proposals).
const UNGUARDED: Protocol = Protocol {
    guard: false,
    ..TWO_ROUNDS
};

/// The client's clock, read for the first token of a new epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clock {
    /// Above every token derived so far (the earlier epoch issued fewer than one token per
    /// microsecond, and this clock is not behind the earlier issuers' by more than that).
    Honest,
    /// Behind: the epoch starts from 1.
    Behind,
}

/// Which faults may happen, and how often.
#[derive(Debug, Clone, Copy)]
struct Faults {
    /// Early expiries that the owner's validity check does not see (a node's clock jumped).
    clock_jumps: u8,
    /// Crash and restart of one node without persistence: it loses lock keys and counter.
    amnesia_restarts: u8,
    /// Every node restarts without persistence at once (a redeploy).
    total_losses: u8,
    /// The counter key is evicted (maxmemory-policy that evicts keys without TTL).
    evictions: u8,
    /// Write-backs whose replies are lost and that are applied later.
    delayed_write_backs: bool,
    /// Step 1 requests still in flight when the round returned at its quorum, landing later.
    late_sets: bool,
    clock: Clock,
}

const PAUSES_ONLY: Faults = Faults {
    clock_jumps: 0,
    amnesia_restarts: 0,
    total_losses: 0,
    evictions: 0,
    delayed_write_backs: true,
    late_sets: true,
    clock: Clock::Honest,
};

#[derive(Debug, Clone, Copy)]
struct Config {
    nodes: usize,
    clients: usize,
    /// Acquisition attempts per client.
    attempts: u8,
    protocol: Protocol,
    faults: Faults,
    /// The nodes start with counter 0 (an epoch already began) instead of fresh (no counter:
    /// the first grant starts an epoch). Saves the first epoch's steps in small bounds.
    started: bool,
    /// The resource each client locks (0: X, 1: Z); every client locks X unless said.
    resources: [u8; MAX_CLIENTS],
    /// Attempts of each client where not 0 (else `attempts`).
    attempts_of: [u8; MAX_CLIENTS],
}

impl Config {
    fn quorum(&self) -> u32 {
        (self.nodes / 2 + 1) as u32
    }

    fn resource(&self, c: usize) -> usize {
        usize::from(self.resources[c])
    }

    /// How many resources the clients lock.
    fn resources_used(&self) -> usize {
        1 + self.resources[..self.clients]
            .iter()
            .map(|&r| usize::from(r))
            .max()
            .unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
struct Node {
    /// Per resource, the client whose key is set. A client's keys never outlive its attempt
    /// (release deletes them all), so the client index identifies the random value of its
    /// current attempt.
    lock: [Option<u8>; RESOURCES],
    /// The node's fence counter (`fencelock:fence`); `None` when the key is missing.
    counter: Option<u8>,
    /// The resource's legacy per-resource counter (`fencelock:fence:<resource>`), from before
    /// one counter per node. Only the Lua cross-check sets it; the exhaustive runs start
    /// without.
    legacy: Option<u8>,
    /// Restarted and refusing requests until max-TTL has passed.
    quarantined: bool,
    /// Clients that were acquiring when this node restarted (their validity ends before the
    /// quarantine does).
    acquiring_at_restart: u8,
    /// Lost its counter (restart, eviction) and its seed wait is not over
    /// (`Protocol::seed_wait`): no attempt may seed it yet.
    waiting: bool,
    /// Clients whose round (step 1 or the write-back) was in flight when this node lost its
    /// counter and has not ended yet: the seed wait is longer than any round.
    acquiring_at_loss: u8,
}

/// What the acquisition script answers: granted or not, the largest counter after the call
/// (node counter or the resource's legacy one, 0 if none; the proposal when it was accepted),
/// whether any exists, and whether the proposal was accepted. Granted or refused alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeRead {
    granted: bool,
    value: u8,
    exists: bool,
    accepted: bool,
}

/// How a node judges a proposal (the client's rule, or a mutant's).
#[derive(Debug, Clone, Copy, Default)]
struct AcceptRule {
    equal: bool,
    untrusted: bool,
}

impl AcceptRule {
    fn of(protocol: &Protocol) -> AcceptRule {
        AcceptRule {
            equal: protocol.accept_equal,
            untrusted: protocol.accept_untrusted,
        }
    }
}

/// The node side of step 1 (`ACQUIRE_FENCED`): set the key if free, report the counter, and
/// accept the proposal `proposal` (0: none) if the key was set, a counter exists and the
/// proposal is above it: the node counter becomes the proposal and the legacy key goes, in the
/// same atomic step.
fn node_acquire(node: &mut Node, r: usize, owner: u8, proposal: u8, rule: AcceptRule) -> NodeRead {
    let granted = node.lock[r].is_none();
    if granted {
        node.lock[r] = Some(owner);
    }
    let value = node.counter.unwrap_or(0).max(node.legacy.unwrap_or(0));
    let exists = node.counter.is_some() || node.legacy.is_some();
    let above = proposal > value || (rule.equal && proposal == value && proposal > 0);
    let accepted = granted && (exists || rule.untrusted) && above;
    if accepted {
        node.counter = Some(proposal);
        node.legacy = None;
    }
    NodeRead {
        granted,
        value: if accepted { proposal } else { value },
        exists,
        accepted,
    }
}

/// The node side of step 3 and of seeding (`WRITE_BACK`): if `owner` still holds the key (or
/// without the ownership check), raise the node counter to the token and drop the legacy key.
/// `creates`: a seed or an epoch start's write-back, which may create a missing counter; a
/// plain write-back on a node without any counter writes nothing and is not counted (the Lua
/// answers 3, and starts the node's seed wait: the model's wait starts at the loss itself).
fn node_write_back(
    node: &mut Node,
    r: usize,
    owner: u8,
    token: u8,
    ownership_check: bool,
    creates: bool,
) -> bool {
    if ownership_check && node.lock[r] != Some(owner) {
        return false;
    }
    if !creates && node.counter.is_none() && node.legacy.is_none() {
        return false;
    }
    let raised = node
        .counter
        .unwrap_or(0)
        .max(node.legacy.unwrap_or(0))
        .max(token);
    node.counter = Some(raised);
    node.legacy = None;
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
enum Phase {
    #[default]
    Idle,
    /// Step 1: set-if-absent on every node, reading its counter (and proposing a token).
    Acquiring {
        granted: u8,
        /// Granting nodes whose read is trusted (the counter exists there).
        trusted: u8,
        /// Largest trusted counter read (after the call: the proposal where it was accepted).
        max_read: u8,
        /// Granting nodes that accepted the proposal.
        accepted: u8,
        /// The attempt's proposal (0: none).
        proposal: u8,
    },
    /// Step 3: write the token back to the granting nodes.
    WriteBack {
        token: u8,
        /// Granting nodes with a trusted read (every granting node at an epoch start).
        targets: u8,
        /// Granting nodes with an untrusted read: seeded only once the token is issued.
        seeds: u8,
        sent: u8,
        acked: u8,
        /// Seeds in flight (the mutant that seeds before issue).
        pending: u8,
        /// Its write-backs may create a missing counter: an epoch start's (every granting node
        /// lacks one), or a protocol's without the guard (or a mutant's).
        creates: bool,
    },
    /// The token was issued; the client believes it holds the lock.
    Holding {
        token: u8,
        /// Position of this issue among all issues (real-time order).
        order: u8,
        written: bool,
        /// Plain write-backs still in flight (they create no missing counter).
        pending: u8,
        /// Seeds (and write-backs that may create a counter) still in flight.
        seeding: u8,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
struct Client {
    phase: Phase,
    attempts_left: u8,
    /// Validity left, as far as an honest clock can tell.
    valid: bool,
    /// Step 1's requests still in flight after the attempt decided (the round returned at its
    /// quorum): each may still land, set the key where it is free and judge the proposal, until
    /// the attempt's release (which follows them on each node's connection).
    late: u8,
    /// The proposal those requests carry.
    late_proposal: u8,
    /// The nodes this attempt may seed (`Protocol::seed_wait`): not waiting when it started,
    /// nor at its grant there.
    fresh: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
struct State {
    nodes: [Node; MAX_NODES],
    clients: [Client; MAX_CLIENTS],
    jumps_left: u8,
    restarts_left: u8,
    losses_left: u8,
    evictions_left: u8,
    /// Per resource (P1, P2 and P3 are properties of one resource's grants; tokens of
    /// different resources may tie: issue 27 item 10), the last token its fenced storage
    /// accepted.
    storage_last: [u8; RESOURCES],
    /// Bit t set: token t was issued (model tokens stay below 64).
    issued: [u64; RESOURCES],
    max_issued: [u8; RESOURCES],
    n_issued: [u8; RESOURCES],
    /// Largest issue order among holders whose write the storage accepted.
    max_order_written: [Option<u8>; RESOURCES],
}

impl State {
    /// A fresh node set: no counter anywhere (the first fenced grant starts an epoch).
    fn initial(cfg: &Config) -> Self {
        let mut s = State {
            jumps_left: cfg.faults.clock_jumps,
            restarts_left: cfg.faults.amnesia_restarts,
            losses_left: cfg.faults.total_losses,
            evictions_left: cfg.faults.evictions,
            ..State::default()
        };
        for (c, client) in s.clients[..cfg.clients].iter_mut().enumerate() {
            client.attempts_left = match cfg.attempts_of[c] {
                0 => cfg.attempts,
                n => n,
            };
        }
        if cfg.started {
            for node in &mut s.nodes[..cfg.nodes] {
                node.counter = Some(0);
            }
        }
        s
    }

    fn acquiring(&self, c: usize) -> bool {
        matches!(
            self.clients[c].phase,
            Phase::Acquiring { .. } | Phase::WriteBack { .. }
        )
    }

    fn keys_of(&self, cfg: &Config, c: usize) -> u32 {
        self.keys_among(cfg, c, u8::MAX)
    }

    /// How many of the nodes in `mask` hold client `c`'s key.
    fn keys_among(&self, cfg: &Config, c: usize, mask: u8) -> u32 {
        self.nodes[..cfg.nodes]
            .iter()
            .enumerate()
            .filter(|(i, n)| mask & (1 << i) != 0 && n.lock[cfg.resource(c)] == Some(c as u8))
            .count() as u32
    }

    /// The largest token anyone derived so far that can still matter: issued, on a node, or
    /// held by an attempt. The honest clock's reading is above it.
    fn max_known_token(&self, cfg: &Config) -> u8 {
        let mut m = 0;
        for r in 0..RESOURCES {
            if self.n_issued[r] > 0 {
                m = m.max(self.max_issued[r]);
            }
        }
        for node in &self.nodes[..cfg.nodes] {
            m = m
                .max(node.counter.unwrap_or(0))
                .max(node.legacy.unwrap_or(0));
        }
        for client in &self.clients[..cfg.clients] {
            if let Phase::WriteBack { token, .. } | Phase::Holding { token, .. } = client.phase {
                m = m.max(token);
            }
        }
        m
    }

    /// The clients whose round (step 1 or the write-back) is in flight.
    fn in_rounds(&self, cfg: &Config) -> u8 {
        (0..cfg.clients)
            .filter(|&c| self.acquiring(c))
            .fold(0u8, |m, c| m | 1 << c)
    }

    /// Client `c`'s round ended (decided, or the write-back's step 4): no counted record of it
    /// lands any more.
    fn round_over(&mut self, c: usize) {
        for node in &mut self.nodes {
            node.acquiring_at_loss &= !(1 << c);
        }
    }

    /// Ends client `c`'s attempt: compare-and-delete on every node.
    fn release(&mut self, c: usize) {
        for node in &mut self.nodes {
            for key in &mut node.lock {
                if *key == Some(c as u8) {
                    *key = None;
                }
            }
            node.acquiring_at_restart &= !(1 << c);
            node.acquiring_at_loss &= !(1 << c);
        }
        self.clients[c].phase = Phase::Idle;
        self.clients[c].late = 0;
        self.clients[c].late_proposal = 0;
        self.clients[c].fresh = 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Events and violations
// ---------------------------------------------------------------------------------------------

const P1: u8 = 1;
const P2: u8 = 2;
const P2Q: u8 = 4;
const P3: u8 = 8;
const PROPERTIES: [(u8, &str); 4] = [
    (P1, "P1 uniqueness"),
    (P2, "P2 order"),
    (P2Q, "P2q order for holders of a live quorum"),
    (P3, "P3 storage"),
];

#[derive(Debug, Clone, Copy)]
enum Event {
    /// Client, its proposal (0: none), its resource.
    Start(u8, u8, u8),
    /// Client, node, counter read, whether the read is trusted, whether it accepted the proposal.
    Set(u8, u8, Option<u8>, bool, bool),
    Decide(u8, Result<(u8, bool), &'static str>),
    WriteBack(u8, u8),
    DelayedLands(u8, u8, bool),
    /// Client, node.
    LateSet(u8, u8),
    Finish(u8, Result<u8, &'static str>, u32),
    Write(u8, u8, bool),
    Release(u8),
    Expire(u8, u8, bool),
    Restart(u8),
    TotalLoss,
    QuarantineEnds(u8),
    Evict(u8),
    /// The longest TTL in use has passed since the node lost its counter.
    SeedWaitEnds(u8),
}

fn client_name(c: u8) -> char {
    (b'A' + c) as char
}

fn resource_name(r: u8) -> char {
    [b'X', b'Z'][usize::from(r)] as char
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Event::Start(c, 0, 0) => write!(f, "{} starts an attempt", client_name(c)),
            Event::Start(c, p, 0) => {
                write!(f, "{} starts an attempt proposing {p}", client_name(c))
            }
            Event::Start(c, p, r) => write!(
                f,
                "{} starts an attempt on {}{}",
                client_name(c),
                resource_name(r),
                if p == 0 {
                    String::new()
                } else {
                    format!(" proposing {p}")
                }
            ),
            Event::Set(c, n, counter, trusted, accepted) => write!(
                f,
                "{} SET NX on n{n}: granted, counter {}{}{}",
                client_name(c),
                counter.map_or("missing".to_owned(), |v| v.to_string()),
                if trusted { "" } else { " (untrusted)" },
                if accepted { ", proposal ACCEPTED" } else { "" }
            ),
            Event::Decide(c, Ok((t, epoch))) => write!(
                f,
                "{} has a quorum: token {t}{}",
                client_name(c),
                if epoch { " (NEW EPOCH)" } else { "" }
            ),
            Event::Decide(c, Err(why)) => write!(f, "{} gives up: {why}", client_name(c)),
            Event::WriteBack(c, n) => write!(f, "{} write-back on n{n}: ok", client_name(c)),
            Event::DelayedLands(c, n, applied) => write!(
                f,
                "{}'s delayed write-back or seed lands on n{n}: {}",
                client_name(c),
                if applied { "applied" } else { "not owner" }
            ),
            Event::LateSet(c, n) => {
                write!(f, "{}'s late SET NX lands on n{n}: granted", client_name(c))
            }
            Event::Finish(c, Ok(t), live) => write!(
                f,
                "{} is ISSUED token {t} (its key is live on {live} nodes)",
                client_name(c),
            ),
            Event::Finish(c, Err(why), _) => write!(f, "{} fails: {why}", client_name(c)),
            Event::Write(c, t, ok) => write!(
                f,
                "{} writes to storage with token {t}: {}",
                client_name(c),
                if ok { "ACCEPTED" } else { "rejected" }
            ),
            Event::Release(c) => write!(f, "{} releases", client_name(c)),
            Event::Expire(n, o, false) => {
                write!(f, "{}'s key on n{n} expires (TTL)", client_name(o))
            }
            Event::Expire(n, o, true) => write!(
                f,
                "n{n}'s clock jumps: {}'s key expires early",
                client_name(o)
            ),
            Event::Restart(n) => write!(f, "n{n} crashes and restarts WITHOUT persistence"),
            Event::TotalLoss => write!(f, "EVERY node restarts without persistence"),
            Event::QuarantineEnds(n) => write!(f, "n{n} ends its quarantine (max-TTL passed)"),
            Event::Evict(n) => write!(f, "n{n} evicts the counter key"),
            Event::SeedWaitEnds(n) => write!(
                f,
                "n{n}'s seed wait ends (every round in flight when it lost its counter is over)"
            ),
        }
    }
}

fn describe(cfg: &Config, s: &State) -> String {
    let mut out = String::new();
    let used = cfg.resources_used();
    for (i, n) in s.nodes[..cfg.nodes].iter().enumerate() {
        let lock: String = n.lock[..used]
            .iter()
            .map(|l| l.map_or('-', client_name))
            .collect();
        let counter = n.counter.map_or("none".to_owned(), |v| v.to_string());
        let flags = match (n.quarantined, n.waiting) {
            (true, true) => " quarantined waiting",
            (true, false) => " quarantined",
            (false, true) => " waiting",
            (false, false) => "",
        };
        out.push_str(&format!("n{i}[{lock} c={counter}{flags}] "));
    }
    let storage: Vec<String> = s.storage_last[..used].iter().map(u8::to_string).collect();
    out.push_str(&format!("storage={}", storage.join("/")));
    out
}

// ---------------------------------------------------------------------------------------------
// Transitions
// ---------------------------------------------------------------------------------------------

type Successor = (Event, State, u8);

fn successors(cfg: &Config, s: &State, out: &mut Vec<Successor>) {
    out.clear();
    for c in 0..cfg.clients {
        client_steps(cfg, s, c, out);
    }
    for i in 0..cfg.nodes {
        node_faults(cfg, s, i, out);
    }
    if s.losses_left > 0 {
        let mut n = s.clone();
        n.losses_left -= 1;
        let fresh = restarted(cfg, s);
        for node in &mut n.nodes[..cfg.nodes] {
            *node = fresh;
        }
        out.push((Event::TotalLoss, n, 0));
    }
}

fn client_steps(cfg: &Config, s: &State, c: usize, out: &mut Vec<Successor>) {
    let cu = c as u8;
    let r = cfg.resource(c);
    let client = s.clients[c];
    match client.phase {
        Phase::Idle => {
            if client.attempts_left > 0 {
                // The nodes whose seed wait is over now (every node without the seed wait).
                let fresh = (0..cfg.nodes)
                    .filter(|&i| !s.nodes[i].waiting)
                    .fold(0u8, |m, i| m | 1 << i);
                for proposal in proposals(cfg, s) {
                    let mut n = s.clone();
                    n.clients[c] = Client {
                        phase: Phase::Acquiring {
                            granted: 0,
                            trusted: 0,
                            max_read: 0,
                            accepted: 0,
                            proposal,
                        },
                        attempts_left: client.attempts_left - 1,
                        valid: true,
                        late: 0,
                        late_proposal: 0,
                        fresh,
                    };
                    out.push((Event::Start(cu, proposal, r as u8), n, 0));
                }
            }
        }
        Phase::Acquiring {
            granted,
            trusted,
            max_read,
            accepted,
            proposal,
        } => {
            // The client may stop waiting at any moment: every node not yet granted timed out.
            // A refusal (key held, quarantine) changes nothing, so it is a timeout too and needs
            // no transition of its own.
            decide(cfg, s, c, client.phase, out);
            for i in 0..cfg.nodes {
                let bit = 1u8 << i;
                let node = s.nodes[i];
                if granted & bit != 0 || node.quarantined || node.lock[r].is_some() {
                    continue;
                }
                let mut n = s.clone();
                let rule = AcceptRule::of(&cfg.protocol);
                let read = node_acquire(&mut n.nodes[i], r, cu, proposal, rule);
                if node.waiting {
                    n.clients[c].fresh &= !bit;
                }
                let is_trusted = !cfg.protocol.guard || read.exists;
                n.clients[c].phase = Phase::Acquiring {
                    granted: granted | bit,
                    trusted: if is_trusted { trusted | bit } else { trusted },
                    max_read: if is_trusted {
                        max_read.max(read.value)
                    } else {
                        max_read
                    },
                    accepted: if read.accepted {
                        accepted | bit
                    } else {
                        accepted
                    },
                    proposal,
                };
                let event = Event::Set(cu, i as u8, node.counter, is_trusted, read.accepted);
                out.push((event, n, 0));
            }
        }
        Phase::WriteBack {
            token,
            targets,
            seeds,
            sent,
            acked,
            pending,
            creates,
        } => {
            land_delayed(cfg, s, c, out);
            land_late(cfg, s, c, out);
            // Step 4 may run at any moment: targets not yet answered timed out, and with
            // delayed write-backs their requests stay in flight and may land later.
            let unanswered = if cfg.faults.delayed_write_backs {
                targets & !sent
            } else {
                0
            };
            let (plain, seeding) = if creates {
                (0, seeds | pending | unanswered)
            } else {
                (unanswered, seeds | pending)
            };
            finish(cfg, s, c, token, acked, plain, seeding, out);
            for i in 0..cfg.nodes {
                let bit = 1u8 << i;
                if targets & bit == 0 || sent & bit != 0 || s.nodes[i].quarantined {
                    continue;
                }
                let mut n = s.clone();
                // "Not owner" changes nothing (the key cannot come back), so only the applied
                // write-back is a transition; the refused one is a timeout.
                let check = cfg.protocol.ownership_check;
                if node_write_back(&mut n.nodes[i], r, cu, token, check, creates) {
                    n.clients[c].phase = Phase::WriteBack {
                        token,
                        targets,
                        seeds,
                        sent: sent | bit,
                        acked: acked | bit,
                        pending,
                        creates,
                    };
                    out.push((Event::WriteBack(cu, i as u8), n, 0));
                }
            }
        }
        Phase::Holding {
            token,
            order,
            written,
            pending,
            seeding,
        } => {
            land_delayed(cfg, s, c, out);
            land_late(cfg, s, c, out);
            if !written {
                let mut n = s.clone();
                let accepted = token >= s.storage_last[r];
                let mut violations = 0;
                if accepted {
                    if s.max_order_written[r].is_some_and(|m| m > order) {
                        violations |= P3;
                    }
                    n.storage_last[r] = token;
                    n.max_order_written[r] =
                        Some(s.max_order_written[r].map_or(order, |m| m.max(order)));
                }
                n.clients[c].phase = Phase::Holding {
                    token,
                    order,
                    written: true,
                    pending,
                    seeding,
                };
                out.push((Event::Write(cu, token, accepted), n, violations));
            }
            let mut n = s.clone();
            n.release(c);
            out.push((Event::Release(cu), n, 0));
        }
    }
}

/// A step 1 request of client `c` that was still in flight when its round returned lands on a
/// free node: it sets the key (and judges the proposal), as any grant. (Where the node is held it
/// is refused and changes nothing; a request that never lands is one whose bit stays until the
/// release, so neither needs a transition.)
fn land_late(cfg: &Config, s: &State, c: usize, out: &mut Vec<Successor>) {
    let client = s.clients[c];
    for i in 0..cfg.nodes {
        let bit = 1u8 << i;
        let node = s.nodes[i];
        if client.late & bit == 0 || node.quarantined || node.lock[cfg.resource(c)].is_some() {
            continue;
        }
        let mut n = s.clone();
        n.clients[c].late &= !bit;
        if n.clients[c].late == 0 {
            n.clients[c].late_proposal = 0;
        }
        let rule = AcceptRule::of(&cfg.protocol);
        node_acquire(
            &mut n.nodes[i],
            cfg.resource(c),
            c as u8,
            client.late_proposal,
            rule,
        );
        out.push((Event::LateSet(c as u8, i as u8), n, 0));
    }
}

/// A write-back or seed of client `c` still in flight lands: a plain one (`pending`) creates no
/// missing counter, a seed (or an epoch start's write-back: `seeding`, and in the write-back
/// phase the mutant's early seeds) may.
fn land_delayed(cfg: &Config, s: &State, c: usize, out: &mut Vec<Successor>) {
    let (token, plain, seeding) = match s.clients[c].phase {
        Phase::WriteBack { token, pending, .. } => (token, 0, pending),
        Phase::Holding {
            token,
            pending,
            seeding,
            ..
        } => (token, pending, seeding),
        _ => unreachable!("only live attempts have write-backs in flight"),
    };
    for i in 0..cfg.nodes {
        let bit = 1u8 << i;
        if (plain | seeding) & bit == 0 {
            continue;
        }
        let mut n = s.clone();
        // A quarantined node drops the request; the ownership check fails there anyway.
        let applied = !s.nodes[i].quarantined
            && node_write_back(
                &mut n.nodes[i],
                cfg.resource(c),
                c as u8,
                token,
                cfg.protocol.ownership_check,
                seeding & bit != 0,
            );
        match &mut n.clients[c].phase {
            Phase::WriteBack { pending, .. } => *pending &= !bit,
            Phase::Holding {
                pending, seeding, ..
            } => {
                *pending &= !bit;
                *seeding &= !bit;
            }
            _ => unreachable!(),
        }
        out.push((Event::DelayedLands(c as u8, i as u8, applied), n, 0));
    }
}

/// The proposals client attempts may make now (see [`Proposals`]); just 0 without proposals.
fn proposals(cfg: &Config, s: &State) -> Vec<u8> {
    if !cfg.protocol.propose {
        return vec![0];
    }
    let m = s.max_known_token(cfg);
    let mut all: Vec<u8> = match cfg.protocol.proposals {
        Proposals::All => (0..=m + 2).collect(),
        Proposals::Few => vec![0, m, m + 1],
    };
    all.retain(|&p| u64::from(p) < TOKEN_LIMIT);
    all.dedup();
    all
}

/// Step 2: quorum check and token derivation, with the client's own `fencing::derive`; or, when
/// a quorum accepted the proposal, the one-round issue (`fencing::one_round`).
fn decide(cfg: &Config, s: &State, c: usize, phase: Phase, out: &mut Vec<Successor>) {
    let Phase::Acquiring {
        granted,
        trusted,
        max_read,
        accepted,
        proposal,
    } = phase
    else {
        unreachable!("decide runs on an acquiring attempt");
    };
    let q = cfg.quorum();
    let cu = c as u8;
    let mut n = s.clone();
    n.round_over(c);
    // A successful decision leaves the requests to the other nodes in flight.
    let late = if cfg.faults.late_sets {
        (0..cfg.nodes)
            .filter(|&i| granted & (1 << i) == 0 && !s.nodes[i].quarantined)
            .fold(0u8, |m, i| m | 1 << i)
    } else {
        0
    };
    let keep_late = |n: &mut State| {
        n.clients[c].late = late;
        n.clients[c].late_proposal = if late == 0 { 0 } else { proposal };
    };
    let one = one_round(
        u64::from(proposal),
        accepted.count_ones() as usize,
        q as usize,
    );
    if granted.count_ones() >= q && one.is_some() {
        // Issued without a write-back (validity checked as in step 4); the granting nodes that
        // have no counter are seeded once it is issued, as after two rounds.
        let live = s.keys_of(cfg, c);
        if !s.clients[c].valid {
            n.release(c);
            out.push((Event::Finish(cu, Err("validity expired"), live), n, 0));
        } else {
            // Accepted on a quorum: the mutants that accept untrusted proposals seed nothing
            // more than the client would (granting nodes without a counter).
            let seeds = granted & !trusted & !accepted & s.clients[c].fresh;
            let violations = issue(cfg, &mut n, c, proposal, 0, seeds, accepted);
            keep_late(&mut n);
            out.push((Event::Finish(cu, Ok(proposal), live), n, violations));
        }
        return;
    }
    // No validity check here: the client (`Client::attempt`) checks validity once, after the
    // write-back (step 4, `finish`), so an attempt whose validity ran out still writes back.
    let result: Result<(u8, bool), &'static str> = if granted.count_ones() < q {
        Err("no quorum")
    } else if !cfg.protocol.guard {
        // Before the guard: every read counts, a missing counter as 0.
        next_token([u64::from(max_read)])
            .filter(|&t| t < TOKEN_LIMIT)
            .map(|t| (t as u8, false))
            .ok_or("no token")
    } else {
        let reads = (0..cfg.nodes).filter(|i| granted & (1 << i) != 0).map(|i| {
            if trusted & (1 << i) != 0 {
                CounterRead::Trusted(u64::from(max_read))
            } else {
                CounterRead::Untrusted
            }
        });
        let epoch = if cfg.protocol.epoch_on_quorum {
            trusted == 0
        } else {
            let granting = (0..cfg.nodes)
                .filter(|i| granted & (1 << i) != 0)
                .map(|i| trusted & (1 << i) != 0);
            is_epoch_start(granting, cfg.nodes)
        };
        let quorum = if cfg.protocol.trust_one {
            1
        } else {
            q as usize
        };
        match derive(reads, quorum, epoch) {
            Derivation::Token(t) if t < TOKEN_LIMIT => Ok((t as u8, false)),
            Derivation::Token(_) | Derivation::Exhausted => Err("no token"),
            Derivation::TooFewTrusted { .. } => Err("too few trusted reads"),
            Derivation::EpochStart => {
                let t = match cfg.faults.clock {
                    Clock::Honest => s.max_known_token(cfg) + 1,
                    Clock::Behind => 1,
                };
                if u64::from(t) < TOKEN_LIMIT {
                    Ok((t, true))
                } else {
                    Err("no token")
                }
            }
        }
    };
    match result {
        Err(_) => n.release(c),
        Ok((token, _)) if !cfg.protocol.write_back => {
            // The variant without write-back issues step 2's token directly.
            let violations = issue(cfg, &mut n, c, token, 0, 0, granted);
            keep_late(&mut n);
            out.push((
                Event::Finish(cu, Ok(token), s.keys_of(cfg, c)),
                n,
                violations,
            ));
            return;
        }
        Ok((token, epoch)) => {
            let targets = if epoch || !cfg.protocol.guard || cfg.protocol.trust_one {
                granted
            } else {
                trusted
            };
            let seeds = granted & !targets & s.clients[c].fresh;
            // The mutant seeds at once: its seeds are in flight during the write-back.
            let (seeds, pending) = if cfg.protocol.seed_before_issue {
                (0, seeds)
            } else {
                (seeds, 0)
            };
            // A plain write-back (to nodes whose read was trusted) creates no missing counter:
            // an epoch start's may (every granting node lacks one), and so may the write-back of
            // the protocols that send it to untrusted nodes too (without the guard, one trusted
            // read enough), and the mutant's.
            let creates = epoch
                || !cfg.protocol.guard
                || cfg.protocol.trust_one
                || cfg.protocol.write_back_creates;
            n.clients[c].phase = Phase::WriteBack {
                token,
                targets,
                seeds,
                sent: 0,
                acked: 0,
                pending,
                creates,
            };
            keep_late(&mut n);
        }
    }
    out.push((Event::Decide(cu, result), n, 0));
}

/// Step 4: the token counts only if a quorum acknowledged the write-back and validity is left.
#[allow(clippy::too_many_arguments)]
fn finish(
    cfg: &Config,
    s: &State,
    c: usize,
    token: u8,
    acked: u8,
    pending: u8,
    seeding: u8,
    out: &mut Vec<Successor>,
) {
    let cu = c as u8;
    let live = s.keys_of(cfg, c);
    let mut n = s.clone();
    n.round_over(c);
    if acked.count_ones() < cfg.quorum() {
        n.release(c);
        out.push((
            Event::Finish(cu, Err("write-back quorum missing"), live),
            n,
            0,
        ));
    } else if !s.clients[c].valid {
        n.release(c);
        out.push((Event::Finish(cu, Err("validity expired"), live), n, 0));
    } else {
        // The untrusted granting nodes are seeded now, with a fencing token, at any later
        // moment while the key is still ours (the same ownership-checked script).
        let violations = issue(cfg, &mut n, c, token, pending, seeding, acked);
        out.push((Event::Finish(cu, Ok(token), live), n, violations));
    }
}

/// Issues `token` to client `c`; `pending` and `seeding`: its plain write-backs and its seeds
/// still in flight; `recorded`: the nodes that recorded it (took its write-back, or accepted it
/// in one round), for P2q.
fn issue(
    cfg: &Config,
    s: &mut State,
    c: usize,
    token: u8,
    pending: u8,
    seeding: u8,
    recorded: u8,
) -> u8 {
    let mut violations = 0;
    let r = cfg.resource(c);
    if s.issued[r] & (1u64 << token) != 0 {
        violations |= P1;
    }
    if s.n_issued[r] > 0 && token <= s.max_issued[r] {
        violations |= P2;
        if s.keys_among(cfg, c, recorded) >= cfg.quorum() {
            violations |= P2Q;
        }
    }
    s.issued[r] |= 1u64 << token;
    s.max_issued[r] = s.max_issued[r].max(token);
    s.clients[c].phase = Phase::Holding {
        token,
        order: s.n_issued[r],
        written: false,
        pending,
        seeding,
    };
    s.n_issued[r] += 1;
    violations
}

/// A node that restarted without its data: no key, no counter, in quarantine if the clients
/// keep one (noting who was acquiring then).
fn restarted(cfg: &Config, s: &State) -> Node {
    let acquiring = (0..cfg.clients)
        .filter(|&c| s.acquiring(c))
        .fold(0u8, |m, c| m | 1 << c);
    Node {
        quarantined: cfg.protocol.quarantine,
        acquiring_at_restart: if cfg.protocol.quarantine {
            acquiring
        } else {
            0
        },
        waiting: cfg.protocol.seed_wait,
        acquiring_at_loss: if cfg.protocol.seed_wait {
            s.in_rounds(cfg)
        } else {
            0
        },
        ..Node::default()
    }
}

fn node_faults(cfg: &Config, s: &State, i: usize, out: &mut Vec<Successor>) {
    let node = s.nodes[i];
    let iu = i as u8;
    for r in 0..RESOURCES {
        let Some(owner) = node.lock[r] else { continue };
        let o = owner as usize;
        // An honest expiry: the TTL ran out, so the owner's validity did too.
        let mut n = s.clone();
        n.nodes[i].lock[r] = None;
        if s.acquiring(o) {
            n.clients[o].valid = false;
        }
        out.push((Event::Expire(iu, owner, false), n, 0));
        // A clock jump differs from an honest expiry only while the owner still checks validity.
        if s.jumps_left > 0 && s.acquiring(o) && s.clients[o].valid {
            let mut n = s.clone();
            n.nodes[i].lock[r] = None;
            n.jumps_left -= 1;
            out.push((Event::Expire(iu, owner, true), n, 0));
        }
    }
    if s.restarts_left > 0 && !node.quarantined {
        let mut n = s.clone();
        n.restarts_left -= 1;
        n.nodes[i] = restarted(cfg, s);
        out.push((Event::Restart(iu), n, 0));
    }
    if node.quarantined {
        // Max-TTL after the restart: every attempt that was acquiring then is out of validity.
        let mut n = s.clone();
        n.nodes[i].quarantined = false;
        n.nodes[i].acquiring_at_restart = 0;
        for c in 0..cfg.clients {
            if node.acquiring_at_restart & (1 << c) != 0 && s.acquiring(c) {
                n.clients[c].valid = false;
            }
        }
        out.push((Event::QuarantineEnds(iu), n, 0));
    }
    if s.evictions_left > 0 && node.counter.is_some() {
        let mut n = s.clone();
        n.evictions_left -= 1;
        n.nodes[i].counter = None;
        if cfg.protocol.seed_wait {
            n.nodes[i].waiting = true;
            n.nodes[i].acquiring_at_loss = s.in_rounds(cfg);
        }
        out.push((Event::Evict(iu), n, 0));
    }
    if node.waiting && node.acquiring_at_loss == 0 {
        // The wait (a TTL) is longer than any round (a node timeout): it ends once every round
        // in flight at the loss is over, at any moment after that.
        let mut n = s.clone();
        n.nodes[i].waiting = false;
        out.push((Event::SeedWaitEnds(iu), n, 0));
    }
}
// ---------------------------------------------------------------------------------------------
// Exhaustive search
// ---------------------------------------------------------------------------------------------

/// FNV-1a: the states are small and the default SipHash dominates the run time in debug builds.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

struct Counterexample {
    property: &'static str,
    steps: Vec<String>,
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "counterexample to {} ({} steps):",
            self.property,
            self.steps.len()
        )?;
        for (k, step) in self.steps.iter().enumerate() {
            writeln!(f, "  {:>2}. {step}", k + 1)?;
        }
        Ok(())
    }
}

struct Outcome {
    states: usize,
    transitions: usize,
    issues: usize,
    /// Shortest counterexample per violated property.
    found: Vec<Counterexample>,
    /// The search stopped at the counterexamples it was asked for (`explore_until`).
    stopped: bool,
}

impl Outcome {
    fn violated(&self, property: &str) -> bool {
        self.found.iter().any(|c| c.property == property)
    }

    fn get(&self, property: &str) -> &Counterexample {
        self.found
            .iter()
            .find(|c| c.property == property)
            .unwrap_or_else(|| panic!("no counterexample to {property}"))
    }
}

// Symmetry reduction: nodes are interchangeable, and so are clients (same protocol, same
// number of attempts). Each state is stored in a canonical form: for every permutation of the
// clients, the nodes are sorted by everything that distinguishes them; the least result wins.

fn client_permutations(clients: usize) -> Vec<Vec<usize>> {
    let mut all: Vec<Vec<usize>> = vec![vec![]];
    for _ in 0..clients {
        let mut longer = Vec::new();
        for p in &all {
            for c in (0..clients).filter(|c| !p.contains(c)) {
                let mut q = p.clone();
                q.push(c);
                longer.push(q);
            }
        }
        all = longer;
    }
    all
}

/// How many node masks a client has at most ([`masks`]).
const MASKS: usize = 7;

/// Every node mask of a client: its phase's, then its late requests (unused slots 0).
fn masks(client: &Client) -> [u8; MASKS] {
    let mut m = [0u8; MASKS];
    match client.phase {
        Phase::Idle => {}
        Phase::Acquiring {
            granted,
            trusted,
            accepted,
            ..
        } => m[..3].copy_from_slice(&[granted, trusted, accepted]),
        Phase::WriteBack {
            targets,
            seeds,
            sent,
            acked,
            pending,
            ..
        } => m[..5].copy_from_slice(&[targets, seeds, sent, acked, pending]),
        Phase::Holding {
            pending, seeding, ..
        } => m[..2].copy_from_slice(&[pending, seeding]),
    }
    m[MASKS - 2] = client.fresh;
    m[MASKS - 1] = client.late;
    m
}

/// Writes back the masks [`masks`] read.
fn set_masks(client: &mut Client, m: [u8; MASKS]) {
    match &mut client.phase {
        Phase::Idle => {}
        Phase::Acquiring {
            granted,
            trusted,
            accepted,
            ..
        } => [*granted, *trusted, *accepted] = [m[0], m[1], m[2]],
        Phase::WriteBack {
            targets,
            seeds,
            sent,
            acked,
            pending,
            ..
        } => [*targets, *seeds, *sent, *acked, *pending] = [m[0], m[1], m[2], m[3], m[4]],
        Phase::Holding {
            pending, seeding, ..
        } => [*pending, *seeding] = [m[0], m[1]],
    }
    client.fresh = m[MASKS - 2];
    client.late = m[MASKS - 1];
}

fn permute_bits(mask: u8, order: &[usize]) -> u8 {
    order
        .iter()
        .enumerate()
        .fold(0, |m, (new, &old)| m | (((mask >> old) & 1) << new))
}

/// `order[k]` is the old index of the client placed at `k`.
fn permute_clients(cfg: &Config, s: &State, order: &[usize]) -> State {
    let mut n = s.clone();
    let mut inverse = [0u8; MAX_CLIENTS];
    for (new, &old) in order.iter().enumerate() {
        n.clients[new] = s.clients[old];
        inverse[old] = new as u8;
    }
    for node in &mut n.nodes[..cfg.nodes] {
        for key in &mut node.lock {
            *key = key.map(|o| inverse[o as usize]);
        }
        node.acquiring_at_restart = permute_bits(node.acquiring_at_restart, order);
        node.acquiring_at_loss = permute_bits(node.acquiring_at_loss, order);
    }
    n
}

fn sort_nodes(cfg: &Config, s: &mut State) {
    let all: [[u8; MASKS]; MAX_CLIENTS] = std::array::from_fn(|c| masks(&s.clients[c]));
    let mut keyed = [(Node::default(), 0u64, 0usize); MAX_NODES];
    for (i, key) in keyed.iter_mut().enumerate().take(cfg.nodes) {
        let mut membership = 0u64;
        for (c, ms) in all.iter().enumerate().take(cfg.clients) {
            for (k, mask) in ms.iter().enumerate() {
                membership |= u64::from((mask >> i) & 1) << (c * MASKS + k);
            }
        }
        *key = (s.nodes[i], membership, i);
    }
    keyed[..cfg.nodes].sort_unstable();
    let mut order = [0usize; MAX_NODES];
    for (new, key) in keyed[..cfg.nodes].iter().enumerate() {
        s.nodes[new] = key.0;
        order[new] = key.2;
    }
    for (c, ms) in all.iter().enumerate().take(cfg.clients) {
        let permuted = ms.map(|mask| permute_bits(mask, &order[..cfg.nodes]));
        set_masks(&mut s.clients[c], permuted);
    }
}

fn canonical(cfg: &Config, perms: &[Vec<usize>], s: &State) -> State {
    perms
        .iter()
        .map(|order| {
            let mut n = permute_clients(cfg, s, order);
            sort_nodes(cfg, &mut n);
            n
        })
        .min()
        .expect("at least the identity permutation")
}

fn explore(cfg: &Config) -> Outcome {
    explore_until(cfg, 0)
}

/// As [`explore`], but stops once a shortest counterexample to each property in `wanted` (a mask
/// of `P1`..`P3`; 0: none) was found: the mutants' checks need no more.
fn explore_until(cfg: &Config, wanted: u8) -> Outcome {
    let mut perms = client_permutations(cfg.clients);
    // Only clients of the same resource are interchangeable.
    perms.retain(|p| {
        p.iter()
            .enumerate()
            .all(|(new, &old)| cfg.resources[new] == cfg.resources[old])
    });
    let init = canonical(cfg, &perms, &State::initial(cfg));
    // The visited set holds 64-bit fingerprints of the canonical states, not the states (as TLC
    // does): a state costs about 25 bytes instead of about 300, which lets the two-attempt
    // restart cells fit (issue 27). Two distinct states with one fingerprint would make the
    // second look visited and leave its successors unexplored; with n states the chance that
    // any such pair exists is about n^2 / 2^65 (printed by `report`). Only the breadth-first
    // frontier is kept whole; a counterexample is replayed from the initial state through the
    // recorded fingerprints of its ancestors (`parent`, `prints`).
    let mut seen: FingerprintSet = FingerprintSet::default();
    let first = fingerprint(&init);
    seen.insert(first);
    let mut prints: Vec<u64> = vec![first];
    let mut parent: Vec<u32> = vec![u32::MAX];
    let mut level: Vec<(u32, State)> = vec![(0, init)];
    let mut found: Vec<(u8, u32, u64)> = Vec::new();
    let mut seen_props = 0u8;
    let mut transitions = 0;
    let mut issues = 0;
    let mut buf = Vec::new();
    let mut stopped = false;
    'search: while !level.is_empty() {
        let mut next_level = Vec::new();
        for (id, s) in level.drain(..) {
            successors(cfg, &s, &mut buf);
            for (event, next, violations) in buf.drain(..) {
                transitions += 1;
                if matches!(event, Event::Finish(_, Ok(_), _)) {
                    issues += 1;
                }
                let next = canonical(cfg, &perms, &next);
                let print = fingerprint(&next);
                for (p, _) in PROPERTIES {
                    if violations & p != 0 && seen_props & p == 0 {
                        seen_props |= p;
                        found.push((p, id, print));
                    }
                }
                if seen.insert(print) {
                    let fresh = u32::try_from(prints.len()).expect("fewer than 2^32 states");
                    prints.push(print);
                    parent.push(id);
                    next_level.push((fresh, next));
                }
            }
            if wanted != 0 && seen_props & wanted == wanted {
                stopped = true;
                break 'search;
            }
        }
        level = next_level;
    }
    let found = found
        .into_iter()
        .map(|(p, from, last)| {
            let mut path = vec![last];
            let mut at = from;
            while at != 0 {
                path.push(prints[at as usize]);
                at = parent[at as usize];
            }
            path.reverse();
            Counterexample {
                property: PROPERTIES
                    .iter()
                    .find(|(q, _)| *q == p)
                    .map(|(_, n)| *n)
                    .unwrap(),
                steps: replay(cfg, &perms, &path, p),
            }
        })
        .collect();
    Outcome {
        states: prints.len(),
        transitions,
        issues,
        found,
        stopped,
    }
}

/// A 64-bit fingerprint of a canonical state: SipHash-1-3 with fixed keys (std's
/// `DefaultHasher::new`), whose output is uniform enough for the n^2 / 2^65 estimate.
fn fingerprint(s: &State) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// Fingerprints are already uniform: the set uses them as their own hash.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 fingerprints are hashed")
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type FingerprintSet = HashSet<u64, BuildHasherDefault<Identity>>;

/// Replays a path of fingerprints of canonical states from the initial state, rendering each
/// step with the nodes after it. The last step is the one that violates `property`.
fn replay(cfg: &Config, perms: &[Vec<usize>], path: &[u64], property: u8) -> Vec<String> {
    let mut s = State::initial(cfg);
    let mut buf = Vec::new();
    let mut steps = Vec::new();
    for (k, wanted) in path.iter().enumerate() {
        let last = k + 1 == path.len();
        successors(cfg, &s, &mut buf);
        let (event, next, _) = buf
            .drain(..)
            .find(|(_, n, v)| {
                (!last || v & property != 0) && fingerprint(&canonical(cfg, perms, n)) == *wanted
            })
            .expect("a recorded step replays");
        steps.push(format!(
            "{:<62} | {}",
            event.to_string(),
            describe(cfg, &next)
        ));
        s = next;
    }
    steps
}

/// Replays recorded events (from a random walk).
fn replay_events(cfg: &Config, events: &[Event]) -> Vec<String> {
    let mut s = State::initial(cfg);
    let mut buf = Vec::new();
    let mut steps = Vec::new();
    for event in events {
        successors(cfg, &s, &mut buf);
        let wanted = event.to_string();
        let (_, next, _) = buf
            .drain(..)
            .find(|(e, _, _)| e.to_string() == wanted)
            .expect("a recorded event replays");
        steps.push(format!("{wanted:<62} | {}", describe(cfg, &next)));
        s = next;
    }
    steps
}

fn report(name: &str, cfg: &Config, outcome: &Outcome) {
    println!(
        "{name}: {} nodes x {} clients x {} attempts, {}, faults {:?}: {} states, \
         {} transitions, {} issues explored (fingerprint collision chance below {:.1e}){}",
        cfg.nodes,
        cfg.clients,
        cfg.attempts,
        if cfg.protocol.propose {
            format!("one round ({:?} proposals)", cfg.protocol.proposals)
        } else {
            "two rounds".to_string()
        },
        cfg.faults,
        outcome.states,
        outcome.transitions,
        outcome.issues,
        collision_bound(outcome.states),
        if outcome.stopped {
            " (stopped at the counterexamples sought)"
        } else {
            ""
        }
    );
    for (_, p) in PROPERTIES {
        let verdict = if outcome.violated(p) {
            "VIOLATED"
        } else {
            "holds"
        };
        println!("  {p}: {verdict}");
    }
}

/// The chance that two of `states` distinct states share a 64-bit fingerprint (the birthday
/// bound n^2 / 2^65): at 10^8 states, 2.7e-4.
fn collision_bound(states: usize) -> f64 {
    let n = states as f64;
    n * n / 2f64.powi(65)
}

fn cfg(nodes: usize, clients: usize, attempts: u8, protocol: Protocol, faults: Faults) -> Config {
    Config {
        nodes,
        clients,
        attempts,
        protocol,
        faults,
        started: false,
        resources: [0; MAX_CLIENTS],
        attempts_of: [0; MAX_CLIENTS],
    }
}

fn assert_holds(outcome: &Outcome, properties: &[&str]) {
    for p in properties {
        if outcome.violated(p) {
            panic!("{}", outcome.get(p));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random simulation
// ---------------------------------------------------------------------------------------------

/// SplitMix64: deterministic per seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random walks to quiescence; returns the first violation with its trace, if any.
fn simulate(cfg: &Config, seeds: std::ops::Range<u64>) -> (usize, Vec<Counterexample>) {
    let mut steps_total = 0;
    let mut found = Vec::new();
    let mut seen = 0u8;
    let mut buf = Vec::new();
    for seed in seeds {
        let mut rng = Rng(seed);
        let mut s = State::initial(cfg);
        let mut events = Vec::new();
        loop {
            successors(cfg, &s, &mut buf);
            if buf.is_empty() {
                break;
            }
            // Faults are many (one per key and node); pick client steps more often so that
            // attempts finish and the walk reaches issues and writes.
            let client_moves = buf
                .iter()
                .filter(|(e, _, _)| {
                    !matches!(
                        e,
                        Event::Expire(..)
                            | Event::Restart(_)
                            | Event::Evict(_)
                            | Event::TotalLoss
                            | Event::SeedWaitEnds(_)
                    )
                })
                .count();
            let pick = if client_moves > 0 && rng.below(4) != 0 {
                let k = rng.below(client_moves);
                buf.iter()
                    .enumerate()
                    .filter(|(_, (e, _, _))| {
                        !matches!(
                            e,
                            Event::Expire(..)
                                | Event::Restart(_)
                                | Event::Evict(_)
                                | Event::TotalLoss
                                | Event::SeedWaitEnds(_)
                        )
                    })
                    .nth(k)
                    .map(|(i, _)| i)
                    .unwrap()
            } else {
                rng.below(buf.len())
            };
            let (event, next, violations) = buf.swap_remove(pick);
            events.push(event);
            steps_total += 1;
            for (p, name) in PROPERTIES {
                if violations & p != 0 && seen & p == 0 {
                    seen |= p;
                    found.push(Counterexample {
                        property: name,
                        steps: replay_events(cfg, &events),
                    });
                }
            }
            s = next;
        }
    }
    (steps_total, found)
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

const ALL: [&str; 4] = [
    "P1 uniqueness",
    "P2 order",
    "P2q order for holders of a live quorum",
    "P3 storage",
];

fn faults(clock_jumps: u8, amnesia_restarts: u8, total_losses: u8, evictions: u8) -> Faults {
    Faults {
        clock_jumps,
        amnesia_restarts,
        total_losses,
        evictions,
        ..PAUSES_ONLY
    }
}

fn behind(f: Faults) -> Faults {
    Faults {
        clock: Clock::Behind,
        ..f
    }
}

/// The configurations a fault test checks, two clients each: the protocol as the client runs it
/// (the one-round path, falling back to two rounds) with one attempt per client, proposing every
/// token in the optimised build ([`Proposals::All`]) and three in the debug build
/// ([`Proposals::Few`]); and with [`FULL`] the two rounds alone ([`TWO_ROUNDS`], what
/// an attempt falls back to) with two attempts per client, the bound these tests had before the
/// one-round path. (Two attempts per client with proposals and late requests passed ten million
/// states with one restart: beyond the suite's budget.)
fn fault_cases(nodes: usize, faults: Faults) -> Vec<Config> {
    let mut cases = vec![cfg(nodes, 2, 1, GUARDED, faults)];
    if FULL {
        cases.push(cfg(nodes, 2, 2, TWO_ROUNDS, faults));
    }
    cases
}

/// One attempt per client in both builds, on nodes whose epoch already began: the cases whose
/// verdict shows at these bounds (the suite's time goes to the ones that need more).
fn narrow(nodes: usize, protocol: Protocol, faults: Faults) -> Config {
    Config {
        started: true,
        ..cfg(nodes, 2, 1, protocol, faults)
    }
}

#[test]
fn pauses_and_honest_expiry_keep_every_property() {
    // Fresh nodes: the first grant starts an epoch, so the client's clock is read once; a
    // clock behind changes nothing then.
    let mut configs = fault_cases(3, PAUSES_ONLY);
    configs.extend(fault_cases(3, behind(PAUSES_ONLY)));
    if FAST_BUILD {
        configs.push(cfg(5, 2, 1, GUARDED, PAUSES_ONLY));
    }
    if FAST_BUILD && !FULL {
        // The two rounds alone with two attempts each: the one two-attempt case the suite keeps
        // (`fault_cases` adds it, with the others, under FULL).
        configs.push(cfg(3, 2, 2, TWO_ROUNDS, PAUSES_ONLY));
    }
    if FULL {
        let few = Protocol {
            proposals: Proposals::Few,
            ..GUARDED
        };
        configs.push(cfg(3, 2, 2, few, PAUSES_ONLY));
        configs.push(cfg(3, 3, 1, GUARDED, PAUSES_ONLY));
    }
    for c in &configs {
        let outcome = explore(c);
        report("pauses + honest TTL expiry", c, &outcome);
        assert_holds(&outcome, &ALL);
    }
}

#[test]
fn clock_jump_breaks_order_but_not_uniqueness() {
    let c = narrow(3, GUARDED, faults(1, 0, 0, 0));
    let outcome = explore(&c);
    report("clock jump on one node", &c, &outcome);
    assert_holds(
        &outcome,
        &["P1 uniqueness", "P2q order for holders of a live quorum"],
    );
    assert!(outcome.violated("P2 order"));
    assert!(outcome.violated("P3 storage"));
    println!("{}", outcome.get("P3 storage"));
}

#[test]
fn the_guard_survives_restarts_without_persistence() {
    // One attempt per client in the suite since the seed wait (issue 27 item 3) joined the
    // guarded protocol: its two-attempt cases (the two rounds alone) are millions of states,
    // run by hand with FULL (their figures: docs/fencing.md's table). They passed this
    // machine's 24 GiB while the visited set held whole states; it holds fingerprints now.
    // Two resources with two attempts and the seed wait:
    // `the_seed_wait_keeps_every_property_with_two_resources`, run by hand.
    let mut cases = Vec::new();
    cases.push((
        "guard, one restart without persistence",
        cfg(3, 2, 1, GUARDED, faults(0, 1, 0, 0)),
    ));
    cases.push((
        "guard, two restarts without persistence",
        cfg(3, 2, 1, GUARDED, faults(0, 2, 0, 0)),
    ));
    // One restart leaves a node with the counter: no epoch starts, whatever the clock.
    // (One attempt per client in both builds: the suite's time goes to the cases above.)
    cases.push((
        "guard, one restart, client clock behind",
        cfg(3, 2, 1, GUARDED, behind(faults(0, 1, 0, 0))),
    ));
    if FULL {
        // The two rounds alone with two attempts each (the cells docs/fencing.md cites), with the
        // seed wait: they fit since the visited set holds fingerprints (issue 27).
        cases.push((
            "guard, one restart without persistence, two rounds",
            cfg(3, 2, 2, TWO_ROUNDS, faults(0, 1, 0, 0)),
        ));
        cases.push((
            "guard, two restarts without persistence, two rounds",
            cfg(3, 2, 2, TWO_ROUNDS, faults(0, 2, 0, 0)),
        ));
    }
    for (name, c) in cases {
        let started = std::time::Instant::now();
        let outcome = explore(&c);
        report(name, &c, &outcome);
        println!("  ({:.1} s)", started.elapsed().as_secs_f64());
        assert_holds(&outcome, &ALL);
    }
}

#[test]
fn after_a_total_loss_the_order_rests_on_the_clock() {
    for c in fault_cases(3, faults(0, 0, 1, 0)) {
        let outcome = explore(&c);
        report("guard, total loss, honest clock", &c, &outcome);
        assert_holds(&outcome, &ALL);
    }
    let c = cfg(3, 2, 1, GUARDED, behind(faults(0, 0, 1, 0)));
    let outcome = explore(&c);
    report("guard, total loss, client clock behind", &c, &outcome);
    assert!(outcome.violated("P2 order"));
    assert!(outcome.violated("P3 storage"));
    println!("{}", outcome.get("P3 storage"));
}

#[test]
fn the_guard_with_a_restart_and_a_clock_jump() {
    // One attempt per client in both builds (the suite's budget).
    let c = cfg(3, 2, 1, GUARDED, faults(1, 1, 0, 0));
    let outcome = explore(&c);
    report("guard, restart + clock jump", &c, &outcome);
    for cx in &outcome.found {
        println!("{cx}");
    }
    assert_holds(
        &outcome,
        &["P1 uniqueness", "P2q order for holders of a live quorum"],
    );
}

#[test]
fn eviction_of_the_counter_under_the_guard() {
    // An evicted counter makes the node's read untrusted, as a restart does.
    for c in fault_cases(3, faults(0, 0, 0, 1)) {
        let outcome = explore(&c);
        report("guard, counter evicted", &c, &outcome);
        assert_holds(&outcome, &ALL);
    }
}

#[test]
fn without_the_guard_a_restart_breaks_uniqueness() {
    for quarantine in [false, true] {
        let protocol = Protocol {
            quarantine,
            ..UNGUARDED
        };
        let c = narrow(3, protocol, faults(0, 1, 0, 0));
        let outcome = explore_until(&c, P1 | P3);
        report(
            if quarantine {
                "no guard, restart without persistence, with quarantine"
            } else {
                "no guard, restart without persistence"
            },
            &c,
            &outcome,
        );
        assert!(outcome.violated("P1 uniqueness"));
        assert!(outcome.violated("P3 storage"));
        println!("{}", outcome.get("P1 uniqueness"));
    }
}

#[test]
fn checker_catches_a_protocol_without_write_back() {
    // No counter is ever written, so every attempt starts an epoch: the order is the clock's
    // alone, and a clock behind breaks it (the guard with the same clock keeps every property,
    // `pauses_and_honest_expiry_keep_every_property`).
    let protocol = Protocol {
        write_back: false,
        ..GUARDED
    };
    let c = cfg(3, 2, 2, protocol, behind(PAUSES_ONLY));
    let outcome = explore_until(&c, P1 | P3);
    report("MUTANT: no write-back", &c, &outcome);
    assert!(outcome.violated("P1 uniqueness"));
    assert!(outcome.violated("P3 storage"));
    println!("{}", outcome.get("P1 uniqueness"));
}

#[test]
fn checker_catches_a_write_back_without_ownership_check() {
    let protocol = Protocol {
        ownership_check: false,
        ..GUARDED
    };
    let c = narrow(3, protocol, faults(1, 0, 0, 0));
    let outcome = explore_until(&c, P1);
    report("MUTANT: write-back without ownership check", &c, &outcome);
    // What the protocol keeps under a clock jump (`clock_jump_breaks_order_but_not_uniqueness`).
    assert!(
        outcome.violated("P1 uniqueness")
            || outcome.violated("P2q order for holders of a live quorum")
    );
    for cx in &outcome.found {
        println!("{cx}");
    }
}

#[test]
fn checker_catches_an_epoch_started_on_a_quorum() {
    // The same faults the guard survives (`the_guard_survives_restarts_without_persistence`).
    let protocol = Protocol {
        epoch_on_quorum: true,
        ..GUARDED
    };
    let c = cfg(3, 2, 1, protocol, behind(faults(0, 1, 0, 0)));
    let outcome = explore_until(&c, P1);
    report(
        "MUTANT: epoch start when a quorum lacks the counter",
        &c,
        &outcome,
    );
    assert!(outcome.violated("P1 uniqueness"));
    println!("{}", outcome.get("P1 uniqueness"));
}

#[test]
fn checker_catches_fewer_than_a_quorum_of_trusted_reads() {
    let protocol = Protocol {
        trust_one: true,
        ..GUARDED
    };
    let c = narrow(3, protocol, faults(0, 1, 0, 0));
    let outcome = explore_until(&c, P1);
    report("MUTANT: one trusted read is enough", &c, &outcome);
    assert!(outcome.violated("P1 uniqueness"));
    println!("{}", outcome.get("P1 uniqueness"));
}

#[test]
fn checker_catches_seeding_before_issue() {
    // A step of the two-round path: checked on that path alone (no proposals, no late requests:
    // with them the shortest trace lies beyond the suite's budget).
    // Without the seed wait too (issue 27 item 3), as the code's mutant `guard-seed-before-issue`
    // does: the wait alone refuses a seed that comes too soon, early or not.
    let protocol = Protocol {
        seed_before_issue: true,
        seed_wait: false,
        ..TWO_ROUNDS
    };
    // The shortest trace needs two attempts per client: the optimised build's bounds
    // (`cargo test -p fencelock-model`) only; at one attempt (the debug build's) there is none.
    if !FAST_BUILD {
        println!("MUTANT: seeding before issue: run by the optimised build only");
        return;
    }
    let two_restarts = Faults {
        late_sets: false,
        ..faults(0, 2, 0, 0)
    };
    let c = Config {
        started: true,
        ..cfg(3, 2, 2, protocol, two_restarts)
    };
    let outcome = explore_until(&c, P1);
    report("MUTANT: seeding before issue", &c, &outcome);
    assert!(outcome.violated("P1 uniqueness"));
    println!("{}", outcome.get("P1 uniqueness"));
}

#[test]
fn checker_catches_a_proposal_accepted_at_its_counter() {
    // A node that takes a proposal equal to its counter hands a second holder the token the
    // last one was issued (the proposal that hits is one above the counter, never equal).
    let protocol = Protocol {
        accept_equal: true,
        ..GUARDED
    };
    let c = narrow(3, protocol, PAUSES_ONLY);
    let outcome = explore_until(&c, P1);
    report(
        "MUTANT: a proposal equal to the counter accepted",
        &c,
        &outcome,
    );
    assert!(outcome.violated("P1 uniqueness"));
    println!("{}", outcome.get("P1 uniqueness"));
}

#[test]
fn checker_catches_a_proposal_accepted_without_a_counter() {
    // The amnesia guard's trust rule applies to proposals too: a node that lost its counter
    // (here: restarted without persistence) may have forgotten the largest token.
    let protocol = Protocol {
        accept_untrusted: true,
        ..GUARDED
    };
    let c = narrow(3, protocol, faults(0, 1, 0, 0));
    let outcome = explore_until(&c, P1);
    report(
        "MUTANT: a proposal accepted by a node without its counter",
        &c,
        &outcome,
    );
    assert!(outcome.violated("P1 uniqueness"));
    println!("{}", outcome.get("P1 uniqueness"));
}

#[test]
fn random_walks_on_five_nodes_and_three_clients() {
    let seeds = if FAST_BUILD { 0..20_000 } else { 0..1_000 };
    let honest = cfg(5, 3, 3, GUARDED, PAUSES_ONLY);
    let (steps, found) = simulate(&honest, seeds.clone());
    println!("random walks, 5 nodes x 3 clients x 3 attempts, pauses: {steps} steps");
    if let Some(cx) = found.first() {
        panic!("{cx}");
    }
    let guarded = cfg(5, 3, 3, GUARDED, faults(0, 3, 1, 0));
    let (steps, found) = simulate(&guarded, seeds.clone());
    println!(
        "random walks, 5 nodes x 3 clients, guard, 3 restarts and a total loss: {steps} steps"
    );
    if let Some(cx) = found.first() {
        panic!("{cx}");
    }
    let jumps = cfg(5, 3, 3, GUARDED, faults(2, 0, 0, 0));
    let (steps, found) = simulate(&jumps, seeds);
    println!("random walks, 5 nodes x 3 clients, 2 clock jumps: {steps} steps");
    for cx in &found {
        assert!(
            cx.property == "P2 order" || cx.property == "P3 storage",
            "{cx}"
        );
    }
}

/// The model's node steps (`node_acquire`, `node_write_back`) against the Lua on a real node:
/// the same random sequence of acquisitions, write-backs, expiries, restarts (FLUSHALL),
/// evictions and legacy counters leaves the same replies and the same keys. Changing the Lua
/// without the model (or the other way round) fails here.
#[tokio::test]
async fn the_model_fences_as_the_lua_does() {
    use fencelock::protocol::{
        counter_key, ACQUIRE_FENCED_SCRIPT, FENCE_COUNTER_KEY, WRITE_BACK_SCRIPT,
    };
    let node = fencelock_testkit::RedisNode::start().unwrap();
    let legacy = counter_key("R");
    let get = |key: &str| -> Option<String> {
        let v = node.cli(&["GET", key]).unwrap();
        (v != "(nil)").then_some(v)
    };
    let mut rng = Rng(13);
    let mut model = Node::default();
    for step in 0..400 {
        let owner = rng.below(3) as u8;
        let owner_token = format!("o{owner}");
        let what = rng.below(10);
        let label = format!("step {step}: op {what}, owner {owner}");
        match what {
            0..=3 => {
                // A proposal, none (absent or '0'), or one equal to a counter that may exist.
                let proposal = match rng.below(4) {
                    0 => 0,
                    1 => model.counter.unwrap_or(0).max(model.legacy.unwrap_or(0)),
                    _ => rng.below(62) as u8,
                };
                let proposal_arg = proposal.to_string();
                let mut args = vec![
                    "EVAL",
                    ACQUIRE_FENCED_SCRIPT,
                    "3",
                    "R",
                    FENCE_COUNTER_KEY,
                    &legacy,
                    &owner_token,
                    "60000",
                ];
                if proposal > 0 || rng.below(2) == 0 {
                    args.push(&proposal_arg);
                }
                let reply = node.cli(&args).unwrap();
                let lines: Vec<&str> = reply.lines().collect();
                let lua = NodeRead {
                    granted: lines[0] == "1",
                    value: lines[1].parse().unwrap(),
                    exists: lines[2] == "1",
                    accepted: lines[3] == "1",
                };
                let rule = AcceptRule::default();
                assert_eq!(
                    lua,
                    node_acquire(&mut model, 0, owner, proposal, rule),
                    "{label}, proposal {proposal}"
                );
            }
            4..=6 => {
                // A plain write-back, or an epoch start's (which may create the counter).
                let token = rng.below(60) as u8;
                let token_arg = token.to_string();
                let epoch = rng.below(2) == 0;
                let mut args = vec![
                    "EVAL",
                    WRITE_BACK_SCRIPT,
                    "3",
                    "R",
                    FENCE_COUNTER_KEY,
                    &legacy,
                    &owner_token,
                    &token_arg,
                ];
                if epoch {
                    args.push("epoch");
                }
                let reply = node.cli(&args).unwrap();
                let applied = node_write_back(&mut model, 0, owner, token, true, epoch);
                assert_eq!(
                    reply.trim() == "1",
                    applied,
                    "{label}, epoch {epoch}: {reply}"
                );
            }
            7 => {
                node.cli(&["DEL", "R"]).unwrap();
                model.lock[0] = None;
            }
            8 => {
                if rng.below(2) == 0 {
                    node.cli(&["FLUSHALL"]).unwrap();
                    model = Node::default();
                } else {
                    node.cli(&["DEL", FENCE_COUNTER_KEY]).unwrap();
                    model.counter = None;
                }
            }
            _ => {
                let v = rng.below(60) as u8;
                node.cli(&["SET", &legacy, &v.to_string()]).unwrap();
                model.legacy = Some(v);
            }
        }
        assert_eq!(
            get("R"),
            model.lock[0].map(|o| format!("o{o}")),
            "lock key, {label}"
        );
        assert_eq!(
            get(FENCE_COUNTER_KEY),
            model.counter.map(|v| v.to_string()),
            "node counter, {label}"
        );
        assert_eq!(
            get(&legacy),
            model.legacy.map(|v| v.to_string()),
            "legacy counter, {label}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Two resources on one counter, quarantine off (issue 27 item 3)
// ---------------------------------------------------------------------------------------------
//
// The node counter is shared by every resource, so a grant of Z can seed a node that lost the
// record of a grant of X. The guard's argument needs a seeded node to be at least every token it
// had recorded before the loss; a seed taken from reads that come before a counted record of a
// round that was in flight at the loss breaks that (the round's other records land after the
// reads): with the restart quarantine off (it keeps the node out for a TTL), a later holder of
// X reads the seed on the node and is issued a smaller token. The seed wait
// (`Protocol::seed_wait`) closes it: a node that lost its counter is seeded only by an attempt
// that started once every round in flight at the loss was over.

/// The protocol before the seed wait (the client's before issue 27).
const NO_SEED_WAIT: Protocol = Protocol {
    seed_wait: false,
    ..GUARDED
};

/// Client A locks X with two attempts (its second is the later holder of X), B locks Z with one,
/// on nodes whose epoch began, every proposal from 0 to two above the largest token that can
/// matter (the trace needs A's proposal above B's). The requests that land after their round (late
/// SETs, delayed write-backs) are left out: the issue's trace needs neither (A's request to n2
/// lands within A's round), and with them the search passed the suite's budget.
fn two_resources(protocol: Protocol, faults: Faults) -> Config {
    let faults = Faults {
        late_sets: false,
        delayed_write_backs: false,
        ..faults
    };
    let protocol = Protocol {
        proposals: Proposals::All,
        ..protocol
    };
    Config {
        started: true,
        resources: [0, 1, 0],
        attempts_of: [2, 1, 0],
        ..cfg(3, 2, 2, protocol, faults)
    }
}

#[test]
fn without_the_seed_wait_a_seed_from_another_resource_breaks_order() {
    if !FAST_BUILD {
        // Beyond the debug build's budget (minutes): `cargo test -p fencelock-model`.
        println!("two resources, no seed wait: run by the optimised build only");
        return;
    }
    let protocol = Protocol {
        quarantine: false,
        ..NO_SEED_WAIT
    };
    let c = two_resources(protocol, faults(0, 1, 0, 0));
    let outcome = explore_until(&c, P2);
    report(
        "two resources, no quarantine, one restart, seeds without the wait",
        &c,
        &outcome,
    );
    assert!(outcome.violated("P2 order"));
    println!("{}", outcome.get("P2 order"));
    for cx in outcome.found.iter().filter(|cx| cx.property != "P2 order") {
        println!("{cx}");
    }
}

/// Exhaustive over two resources with the seed wait: the case without the quarantine and one
/// restart (the issue's) explored 26,616,747 states and found every property holding (optimised
/// build, 3 December 2026); with the quarantine on and one restart, 33,175,920 states, every
/// property holding (283 s of CPU, 1.7 GB, once the visited set held fingerprints). Beyond the
/// suite's budget on this 2-core machine, so it is run by hand:
/// `cargo test --release -p fencelock-model -- --ignored --nocapture seed_wait_keeps`
/// (`FENCELOCK_MODEL_ONLY=<part of a case's name>` picks cases).
#[test]
#[ignore = "tens of millions of states, beyond the suite's memory: run by hand (see its doc)"]
fn the_seed_wait_keeps_every_property_with_two_resources() {
    if !FAST_BUILD {
        println!("two resources, the seed wait: run by the optimised build only");
        return;
    }
    let mut cases = Vec::new();
    for quarantine in [false, true] {
        let protocol = Protocol {
            quarantine,
            ..GUARDED
        };
        let q = if quarantine {
            "quarantine"
        } else {
            "no quarantine"
        };
        cases.push((
            format!("seed wait, two resources, {q}, one restart"),
            two_resources(protocol, faults(0, 1, 0, 0)),
        ));
        cases.push((
            format!("seed wait, two resources, {q}, counter evicted"),
            two_resources(protocol, faults(0, 0, 0, 1)),
        ));
    }
    // `FENCELOCK_MODEL_ONLY=<part of a case's name>` runs the matching cases alone, by hand.
    let only = std::env::var("FENCELOCK_MODEL_ONLY").unwrap_or_default();
    for (name, c) in cases.iter().filter(|(name, _)| name.contains(&only)) {
        let started = std::time::Instant::now();
        let outcome = explore(c);
        report(name, c, &outcome);
        println!("  ({:.1} s)", started.elapsed().as_secs_f64());
        assert_holds(&outcome, &ALL);
    }
}

/// The write-back of `write_back.lua` before issue 27's fix created a missing counter
/// (`Protocol::write_back_creates`): with two resources and one counter eviction the checker
/// finds two holders of one token in 15 steps (a plain write-back of Z's holder recreates the
/// evicted counter below the token X's holder recorded there; X's next attempt is accepted at
/// that token again). The suite runs it with [`Proposals::Few`] (0, M and M + 1: the trace's
/// proposals are among them; 2,276,158 states); `FENCELOCK_MODEL_PROPOSALS=all` runs it, by
/// hand, with every proposal, as `the_seed_wait_keeps_every_property_with_two_resources` does.
/// With the quarantine on or off: it plays no part without a restart (an eviction starts none),
/// so both spaces are one.
#[test]
fn checker_catches_a_plain_write_back_that_creates_a_missing_counter() {
    if !FAST_BUILD {
        // Beyond the debug build's budget: `cargo test -p fencelock-model`.
        println!("MUTANT: a plain write-back creates a missing counter: optimised build only");
        return;
    }
    let all = std::env::var("FENCELOCK_MODEL_PROPOSALS").is_ok_and(|v| v == "all");
    let protocol = Protocol {
        write_back_creates: true,
        ..GUARDED
    };
    let mut c = two_resources(protocol, faults(0, 0, 0, 1));
    if !all {
        c.protocol.proposals = Proposals::Few;
    }
    let started = std::time::Instant::now();
    let outcome = explore_until(&c, P1);
    report(
        "MUTANT: a plain write-back creates a missing counter, two resources, counter evicted",
        &c,
        &outcome,
    );
    println!("  ({:.1} s)", started.elapsed().as_secs_f64());
    assert!(outcome.violated("P1 uniqueness"));
    println!("{}", outcome.get("P1 uniqueness"));
}

// ---------------------------------------------------------------------------------------------
// Restart quarantine: mutual exclusion with clients of different TTLs
// ---------------------------------------------------------------------------------------------
//
// The model above leaves time out and treats the end of a quarantine as "max-TTL passed". This
// one models time in ticks, because the quarantine's length is the point: clients with
// different TTLs share the nodes, every grant and extension announces its TTL on the node (the
// `announce` function of the Lua scripts, `q_announce` below, held to the Lua by
// `the_model_announces_as_the_lua_does`), and a client judges a restarted node from what the
// other nodes announce, as `src/redis/quarantine.rs` does. The property is mutual exclusion:
// no two clients hold the lock (within their validity) at the same tick. Clocks are honest: a
// key set at tick s with TTL d lives until s + d, and its holder's validity ends at start + d.
//
// A client's requests land within its round (the node timeout, shorter than any TTL: one tick
// is shorter than every TTL here), so every SET happens in the tick its attempt starts; an
// answer after the round's deadline is not counted. The checker found what happens without the
// confirming read below: a node restarts between a job's SET there and its SETs on the other
// nodes; a client that read the others before those landed counts the node too early. So a
// client counts a restarted node only on a read taken once the quarantine it computed is over
// (by then every counted grant of an attempt that started before the restart has landed and
// announced), and keeps counting it from then on (`Resolution::confirmed`).

/// The Lua's `announce(ttl)` on a node's staircase of `(ttl, until)` entries, kept sorted by
/// `until` (the sorted set's order), and its marks: `(ttl, until)` for each key
/// `fencelock:ttls:<ttl>`, which expires at `until`. A mark with more than `ttl` left says
/// that an entry with this TTL or a longer one lives past `now + ttl`, so the announcement
/// stops there (one call on the node: the common case). Otherwise the entry is written with one
/// TTL of slack (`now + 2 * ttl`), so that the next TTL's announcements find the mark, and the
/// mark is set to the deadline that covers this TTL. Returns the time used, as the Lua does
/// (`None`: stopped at the mark, the Lua's 0).
fn q_announce(
    stair: &mut Vec<(u64, u64)>,
    marks: &mut Vec<(u64, u64)>,
    now: u64,
    ttl: u64,
) -> Option<u64> {
    q_announce_with(stair, marks, now, ttl, false, 0)
}

/// [`q_announce`], or with `any_mark` the mutant that stops at any live mark; with `margin`,
/// the Lua's `announce(ttl, margin)`: it stops at the mark, or at a longer TTL's entry, only when
/// that covers `margin` beyond one TTL from now (the announcement sent ahead of plain grants).
fn q_announce_with(
    stair: &mut Vec<(u64, u64)>,
    marks: &mut Vec<(u64, u64)>,
    now: u64,
    ttl: u64,
    any_mark: bool,
    margin: u64,
) -> Option<u64> {
    q_announce_core(stair, marks, now, ttl, any_mark, margin).0
}

/// [`q_announce_with`], and the deadline the Lua of issue 27 item 1 gave the whole set when it
/// wrote it (`PEXPIRE` to its own `untl`), `None` where it sets no expiry. The set's expiry
/// itself is modelled in [`q_announce_expiring`].
fn q_announce_core(
    stair: &mut Vec<(u64, u64)>,
    marks: &mut Vec<(u64, u64)>,
    now: u64,
    ttl: u64,
    any_mark: bool,
    margin: u64,
) -> (Option<u64>, Option<u64>) {
    // Expired keys are gone (the mark is a key with a TTL).
    marks.retain(|&(_, until)| until > now);
    let enough = if any_mark { 0 } else { ttl + margin };
    if marks
        .iter()
        .any(|&(t, until)| t == ttl && until - now > enough)
    {
        return (None, None);
    }
    let need = now + ttl + margin;
    let mut untl = now + 2 * ttl;
    let mut expired_to = None;
    let covered = 'stair: {
        if let Some(top) = stair.last_mut().filter(|top| top.0 == ttl) {
            // The Lua's common slow case: the latest entry has this TTL; its deadline moves.
            top.1 = top.1.max(untl);
            expired_to = Some(top.1);
            break 'stair top.1;
        }
        // zremrangebyscore -inf now
        stair.retain(|&(_, until)| until > now);
        while let Some(&(top_ttl, top_until)) = stair.last() {
            if top_ttl > ttl {
                if top_until >= need {
                    // A longer TTL outlasts this lock: nothing to add, and it covers the mark.
                    break 'stair top_until;
                }
                break;
            }
            untl = untl.max(top_until);
            stair.pop();
        }
        // zadd sets the member's score. With a margin above the TTL the entry may go below a
        // longer TTL's entry, where a later announcement of the TTL finds it again (it is not
        // popped: the loop stops at the longer entry).
        stair.retain(|&(t, _)| t != ttl);
        stair.push((ttl, untl));
        stair.sort_by_key(|&(_, until)| until);
        expired_to = Some(untl);
        untl
    };
    marks.retain(|&(t, _)| t != ttl);
    marks.push((ttl, covered));
    (Some(now), expired_to)
}

/// The longest TTL whose lock may still live, from one node's staircase (`longest_live`).
fn q_longest_live(stair: &[(u64, u64)], now: u64) -> Option<u64> {
    stair
        .iter()
        .filter(|&&(_, until)| until > now)
        .map(|&(ttl, _)| ttl)
        .max()
}

/// Which rules the quarantine follows.
#[derive(Debug, Clone, Copy)]
struct QRules {
    quarantine: bool,
    /// Learn the longest TTL in use from the other nodes (else: the client's own TTL, as before
    /// issue 13).
    announced: bool,
    /// Count a restarted node only after `n - quorum + 1` other nodes answered.
    witnesses: bool,
    /// Count it only on a read taken once the quarantine is over (else: on the first read's
    /// reckoning).
    confirm: bool,
    /// MUTANT: an announcement stops at its mark whatever the mark has left (not only when more
    /// than the TTL).
    any_mark: bool,
}

const Q_CLIENTS: usize = 2;
const Q_NODES: usize = 3;

#[derive(Debug, Clone, Copy)]
struct QConfig {
    rules: QRules,
    /// Each client's TTL in ticks.
    ttls: [u8; Q_CLIENTS],
    attempts: u8,
    restarts: u8,
    /// Nodes that may become unreachable (to every client, for good).
    outages: u8,
    horizon: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct QNode {
    /// Owner and the tick its key expires.
    lock: Option<(u8, u8)>,
    /// The TTLs announced: `(ttl, until)` sorted by `until`, `(0, 0)` for none (an array, not
    /// a Vec, so that states copy and hash fast; one entry per client TTL is enough).
    stair: [(u8, u8); Q_CLIENTS],
    /// The announcement marks `(ttl, until)`, `(0, 0)` for none (see [`q_announce`]).
    marks: [(u8, u8); Q_CLIENTS],
    restarted_at: Option<u8>,
    down: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
enum QPhase {
    #[default]
    Idle,
    Acquiring {
        start: u8,
        granted: u8,
    },
    Holding {
        valid_until: u8,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct QState {
    now: u8,
    nodes: [QNode; Q_NODES],
    clients: [(QPhase, u8); Q_CLIENTS],
    /// Per client, the restarted nodes it confirmed (counts from then on).
    confirmed: [u8; Q_CLIENTS],
    /// Per client and node, the tick from which the client's first read lets it count the
    /// restarted node, plus one (0: not read yet).
    judged: [[u8; Q_NODES]; Q_CLIENTS],
    restarts_left: u8,
    outages_left: u8,
}

impl QState {
    fn release(&mut self, c: usize) {
        for node in &mut self.nodes {
            if node.lock.is_some_and(|(o, _)| o as usize == c) {
                node.lock = None;
            }
        }
        self.clients[c].0 = QPhase::Idle;
    }
}

/// What client `c` reads from the other nodes about restarted node `i` now: when the node may
/// count, or `None` when too few answer (`check_quarantine`).
fn q_read(cfg: &QConfig, s: &QState, c: usize, i: usize) -> Option<u8> {
    let restarted = s.nodes[i].restarted_at?;
    let now = u64::from(s.now);
    let own = u64::from(cfg.ttls[c]);
    let longest = if cfg.rules.announced {
        let witnesses: Vec<&QNode> = (0..Q_NODES)
            .filter(|&j| j != i && !s.nodes[j].down)
            .map(|j| &s.nodes[j])
            .collect();
        let quorum = Q_NODES / 2 + 1;
        if cfg.rules.witnesses && witnesses.len() < Q_NODES - quorum + 1 {
            return None;
        }
        witnesses
            .iter()
            .flat_map(|n| n.stair.iter())
            .filter(|&&(ttl, until)| ttl != 0 && u64::from(until) > now)
            .map(|&(ttl, _)| u64::from(ttl))
            .fold(own, u64::max)
    } else {
        own
    };
    Some(u8::try_from(u64::from(restarted) + longest).unwrap_or(u8::MAX))
}

/// Whether client `c` counts node `i` now: a node that never restarted, one it confirmed, or
/// one whose quarantine (by its first read) is over and, with `confirm`, a read now confirms.
fn q_counts(cfg: &QConfig, s: &QState, c: usize, i: usize) -> bool {
    if s.nodes[i].restarted_at.is_none() || !cfg.rules.quarantine || s.confirmed[c] & (1 << i) != 0
    {
        return true;
    }
    let judged = s.judged[c][i];
    if judged == 0 || s.now < judged - 1 {
        return false;
    }
    !cfg.rules.confirm || q_read(cfg, s, c, i).is_some_and(|from| s.now >= from)
}

#[derive(Debug, Clone)]
enum QEvent {
    Tick,
    Start(usize),
    Judge(usize, usize),
    Set(usize, usize),
    Decide(usize, bool),
    Release(usize),
    Restart(usize),
    Down(usize),
}

impl fmt::Display for QEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |c: usize| client_name(c as u8);
        match *self {
            QEvent::Tick => write!(f, "time passes"),
            QEvent::Start(c) => write!(f, "{} starts an attempt", name(c)),
            QEvent::Judge(c, i) => write!(f, "{} reads the TTLs in use to judge n{i}", name(c)),
            QEvent::Set(c, i) => write!(f, "{} SET NX on n{i}: granted", name(c)),
            QEvent::Decide(c, true) => write!(f, "{} has a quorum: HOLDS the lock", name(c)),
            QEvent::Decide(c, false) => write!(f, "{} gives up", name(c)),
            QEvent::Release(c) => write!(f, "{} releases", name(c)),
            QEvent::Restart(i) => write!(f, "n{i} restarts WITHOUT its data"),
            QEvent::Down(i) => write!(f, "n{i} becomes unreachable"),
        }
    }
}

/// Successors of `s`, each with whether it breaks mutual exclusion.
fn q_successors(cfg: &QConfig, s: &QState) -> Vec<(QEvent, QState, bool)> {
    let mut out = Vec::new();
    if s.now < cfg.horizon {
        let mut n = s.clone();
        n.now += 1;
        for node in &mut n.nodes {
            if node.lock.is_some_and(|(_, expires)| expires <= n.now) {
                node.lock = None;
            }
        }
        for client in &mut n.clients {
            if let QPhase::Holding { valid_until } = client.0 {
                if valid_until <= n.now {
                    client.0 = QPhase::Idle;
                }
            }
        }
        out.push((QEvent::Tick, n, false));
    }
    for c in 0..Q_CLIENTS {
        let (phase, attempts) = s.clients[c];
        match phase {
            QPhase::Idle if attempts > 0 => {
                let mut n = s.clone();
                n.clients[c] = (
                    QPhase::Acquiring {
                        start: s.now,
                        granted: 0,
                    },
                    attempts - 1,
                );
                out.push((QEvent::Start(c), n, false));
            }
            QPhase::Idle => {}
            QPhase::Acquiring { start, granted } => {
                // The first round that meets a restarted node reads the others.
                for i in 0..Q_NODES {
                    if s.now != start
                        || !cfg.rules.quarantine
                        || s.nodes[i].down
                        || s.judged[c][i] != 0
                        || s.confirmed[c] & (1 << i) != 0
                    {
                        continue;
                    }
                    if let Some(from) = q_read(cfg, s, c, i) {
                        let mut n = s.clone();
                        n.judged[c][i] = from.saturating_add(1);
                        out.push((QEvent::Judge(c, i), n, false));
                    }
                }
                for i in 0..Q_NODES {
                    let node = &s.nodes[i];
                    if s.now != start
                        || granted & (1 << i) != 0
                        || node.down
                        || node.lock.is_some()
                        || !q_counts(cfg, s, c, i)
                    {
                        continue;
                    }
                    let mut n = s.clone();
                    if node.restarted_at.is_some() {
                        n.confirmed[c] |= 1 << i;
                    }
                    n.nodes[i].lock = Some((c as u8, s.now + cfg.ttls[c]));
                    let unpack = |entries: &[(u8, u8)]| -> Vec<(u64, u64)> {
                        entries
                            .iter()
                            .filter(|e| e.0 != 0)
                            .map(|&(t, u)| (u64::from(t), u64::from(u)))
                            .collect()
                    };
                    let pack = |entries: Vec<(u64, u64)>| {
                        let mut packed = [(0u8, 0u8); Q_CLIENTS];
                        for (slot, (t, u)) in packed.iter_mut().zip(entries) {
                            *slot = (t as u8, u as u8);
                        }
                        packed
                    };
                    let mut stair = unpack(&node.stair);
                    let mut marks = unpack(&node.marks);
                    q_announce_with(
                        &mut stair,
                        &mut marks,
                        u64::from(s.now),
                        u64::from(cfg.ttls[c]),
                        cfg.rules.any_mark,
                        0,
                    );
                    n.nodes[i].stair = pack(stair);
                    n.nodes[i].marks = pack(marks);
                    n.clients[c].0 = QPhase::Acquiring {
                        start,
                        granted: granted | 1 << i,
                    };
                    out.push((QEvent::Set(c, i), n, false));
                }
                let valid_until = start + cfg.ttls[c];
                let quorum = (Q_NODES / 2 + 1) as u32;
                let mut n = s.clone();
                if granted.count_ones() >= quorum && s.now < valid_until {
                    n.clients[c].0 = QPhase::Holding { valid_until };
                    let other_holds = (0..Q_CLIENTS)
                        .any(|o| o != c && matches!(s.clients[o].0, QPhase::Holding { .. }));
                    out.push((QEvent::Decide(c, true), n, other_holds));
                } else {
                    n.release(c);
                    out.push((QEvent::Decide(c, false), n, false));
                }
            }
            QPhase::Holding { .. } => {
                let mut n = s.clone();
                n.release(c);
                out.push((QEvent::Release(c), n, false));
            }
        }
    }
    for i in 0..Q_NODES {
        if s.restarts_left > 0 && !s.nodes[i].down {
            let mut n = s.clone();
            n.restarts_left -= 1;
            n.nodes[i] = QNode {
                restarted_at: Some(s.now),
                ..QNode::default()
            };
            for confirmed in &mut n.confirmed {
                *confirmed &= !(1 << i);
            }
            for judged in &mut n.judged {
                judged[i] = 0;
            }
            out.push((QEvent::Restart(i), n, false));
        }
        // An outage lasts to the end (coming back only lets more happen that the checker
        // already covers with a node that answers throughout).
        if !s.nodes[i].down && s.outages_left > 0 {
            let mut n = s.clone();
            n.outages_left -= 1;
            n.nodes[i].down = true;
            out.push((QEvent::Down(i), n, false));
        }
    }
    out
}

struct QOutcome {
    states: usize,
    /// A shortest trace to two holders at once, if any.
    violation: Option<Vec<String>>,
}

/// Breadth-first over every interleaving (no symmetry reduction: the clients differ by TTL).
fn q_explore(cfg: &QConfig) -> QOutcome {
    let init = QState {
        clients: [(QPhase::Idle, cfg.attempts); Q_CLIENTS],
        restarts_left: cfg.restarts,
        outages_left: cfg.outages,
        ..QState::default()
    };
    let mut index: FastMap<QState, u32> = FastMap::default();
    let mut states = vec![init.clone()];
    let mut parent: Vec<(u32, String)> = vec![(u32::MAX, String::new())];
    index.insert(init, 0);
    let mut head = 0;
    while head < states.len() {
        let s = states[head].clone();
        for (event, next, broken) in q_successors(cfg, &s) {
            let label = format!("t={} {event}", s.now);
            if broken {
                let mut steps = vec![label];
                let mut at = head as u32;
                while at != 0 {
                    let (p, l) = &parent[at as usize];
                    steps.push(l.clone());
                    at = *p;
                }
                steps.reverse();
                return QOutcome {
                    states: states.len(),
                    violation: Some(steps),
                };
            }
            if !index.contains_key(&next) {
                index.insert(next.clone(), states.len() as u32);
                states.push(next);
                parent.push((head as u32, label));
            }
        }
        head += 1;
    }
    QOutcome {
        states: states.len(),
        violation: None,
    }
}

const Q_RULES: QRules = QRules {
    quarantine: true,
    announced: true,
    witnesses: true,
    confirm: true,
    any_mark: false,
};

/// A job with a longer TTL than an application client (2 and 1 ticks); one restart without
/// data. The same bounds in both builds: the larger ones once tried for the optimised build
/// (TTLs 3 and 1, 2 attempts, 7 ticks) passed 5 GB and 3.5 CPU-minutes without finishing,
/// beyond the suite's budget.
fn q_config(rules: QRules, outages: u8) -> QConfig {
    QConfig {
        rules,
        ttls: [2, 1],
        attempts: 1,
        restarts: 1,
        outages,
        horizon: 3,
    }
}

fn q_report(name: &str, cfg: &QConfig, outcome: &QOutcome) {
    println!(
        "{name}: {Q_NODES} nodes, TTLs {:?} ticks, {} attempts, {} restart(s), {} outage(s), \
         {} ticks: {} states, mutual exclusion {}",
        cfg.ttls,
        cfg.attempts,
        cfg.restarts,
        cfg.outages,
        cfg.horizon,
        outcome.states,
        if outcome.violation.is_some() {
            "VIOLATED"
        } else {
            "holds"
        }
    );
    if let Some(steps) = &outcome.violation {
        for (k, step) in steps.iter().enumerate() {
            println!("  {:>2}. {step}", k + 1);
        }
    }
}

#[test]
fn quarantine_by_the_longest_announced_ttl_keeps_mutual_exclusion() {
    for outages in [0, 1] {
        let c = q_config(Q_RULES, outages);
        let outcome = q_explore(&c);
        q_report("quarantine, longest announced TTL", &c, &outcome);
        assert!(outcome.violation.is_none());
    }
}

#[test]
fn checker_catches_a_quarantine_sized_by_the_own_ttl() {
    // Before issue 13: the application client waited out its own TTL only.
    let rules = QRules {
        announced: false,
        ..Q_RULES
    };
    let c = q_config(rules, 0);
    let outcome = q_explore(&c);
    q_report("MUTANT: quarantine of the own TTL", &c, &outcome);
    assert!(outcome.violation.is_some());
}

/// Every announcement sequence up to `depth` steps (each step: time forward by 0-3 ticks, a TTL
/// of 1-3 ticks), through `q_announce_with`: after each step, every lock announced so far that
/// may still live (taken at `t` with TTL `d`: until `t + d`) is covered by an entry with its TTL
/// or a longer one that lives at least as long. That is what a client judging a restarted node
/// reads from the others (`q_longest_live`): the timed model above has each client announce
/// once, so this is where the marks are checked. Returns the first sequence that breaks it.
fn announcements_uncovered(depth: usize, any_mark: bool) -> Option<Vec<(u64, u64)>> {
    grants_uncovered(depth, any_mark, Grant::InScript)
}

/// Where a plain grant's lock is set relative to the announcement of its TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    /// In the same script call (the acquisition scripts).
    InScript,
    /// A bare `SET NX PX` after an announcement sent ahead (`ANNOUNCE_AHEAD`, announcing with
    /// the margin), counted when it landed within what the TTL's mark had left after the
    /// announcement, less the TTL (`pure/ahead.rs`): the walk sets it at the last tick of that
    /// window, whose lock lives longest.
    Ahead { margin: u64 },
    /// MUTANT: the same, with the window the mark's whole remaining time (the TTL forgotten).
    AheadWholeMark { margin: u64 },
}

/// [`announcements_uncovered`] with the lock of each announcement set as `grant` says.
fn grants_uncovered(depth: usize, any_mark: bool, grant: Grant) -> Option<Vec<(u64, u64)>> {
    fn walk(
        depth: usize,
        any_mark: bool,
        grant: Grant,
        stair: &[(u64, u64)],
        marks: &[(u64, u64)],
        locks: &mut Vec<(u64, u64)>,
        now: u64,
    ) -> Option<Vec<(u64, u64)>> {
        if depth == 0 {
            return None;
        }
        for step in 0..4 {
            for ttl in 1..=3 {
                let at = now + step;
                let (mut st, mut mk) = (stair.to_vec(), marks.to_vec());
                let margin = match grant {
                    Grant::InScript => 0,
                    Grant::Ahead { margin } | Grant::AheadWholeMark { margin } => margin,
                };
                q_announce_with(&mut st, &mut mk, at, ttl, any_mark, margin);
                // What the TTL's mark has left after the call: the Lua's PTTL.
                let left = mk
                    .iter()
                    .find(|m| m.0 == ttl)
                    .map_or(0, |&(_, until)| until.saturating_sub(at));
                let set_at = match grant {
                    Grant::InScript => Some(at),
                    Grant::Ahead { .. } => left.checked_sub(ttl).map(|window| at + window),
                    Grant::AheadWholeMark { .. } => Some(at + left),
                };
                // No window: the client announces again and counts nothing under this one.
                let Some(set_at) = set_at else { continue };
                locks.push((set_at, ttl));
                let covered = locks.iter().all(|&(t, d)| {
                    t + d <= at || st.iter().any(|&(et, eu)| et >= d && eu >= t + d)
                });
                if !covered {
                    return Some(locks.clone());
                }
                if let Some(found) = walk(depth - 1, any_mark, grant, &st, &mk, locks, at) {
                    return Some(found);
                }
                locks.pop();
            }
        }
        None
    }
    walk(depth, any_mark, grant, &[], &[], &mut Vec::new(), 0)
}

#[test]
fn announcements_cover_every_lock_they_announce() {
    let depth = if FAST_BUILD { 7 } else { 6 };
    assert_eq!(announcements_uncovered(depth, false), None);
}

/// The plain path (issue 18): a bare `SET NX PX` counted under an announcement sent ahead on
/// its connection, within the mark's remaining time less the TTL. Every such lock stays
/// covered, as the locks of the acquisition scripts do.
#[test]
fn ahead_grants_are_covered_by_their_announcement() {
    let depth = if FAST_BUILD { 7 } else { 6 };
    for margin in 0..=2 {
        assert_eq!(
            grants_uncovered(depth, false, Grant::Ahead { margin }),
            None,
            "margin {margin}"
        );
    }
}

// Issue 27, item 1: the whole set `fencelock:ttls` expires as one key. The walks above keep a
// deadline per entry and no expiry for the set; `announce` also sets one for the whole set
// when it writes, and before the fix it was the caller's own `now + 2 ttl`: an announcement
// whose margin exceeds its TTL (a client with a TTL below two node timeouts) stops at no longer
// entry that ends within the margin, writes its own entry below it and expired the whole set,
// the longer entry with it, before the longer TTL's lock ended.

/// How `announce` expires the whole set when it writes an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetExpiry {
    /// Before issue 27: `PEXPIRE` to the caller's own deadline, `now + 2 ttl` (or the deadline
    /// of the entry it moved).
    Caller,
    /// The latest deadline in the set (`PEXPIREAT` to it): never shortens the record.
    Latest,
}

/// `announce` with the set's own expiry: `set_until` is the node time after which the key
/// `fencelock:ttls` is gone (`None`: no key). A set gone takes every entry with it.
fn q_announce_expiring(
    stair: &mut Vec<(u64, u64)>,
    marks: &mut Vec<(u64, u64)>,
    set_until: &mut Option<u64>,
    now: u64,
    ttl: u64,
    margin: u64,
    expiry: SetExpiry,
) -> Option<u64> {
    if set_until.is_some_and(|until| now > until) {
        stair.clear();
        *set_until = None;
    }
    let (used, expired_to) = q_announce_core(stair, marks, now, ttl, false, margin);
    if let Some(untl) = expired_to {
        *set_until = Some(match expiry {
            SetExpiry::Caller => untl,
            SetExpiry::Latest => stair.iter().map(|&(_, until)| until).max().unwrap_or(untl),
        });
    }
    used
}

/// Every sequence of up to `depth` announcements (time forward by 0-3 ticks; a TTL of 1-3
/// ticks; each with one of `margins`, as clients with different node timeouts announce), each
/// followed by its lock: with margin 0 in the same script (an acquisition script), otherwise a
/// bare `SET NX PX` at the last tick of its window (`Grant::Ahead`). Each lock is a resource of
/// its own. After each step, every lock that may still live must be covered by a visible entry
/// (its TTL or longer, lasting as long, in a set that has not expired). Returns the first
/// sequence (locks as `(set at, ttl)`) that breaks it.
fn set_expiry_uncovered(
    depth: usize,
    margins: &[u64],
    expiry: SetExpiry,
) -> Option<Vec<(u64, u64)>> {
    struct Walk<'a> {
        margins: &'a [u64],
        expiry: SetExpiry,
        locks: Vec<(u64, u64)>,
    }
    fn walk(
        w: &mut Walk<'_>,
        depth: usize,
        stair: &[(u64, u64)],
        marks: &[(u64, u64)],
        set_until: Option<u64>,
        now: u64,
    ) -> Option<Vec<(u64, u64)>> {
        if depth == 0 {
            return None;
        }
        for step in 0..4 {
            for ttl in 1..=3 {
                for &margin in w.margins {
                    let at = now + step;
                    let (mut st, mut mk, mut su) = (stair.to_vec(), marks.to_vec(), set_until);
                    q_announce_expiring(&mut st, &mut mk, &mut su, at, ttl, margin, w.expiry);
                    let left = mk
                        .iter()
                        .find(|m| m.0 == ttl)
                        .map_or(0, |&(_, until)| until.saturating_sub(at));
                    let set_at = if margin == 0 {
                        Some(at)
                    } else {
                        left.checked_sub(ttl).map(|window| at + window)
                    };
                    let Some(set_at) = set_at else { continue };
                    w.locks.push((set_at, ttl));
                    let covered = w.locks.iter().all(|&(t, d)| {
                        t + d <= at
                            || (su.is_some_and(|until| until >= t + d)
                                && st.iter().any(|&(et, eu)| et >= d && eu >= t + d))
                    });
                    if !covered {
                        return Some(w.locks.clone());
                    }
                    if let Some(found) = walk(w, depth - 1, &st, &mk, su, at) {
                        return Some(found);
                    }
                    w.locks.pop();
                }
            }
        }
        None
    }
    let mut w = Walk {
        margins,
        expiry,
        locks: Vec::new(),
    };
    walk(&mut w, depth, &[], &[], None, 0)
}

/// Margins side by side: none (acquisition scripts), below the shortest TTL, and above the
/// TTLs of 1 and 2 ticks (a TTL below two node timeouts).
const SET_EXPIRY_MARGINS: [u64; 3] = [0, 1, 3];

#[test]
fn the_set_expires_with_its_latest_entry_and_covers_every_lock() {
    let depth = if FAST_BUILD { 5 } else { 4 };
    assert_eq!(
        set_expiry_uncovered(depth, &SET_EXPIRY_MARGINS, SetExpiry::Latest),
        None
    );
}

#[test]
fn checker_catches_a_set_expired_to_the_callers_own_deadline() {
    // Issue 27, item 1, on the old Lua: a long TTL's lock, granted late in its announcement's
    // window, then a short TTL announced with a margin above it cuts the set.
    // Deepened one step at a time, so that the sequence found is a shortest one.
    let found = (1..=4)
        .find_map(|depth| set_expiry_uncovered(depth, &SET_EXPIRY_MARGINS, SetExpiry::Caller));
    println!("old Lua (set expired to the caller's own deadline): uncovered after {found:?}");
    let found = found.expect("the checker must find the cut record");
    assert_eq!(found.len(), 2, "{found:?}");
}

#[test]
fn checker_catches_an_ahead_window_that_forgets_the_ttl() {
    // MUTANT: counting a SET until the mark itself runs out leaves its lock alive a TTL after
    // every entry that covers it.
    let found = grants_uncovered(3, false, Grant::AheadWholeMark { margin: 1 });
    println!("MUTANT: a window of the whole mark: uncovered after {found:?}");
    assert!(found.is_some());
}

#[test]
fn checker_catches_an_announcement_stopped_at_any_mark() {
    // MUTANT: stopping at a mark with less than the TTL left leaves a lock that outlives every
    // entry of its TTL.
    let found = announcements_uncovered(5, true);
    println!("MUTANT: an announcement stopped at any mark: uncovered after {found:?}");
    assert!(found.is_some());
}

#[test]
fn checker_catches_a_quarantine_without_the_confirming_read() {
    // A node restarts between a job's SET there and its SETs on the others; the application's
    // first read (in an attempt that fails) misses the job's TTL, and its next attempt counts
    // the node on that reckoning.
    let rules = QRules {
        confirm: false,
        ..Q_RULES
    };
    let c = QConfig {
        attempts: 2,
        ..q_config(rules, 0)
    };
    let outcome = q_explore(&c);
    q_report("MUTANT: no confirming read", &c, &outcome);
    assert!(outcome.violation.is_some());
}

#[test]
fn checker_catches_a_quarantine_that_reads_too_few_nodes() {
    // The node that still records the job's TTL is unreachable: without the witness count the
    // application learns nothing and counts the restarted node too early.
    let rules = QRules {
        witnesses: false,
        ..Q_RULES
    };
    let c = q_config(rules, 1);
    let outcome = q_explore(&c);
    q_report("MUTANT: no witness count", &c, &outcome);
    assert!(outcome.violation.is_some());
    let none = q_config(
        QRules {
            quarantine: false,
            ..Q_RULES
        },
        0,
    );
    let outcome = q_explore(&none);
    q_report("MUTANT: no quarantine", &none, &outcome);
    assert!(outcome.violation.is_some());
}

#[test]
fn the_model_staircase_keeps_one_entry_per_ttl_in_use() {
    let mut stair = Vec::new();
    let mut marks = Vec::new();
    assert_eq!(q_announce(&mut stair, &mut marks, 0, 60), Some(0));
    assert_eq!(stair, vec![(60, 120)]);
    // The mark stops the next announcements of the TTL while more than one TTL is left.
    assert_eq!(q_announce(&mut stair, &mut marks, 59, 60), None);
    assert_eq!(stair, vec![(60, 120)]);
    assert_eq!(q_announce(&mut stair, &mut marks, 60, 60), Some(60));
    assert_eq!(stair, vec![(60, 180)]);
    // A shorter TTL whose lock ends before the longer one's adds nothing (the longer one's
    // deadline marks it).
    assert_eq!(q_announce(&mut stair, &mut marks, 61, 1), Some(61));
    assert_eq!(stair, vec![(60, 180)]);
    assert_eq!(q_announce(&mut stair, &mut marks, 62, 1), None);
    // Once the long one is over, the short one is recorded.
    assert_eq!(q_announce(&mut stair, &mut marks, 180, 1), Some(180));
    assert_eq!(stair, vec![(1, 182)]);
    // A longer TTL replaces the shorter ones it outlasts; a shorter one that outlasts it stays.
    q_announce(&mut stair, &mut marks, 181, 100);
    assert_eq!(stair, vec![(100, 381)]);
    assert_eq!(q_announce(&mut stair, &mut marks, 250, 20), Some(250));
    assert_eq!(stair, vec![(100, 381)]);
    assert_eq!(q_announce(&mut stair, &mut marks, 370, 20), Some(370));
    assert_eq!(stair, vec![(100, 381), (20, 410)]);
    assert_eq!(q_longest_live(&stair, 370), Some(100));
    assert_eq!(q_longest_live(&stair, 381), Some(20));
    assert_eq!(q_longest_live(&stair, 410), None);
}

/// The model's `q_announce` against the Lua on a real node: the same TTLs announced in the same
/// order, with and without a margin (the announcement sent ahead of plain grants), leave the
/// same entries. Changing the Lua without the model (or the other way round) fails here.
#[tokio::test]
async fn the_model_announces_as_the_lua_does() {
    use fencelock::protocol::{ANNOUNCE_FUNCTION, TTLS_KEY};
    let node = fencelock_testkit::RedisNode::start().unwrap();
    let script = format!("{ANNOUNCE_FUNCTION}\nreturn announce(ARGV[1], tonumber(ARGV[2]))");
    let node_now = || {
        let time = node.cli(&["TIME"]).unwrap();
        let mut t = time.lines();
        t.next().unwrap().parse::<u64>().unwrap() * 1000
            + t.next().unwrap().parse::<u64>().unwrap() / 1000
    };
    let ttls = [20u64, 40, 300, 900];
    let mut rng = Rng(7);
    let mut model: Vec<(u64, u64)> = Vec::new();
    let mut marks: Vec<(u64, u64)> = Vec::new();
    let mut set_until = None;
    let (mut stopped, mut written) = (0, 0);
    for step in 0..240 {
        if rng.below(3) == 0 {
            // Long enough for the shortest TTL's mark to run out (and, over the run, the others').
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            continue;
        }
        let ttl = ttls[rng.below(4)];
        // 1000 ms: above every TTL here, as a client with a TTL below two node timeouts asks
        // (issue 27, item 1: its announcements write below longer entries).
        let margin = [0u64, 0, 15, 50, 1000][rng.below(5)];
        let before = node_now();
        let used: u64 = node
            .cli(&["EVAL", &script, "0", &ttl.to_string(), &margin.to_string()])
            .unwrap()
            .parse()
            .unwrap();
        if used == 0 {
            // Stopped at the mark, after `before`: the model's mark had more than the TTL and
            // the margin left.
            stopped += 1;
            assert!(
                marks.iter().any(|&(t, u)| t == ttl && u > before + ttl + margin),
                "step {step}, ttl {ttl}: the Lua stopped at a mark the model does not have: {marks:?}"
            );
        } else {
            written += 1;
            assert_eq!(
                q_announce_expiring(
                    &mut model,
                    &mut marks,
                    &mut set_until,
                    used,
                    ttl,
                    margin,
                    SetExpiry::Latest
                ),
                Some(used),
                "step {step}, ttl {ttl}: the model stops at its mark where the Lua did not"
            );
        }
        let lua = node
            .cli(&["ZRANGE", TTLS_KEY, "0", "-1", "WITHSCORES"])
            .unwrap();
        let mut lines = lua.lines().filter(|l| !l.is_empty());
        let mut from_lua = Vec::new();
        while let (Some(member), Some(score)) = (lines.next(), lines.next()) {
            from_lua.push((
                member.parse::<u64>().unwrap(),
                score.parse::<u64>().unwrap(),
            ));
        }
        // The marks: each key's expiry time against the model's.
        let mut lua_marks = Vec::new();
        for t in ttls {
            let at: i64 = node
                .cli(&["PEXPIRETIME", &format!("{TTLS_KEY}:{t}")])
                .unwrap()
                .parse()
                .unwrap();
            if at > 0 {
                lua_marks.push((t, at as u64));
            }
        }
        // The node's time after every read: what expired before it is left out on both sides.
        let now = node_now();
        let live = |v: &[(u64, u64)]| -> Vec<(u64, u64)> {
            let mut v: Vec<(u64, u64)> = v
                .iter()
                .copied()
                .filter(|&(_, until)| until > now)
                .collect();
            v.sort();
            v
        };
        assert_eq!(live(&from_lua), live(&model), "step {step}, ttl {ttl}");
        // A mark is set to expire at an absolute time one millisecond before the deadline it
        // stands for (the model's mark): exactly, however long the script was held up (with a
        // PX counted from the SET, a loaded box once made it expire 7 ms after the deadline).
        // The model then takes the node's expiry for that mark, so that both decide the next
        // announcements on the same deadline.
        if used != 0 {
            let at = lua_marks.iter().find(|m| m.0 == ttl).map(|m| m.1);
            let mark = marks.iter_mut().find(|m| m.0 == ttl).unwrap();
            assert!(
                at.is_some_and(|at| at + 1 == mark.1),
                "mark {ttl}, step {step}: the Lua's expires at {at:?}, the model's at {}",
                mark.1
            );
            mark.1 = at.unwrap();
        }
        assert_eq!(
            live(&lua_marks),
            live(&marks),
            "marks, step {step}, ttl {ttl}"
        );
        // The whole set expires exactly with its latest entry (issue 27, item 1).
        let set_at: i64 = node
            .cli(&["PEXPIRETIME", TTLS_KEY])
            .unwrap()
            .parse()
            .unwrap();
        if set_at > 0 {
            assert_eq!(
                Some(set_at as u64),
                set_until,
                "the set's expiry, step {step}, ttl {ttl}: {from_lua:?}"
            );
        }
    }
    // Both paths ran.
    assert!(
        stopped > 10 && written > 10,
        "{stopped} stopped, {written} written"
    );
}

/// The script sent ahead of plain grants replies with what its TTL's mark has left, which is
/// the window the client and `grants_uncovered(.., Grant::Ahead)` take: checked against the
/// mark's own `PTTL` read right after, over both of `announce`'s paths, and at least the TTL
/// and the margin asked for (or two TTLs).
#[tokio::test]
async fn the_ahead_announcement_replies_with_its_marks_time_left() {
    use fencelock::protocol::{ANNOUNCE_AHEAD_SCRIPT, TTLS_KEY};
    let node = fencelock_testkit::RedisNode::start().unwrap();
    let node_now = || {
        let time = node.cli(&["TIME"]).unwrap();
        let mut t = time.lines();
        t.next().unwrap().parse::<i64>().unwrap() * 1000
            + t.next().unwrap().parse::<i64>().unwrap() / 1000
    };
    let ttls = [20u64, 40, 300];
    let mut rng = Rng(11);
    let mut full = 0;
    for step in 0..120 {
        if rng.below(3) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            continue;
        }
        let ttl = ttls[rng.below(3)];
        let margin = [0u64, 10, 30][rng.below(3)];
        let before = node_now();
        let left: i64 = node
            .cli(&[
                "EVAL",
                ANNOUNCE_AHEAD_SCRIPT,
                "0",
                &ttl.to_string(),
                &margin.to_string(),
            ])
            .unwrap()
            .parse()
            .unwrap();
        let after = node_now();
        let expires: i64 = node
            .cli(&["PEXPIRETIME", &format!("{TTLS_KEY}:{ttl}")])
            .unwrap()
            .parse()
            .unwrap();
        // The reply is the mark's PTTL at some moment of the script, which ran between the two
        // readings of the node's clock (each rounded down to the millisecond). On a slow box a
        // short TTL's mark may be gone by the second reading: then only its bound is checked.
        assert!(
            (expires < 0 && left < 2 * ttl as i64)
                || (expires - after - 1 <= left && left <= expires - before),
            "step {step}, ttl {ttl}: replied {left} ms, the mark expires {} ms after the \
             first reading and {} ms after the second",
            expires - before,
            expires - after
        );
        // Every path leaves the mark expiring at least the TTL and the margin (or two TTLs, if
        // less), less a millisecond, after the script's reading of TIME, which came after
        // `before`; the reply, read later in the script, may be short of that by the script's
        // own time (at most `after - before`).
        let least = (ttl + margin).min(2 * ttl) as i64 - 1;
        assert!(
            (expires < 0 || expires - before >= least) && left + (after - before) + 1 >= least,
            "step {step}, ttl {ttl}, margin {margin}: replied {left} ms, the mark expires {} ms \
             after the first reading",
            expires - before
        );
        // A full announcement: the mark one TTL past the entry's TTL, less a millisecond.
        if expires - before >= 2 * ttl as i64 - 1 {
            full += 1;
        }
    }
    assert!(full > 5, "{full} full announcements");
}
