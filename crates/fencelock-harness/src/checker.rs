//! The safety checker: judges a [`History`] alone. Pure functions, no I/O.
//!
//! What counts as a violation, and why it can be told from the history:
//!
//! - **Stale fenced transaction accepted**: a committed fenced row whose token is lower than a
//!   token the storage had already committed for the record. The fenced storage must never let
//!   one through; in fenced modes the count must be 0.
//! - **Token order**: committed writes' tokens must not decrease in commit order.
//! - **Duplicate token**: two different critical sections committed with the same token (the
//!   storage admits equal tokens as "the same holder writing again", so a duplicate would let two
//!   holders through).
//! - **Interleaved critical sections** (two holders at once, by the storage's order): between a
//!   critical section's read and its write, another critical section committed a row.
//! - **Stale read / lost update**: a write whose `value_read` is not the value the previous
//!   committed write left: it overwrote an update it never saw. Every write is `read + 1`, so
//!   `writes - final value` counts the increments lost.
//! - **Grant order** (the check that does not trust the fence): if grant A's validity ended
//!   before grant B was made (by the clients' stamps on one machine-wide monotonic clock), A's
//!   token must be below B's. The fence compares tokens only with tokens, so a protocol that
//!   hands a later holder a lower token passes every storage check above (the older holder is
//!   accepted, the newer one refused and counted as "stale refused"); this check sees it.
//! - **Superseded write accepted**: a fenced write committed after the storage committed a row of
//!   a holder granted after this writer's validity ended. Whatever the fence said, the writer's
//!   lock had passed on and the newer holder had already acted: a stale write accepted.
//! - **Overlapping validity**: a lock granted while another client's lock was still within its
//!   validity and not yet released. Redlock promises this never happens; a pause past the TTL
//!   does not break it (the paused lock's validity has ended), a clock jump or a restart without
//!   persistence does.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::history::{ClientEvent, EventKind, FaultEvent, History, Op, Record, StorageRow};
use crate::mode::FaultKind;

/// What kind of violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViolationKind {
    /// A fenced row committed with a token lower than one already committed.
    StaleAccepted,
    /// A committed write's token is lower than the previous committed write's.
    TokenOrder,
    /// Two critical sections committed with the same token.
    DuplicateToken,
    /// Another critical section committed between a critical section's read and write.
    Interleaved,
    /// A write based on a read that a later-committed write had already made stale.
    StaleRead,
    /// A lock granted within another client's validity.
    OverlappingValidity,
    /// A grant's token is not above the token of a grant whose validity had ended before it.
    GrantOrder,
    /// A fenced write committed after a row of a holder granted after the writer's validity.
    SupersededWrite,
    /// `run` mode: a process of one holder's command alive after another holder's started.
    ProcessOverlap,
    /// Semaphore modes: more than N holders within their validity at once.
    TooManyHolders,
    /// Election modes: a term held by two leaders, or not above an earlier, ended leader's.
    TermOrder,
}

/// One violation, located in the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// The kind.
    pub kind: ViolationKind,
    /// The record, for storage violations.
    pub record: Option<Record>,
    /// The storage row (commit position) that shows it, for storage violations.
    pub seq: Option<i64>,
    /// When, in nanoseconds since the epoch.
    pub mono_ns: u64,
    /// The clients involved.
    pub clients: Vec<u32>,
    /// What happened, for people.
    pub detail: String,
    /// For a grant-order violation, when the earlier grant was made: the faults between then and
    /// `mono_ns` are the suspects.
    #[serde(default)]
    pub since_ns: Option<u64>,
}

/// Findings on one record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordFindings {
    /// Committed writes.
    pub writes: u64,
    /// The final value.
    pub final_value: i64,
    /// Increments lost: committed writes minus the final value.
    pub lost_updates: i64,
    /// Writes based on a stale read.
    pub stale_reads: Vec<Violation>,
    /// Critical sections another one committed inside of.
    pub interleaved: Vec<Violation>,
}

/// Liveness figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Liveness {
    /// `acquire` calls.
    pub attempts: u64,
    /// Grants.
    pub grants: u64,
    /// Failed acquisitions by cause.
    pub failures: BTreeMap<String, u64>,
    /// The first failure of each cause, as the library worded it: which nodes refused or did
    /// not answer, and why.
    #[serde(default)]
    pub failure_examples: BTreeMap<String, String>,
    /// Acquire latency (call to grant), median, milliseconds.
    pub latency_p50_ms: f64,
    /// 99th percentile, milliseconds.
    pub latency_p99_ms: f64,
    /// Maximum, milliseconds.
    pub latency_max_ms: f64,
    /// Fenced reads and writes refused as stale (the fence doing its job).
    pub stale_rejected: u64,
    /// Releases that found the lock already lost.
    pub releases_lost: u64,
    /// `redlock-rwlock` mode: of the grants, the read locks.
    #[serde(default)]
    pub shared_grants: u64,
    /// `redlock-rwlock` mode: the most read locks within their validity at once.
    #[serde(default)]
    pub most_readers: u64,
}

/// Everything the checker found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Findings {
    /// The record written through the fenced storage.
    pub fenced: RecordFindings,
    /// The record only the lock protects.
    pub counter: RecordFindings,
    /// Stale fenced rows committed (must be empty in fenced modes).
    pub stale_accepted: Vec<Violation>,
    /// Token order violations among committed writes.
    pub token_order: Vec<Violation>,
    /// Tokens committed by two critical sections.
    pub duplicate_tokens: Vec<Violation>,
    /// Grants within another client's validity.
    pub overlapping_validity: Vec<Violation>,
    /// Grants whose token is not above the token of a grant that had ended before them.
    pub grant_order: Vec<Violation>,
    /// Fenced writes accepted after a later holder's row was committed.
    pub superseded_writes: Vec<Violation>,
    /// `run` mode: processes of two holders' commands alive at once.
    #[serde(default)]
    pub process_overlaps: Vec<Violation>,
    /// `run` mode: what the commands' processes did.
    #[serde(default)]
    pub commands: CommandFindings,
    /// Semaphore modes: moments with more than N permit holders at once.
    #[serde(default)]
    pub too_many_holders: Vec<Violation>,
    /// Semaphore modes: the most permit holders at once.
    #[serde(default)]
    pub most_holders: usize,
    /// Election modes: two leaders with one term, or a later leader with a term not larger.
    #[serde(default)]
    pub term_order: Vec<Violation>,
    /// Liveness.
    pub liveness: Liveness,
}

/// `run` mode: what the commands and their processes did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandFindings {
    /// Commands whose processes started (holders).
    pub holders: u64,
    /// Processes started, by name (`main`, `bg`, `setsid`).
    pub processes: BTreeMap<String, u64>,
    /// Processes that stamped their start but not their end (killed).
    pub killed: u64,
    /// Supervisors that died of SIGKILL.
    pub supervisors_killed: u64,
    /// Of those, the ones whose command had started (its processes had to be killed with it).
    pub supervisors_killed_holding: u64,
    /// `fencelock run` exit codes, by code (`signal 9` for a SIGKILL).
    pub exits: BTreeMap<String, u64>,
}

impl Findings {
    /// Violations of the data the fenced storage protects (in unfenced modes: written without a
    /// token check): stale accepted, token order, duplicates, interleavings, stale reads.
    pub fn fenced_record_violations(&self) -> usize {
        self.stale_accepted.len()
            + self.superseded_writes.len()
            + self.token_order.len()
            + self.duplicate_tokens.len()
            + self.fenced.interleaved.len()
            + self.fenced.stale_reads.len()
            + usize::from(self.fenced.lost_updates != 0)
    }

    /// Violations on the counter, which only the lock protects.
    pub fn counter_violations(&self) -> usize {
        self.counter.interleaved.len()
            + self.counter.stale_reads.len()
            + usize::from(self.counter.lost_updates != 0)
    }

    /// Violations that harmed the fenced record's data: a stale or superseded row accepted,
    /// tokens out of order, an interleaving, a lost update. (A duplicate token breaks the token
    /// guarantee but harms data only if the two holders' writes interleave, which the others
    /// then show.)
    pub fn fenced_data_violations(&self) -> usize {
        self.fenced_record_violations() - self.duplicate_tokens.len()
    }

    /// Violations of the token guarantee the fence relies on: tokens out of grant order and
    /// duplicate tokens. Any of these fails a fenced run, whether or not the data was harmed in
    /// this run: the next interleaving could harm it.
    pub fn token_violations(&self) -> usize {
        self.grant_order.len() + self.duplicate_tokens.len()
    }

    /// What fails a fenced run: harmed data or a broken token guarantee.
    pub fn fenced_failures(&self) -> usize {
        self.fenced_record_violations() + self.grant_order.len()
    }

    /// Every violation, for the timeline.
    pub fn all(&self) -> impl Iterator<Item = &Violation> {
        self.stale_accepted
            .iter()
            .chain(&self.superseded_writes)
            .chain(&self.grant_order)
            .chain(&self.token_order)
            .chain(&self.duplicate_tokens)
            .chain(&self.fenced.interleaved)
            .chain(&self.fenced.stale_reads)
            .chain(&self.counter.interleaved)
            .chain(&self.counter.stale_reads)
            .chain(&self.overlapping_validity)
            .chain(&self.process_overlaps)
            .chain(&self.too_many_holders)
            .chain(&self.term_order)
    }
}

/// Runs every check on `history`.
pub fn check(history: &History) -> Findings {
    let mut rows: Vec<&StorageRow> = history.rows.iter().collect();
    rows.sort_by_key(|r| r.seq);
    let of = |record| -> Vec<&StorageRow> {
        rows.iter()
            .copied()
            .filter(|r| r.record == record && r.slot.is_none())
            .collect()
    };
    let fenced_rows = of(Record::Fenced);
    let counter_rows = of(Record::Counter);
    // A semaphore's permits are checked slot by slot (`check_slots`), not as one lock.
    let slots = slots(&history.events);
    let events: Vec<ClientEvent> = history
        .events
        .iter()
        .filter(|e| !slots.contains_key(&(e.client, e.acq)))
        .cloned()
        .collect();
    let (stale_accepted, token_order, mut duplicate_tokens) = check_tokens(&fenced_rows);
    let grants = grants(&events);
    duplicate_tokens.extend(check_duplicate_grants(&grants));
    let mut findings = Findings {
        fenced: check_record(&fenced_rows, history.final_fenced),
        counter: check_record(&counter_rows, history.final_counter),
        stale_accepted,
        token_order,
        duplicate_tokens,
        overlapping_validity: check_validity(&events),
        grant_order: check_grant_order(&grants),
        superseded_writes: check_superseded(&fenced_rows, &grants),
        process_overlaps: check_processes(&history.events),
        commands: commands(&history.events),
        liveness: Liveness {
            most_readers: most_readers(&history.events),
            ..liveness(&history.events)
        },
        ..Findings::default()
    };
    check_slots(history, &rows, &slots, &mut findings);
    findings
}

/// Semaphore modes: the slot of each permit's acquisition, from the `slot` events.
pub fn slots(events: &[ClientEvent]) -> HashMap<(u32, u64), u32> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Slot { slot } => Some(((e.client, e.acq), slot)),
            _ => None,
        })
        .collect()
}

/// Semaphore modes: the mutex's rules, slot by slot. Each slot is a lock of its own with a
/// fenced record of its own, fenced by the slot's tokens (tokens of two slots are not
/// comparable): per slot, no stale or superseded write accepted, tokens in commit and grant
/// order and unique, no interleaving or lost update, and no grant inside another holder's
/// validity of the same slot. What is found joins the findings of the same kind. `rows` are
/// the storage rows in commit order.
pub fn check_slots(
    history: &History,
    rows: &[&StorageRow],
    slots: &HashMap<(u32, u64), u32>,
    f: &mut Findings,
) {
    let mut ids: BTreeSet<u32> = slots.values().copied().collect();
    ids.extend(rows.iter().filter_map(|r| r.slot));
    for slot in ids {
        let slot_rows: Vec<&StorageRow> = rows
            .iter()
            .copied()
            .filter(|r| r.slot == Some(slot))
            .collect();
        let events: Vec<ClientEvent> = history
            .events
            .iter()
            .filter(|e| slots.get(&(e.client, e.acq)) == Some(&slot))
            .cloned()
            .collect();
        let (stale, order, dups) = check_tokens(&slot_rows);
        f.stale_accepted.extend(stale);
        f.token_order.extend(order);
        f.duplicate_tokens.extend(dups);
        let final_value = history
            .final_slots
            .get(slot as usize)
            .copied()
            .unwrap_or_default();
        let record = check_record(&slot_rows, final_value);
        f.fenced.writes += record.writes;
        f.fenced.lost_updates += record.lost_updates;
        f.fenced.stale_reads.extend(record.stale_reads);
        f.fenced.interleaved.extend(record.interleaved);
        let grants = grants(&events);
        f.duplicate_tokens.extend(check_duplicate_grants(&grants));
        f.grant_order.extend(check_grant_order(&grants));
        f.superseded_writes
            .extend(check_superseded(&slot_rows, &grants));
        f.overlapping_validity.extend(check_validity(&events));
    }
}

/// Semaphore modes: moments when more than `permits` clients held a permit within its
/// validity. A permit is held from its grant's stamp (after the quorum answered) to the earlier
/// of its validity deadline and the start of its release, as [`check_validity`] reads a lock:
/// an excess here is certain. One violation per grant that made the excess, naming the holders.
pub fn check_permit_holders(
    events: &[ClientEvent],
    slots: &HashMap<(u32, u64), u32>,
    permits: u32,
) -> Vec<Violation> {
    permit_sweep(events, slots, permits).1
}

/// Semaphore modes: the most permit holders within their validity at once (so that a run
/// shows its permits were used at once, and the rule above had something to check).
pub fn most_permit_holders(events: &[ClientEvent], slots: &HashMap<(u32, u64), u32>) -> usize {
    permit_sweep(events, slots, u32::MAX).0
}

fn permit_sweep(
    events: &[ClientEvent],
    slots: &HashMap<(u32, u64), u32>,
    permits: u32,
) -> (usize, Vec<Violation>) {
    let mut most = 0;
    let mut spans: Vec<(u64, u64, u32, u64)> = grants(events)
        .iter()
        .filter(|g| slots.contains_key(&(g.client, g.acq)))
        .map(|g| (g.granted_ns, g.end_ns, g.client, g.acq))
        .filter(|(start, end, _, _)| end > start)
        .collect();
    spans.sort_unstable();
    let mut out = Vec::new();
    // The spans still open at the current start: (end, start, client, acq).
    let mut open: Vec<(u64, u64, u32, u64)> = Vec::new();
    for (start, end, client, acq) in spans {
        open.retain(|o| o.0 > start);
        open.push((end, start, client, acq));
        most = most.max(open.len());
        if open.len() > permits as usize {
            let since = open.iter().map(|o| o.1).min().unwrap_or(start);
            let mut holders: Vec<(u32, u64)> = open.iter().map(|o| (o.2, o.3)).collect();
            holders.sort_unstable();
            out.push(Violation {
                kind: ViolationKind::TooManyHolders,
                record: None,
                seq: None,
                mono_ns: start,
                clients: holders.iter().map(|h| h.0).collect(),
                detail: format!(
                    "{} permit holders at once with N = {permits} at {:.3} s: (client, acquisition) {holders:?}",
                    open.len(),
                    start as f64 / 1e9
                ),
                since_ns: Some(since),
            });
        }
    }
    (most, out)
}

/// Election modes: one leader per term, and terms increasing: a term granted to two leaders, or
/// a leader elected after another's leadership had ended (by their stamps) with a term not above
/// the other's. The term is the leadership lock's fencing token, so these are the token rules
/// ([`check_duplicate_grants`], [`check_grant_order`]) read as an election's.
pub fn check_terms(grants: &[Grant]) -> Vec<Violation> {
    check_duplicate_grants(grants)
        .into_iter()
        .chain(check_grant_order(grants))
        .map(|mut v| {
            v.kind = ViolationKind::TermOrder;
            v.detail = format!(
                "election: {}",
                v.detail
                    .replace("token", "term")
                    .replace("granted", "elected")
            );
            v
        })
        .collect()
}

/// One process of a `run` command, as its own stamps show it: alive from `first` to `last`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProcSpan {
    first: u64,
    last: u64,
    client: u32,
    acq: u64,
    proc: String,
    pid: u32,
}

/// The processes of the `run` mode's commands, from their stamps.
fn proc_spans(events: &[ClientEvent]) -> Vec<ProcSpan> {
    let mut by_proc: HashMap<(u32, u64, u32), ProcSpan> = HashMap::new();
    for e in events {
        let (pid, name) = match &e.kind {
            EventKind::ProcStart { proc, pid } => (*pid, Some(proc)),
            EventKind::ProcBeat { pid } | EventKind::ProcEnd { pid } => (*pid, None),
            _ => continue,
        };
        let span = by_proc
            .entry((e.client, e.acq, pid))
            .or_insert_with(|| ProcSpan {
                first: e.mono_ns,
                last: e.mono_ns,
                client: e.client,
                acq: e.acq,
                proc: String::new(),
                pid,
            });
        span.first = span.first.min(e.mono_ns);
        span.last = span.last.max(e.mono_ns);
        if let Some(name) = name {
            span.proc.clone_from(name);
        }
    }
    let mut spans: Vec<ProcSpan> = by_proc.into_values().collect();
    spans.sort_by_key(|s| (s.first, s.last, s.client, s.acq, s.pid));
    spans
}

/// `run` mode: processes of two different holders (one `fencelock run` each) alive at once. A
/// process is certainly alive between its first and last stamp, so a stamp of one holder's
/// process after another holder's process stamped its start is two holders at once: a process
/// still running after the lock had passed on (a background job the lock was released under, or
/// one that outlived its killed supervisor). Reports at least one violation whenever any two
/// holders' spans overlap.
pub fn check_processes(events: &[ClientEvent]) -> Vec<Violation> {
    let mut out = Vec::new();
    // The span with the latest end so far.
    let mut open: Option<ProcSpan> = None;
    for s in proc_spans(events) {
        if let Some(o) = &open {
            if s.first < o.last && (o.client, o.acq) != (s.client, s.acq) {
                out.push(Violation {
                    kind: ViolationKind::ProcessOverlap,
                    record: None,
                    seq: None,
                    mono_ns: s.first,
                    clients: vec![s.client, o.client],
                    detail: format!(
                        "process {} (pid {}) of client {}'s command (acquisition {}) was still running at {:.3} s, {:.1} ms after process {} (pid {}) of client {}'s command (acquisition {}) had started: two holders' processes at once",
                        o.proc,
                        o.pid,
                        o.client,
                        o.acq,
                        o.last as f64 / 1e9,
                        (o.last - s.first) as f64 / 1e6,
                        s.proc,
                        s.pid,
                        s.client,
                        s.acq
                    ),
                    since_ns: Some(o.first),
                });
            }
        }
        if open.as_ref().is_none_or(|o| s.last > o.last) {
            open = Some(s);
        }
    }
    out
}

/// `run` mode: holders, processes by name, killed processes and supervisors.
pub fn commands(events: &[ClientEvent]) -> CommandFindings {
    let mut f = CommandFindings::default();
    let spans = proc_spans(events);
    let mut ended: BTreeSet<(u32, u64, u32)> = BTreeSet::new();
    let mut holders: BTreeSet<(u32, u64)> = BTreeSet::new();
    for e in events {
        match &e.kind {
            EventKind::ProcEnd { pid } => {
                ended.insert((e.client, e.acq, *pid));
            }
            EventKind::RunExit { code, signal } => {
                let key = match (code, signal) {
                    (Some(c), _) => format!("exit {c}"),
                    (None, Some(s)) => format!("signal {s}"),
                    (None, None) => "unknown".to_owned(),
                };
                *f.exits.entry(key).or_default() += 1;
            }
            _ => {}
        }
    }
    for s in &spans {
        holders.insert((s.client, s.acq));
        *f.processes.entry(s.proc.clone()).or_default() += 1;
        if !ended.contains(&(s.client, s.acq, s.pid)) {
            f.killed += 1;
        }
    }
    f.holders = holders.len() as u64;
    for e in events {
        if let EventKind::RunExit {
            signal: Some(9), ..
        } = e.kind
        {
            f.supervisors_killed += 1;
            if holders.contains(&(e.client, e.acq)) {
                f.supervisors_killed_holding += 1;
            }
        }
    }
    f
}

/// One grant, as its client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The client.
    pub client: u32,
    /// Its acquisition number.
    pub acq: u64,
    /// When `acquire` returned the lock (after the quorum answered and, with fencing, after the
    /// counters were raised on a quorum), as the client stamped it.
    pub granted_ns: u64,
    /// The earliest the grant can have happened: the start of the granted attempt when the log
    /// has it, else the stamp. A client paused between its grant and its log line stamps the
    /// grant late; the attempt's start is fixed inside the library and does not move.
    pub earliest_ns: u64,
    /// When the lock ended as far as its holder may rely on it: the earlier of the validity
    /// deadline and the start of `release` (stamped before any key is deleted).
    pub end_ns: u64,
    /// The fencing token.
    pub token: Option<u64>,
}

/// The grants in `events`, ordered by their earliest grant time.
pub fn grants(events: &[ClientEvent]) -> Vec<Grant> {
    let mut by_key: HashMap<(u32, u64), Grant> = HashMap::new();
    let mut released: HashMap<(u32, u64), u64> = HashMap::new();
    for e in events {
        match &e.kind {
            EventKind::AcquireOk {
                token,
                deadline_ns,
                attempt_ns,
            } => {
                by_key.insert(
                    (e.client, e.acq),
                    Grant {
                        client: e.client,
                        acq: e.acq,
                        granted_ns: e.mono_ns,
                        earliest_ns: attempt_ns.map_or(e.mono_ns, |a| a.min(e.mono_ns)),
                        end_ns: *deadline_ns,
                        token: *token,
                    },
                );
            }
            EventKind::ReleaseStart => {
                released.insert((e.client, e.acq), e.mono_ns);
            }
            _ => {}
        }
    }
    let mut out: Vec<Grant> = by_key
        .into_iter()
        .map(|(key, mut g)| {
            if let Some(&r) = released.get(&key) {
                g.end_ns = g.end_ns.min(r);
            }
            g
        })
        .collect();
    out.sort_by_key(|g| (g.earliest_ns, g.granted_ns, g.client, g.acq));
    out
}

/// Grants whose token is not above the token of a grant whose validity ended before they were
/// made (before their [`Grant::earliest_ns`]). This is the order the fence relies on and cannot
/// check itself: it compares tokens with tokens, never with the order of the grants. (Grants
/// that overlap in time are not ordered here: which of two concurrent holders is "later" is not
/// defined by the clients' stamps.)
pub fn check_grant_order(grants: &[Grant]) -> Vec<Violation> {
    let mut by_end: Vec<&Grant> = grants.iter().filter(|g| g.token.is_some()).collect();
    by_end.sort_by_key(|g| g.end_ns);
    let mut out = Vec::new();
    let mut ended = 0;
    // The grant with the largest token among those that ended before the current grant.
    let mut top: Option<&Grant> = None;
    for b in grants {
        let Some(tb) = b.token else { continue };
        while ended < by_end.len() && by_end[ended].end_ns < b.earliest_ns {
            let a = by_end[ended];
            if top.is_none_or(|t| a.token > t.token) {
                top = Some(a);
            }
            ended += 1;
        }
        let Some(a) = top else { continue };
        let ta = a.token.unwrap_or_default();
        if ta >= tb && (a.client, a.acq) != (b.client, b.acq) {
            out.push(Violation {
                kind: ViolationKind::GrantOrder,
                record: None,
                seq: None,
                mono_ns: b.granted_ns,
                clients: vec![b.client, a.client],
                detail: format!(
                    "client {} (acquisition {}) was granted token {tb} at {:.3} s, but client {} (acquisition {}) had token {ta} from a grant at {:.3} s whose validity ended at {:.3} s: a later holder got a {} token",
                    b.client,
                    b.acq,
                    b.granted_ns as f64 / 1e9,
                    a.client,
                    a.acq,
                    a.granted_ns as f64 / 1e9,
                    a.end_ns as f64 / 1e9,
                    if ta == tb { "duplicate" } else { "lower" }
                ),
                since_ns: Some(a.granted_ns),
            });
        }
    }
    out
}

/// Two grants with the same token, committed or not: the fence admits equal tokens as one holder
/// writing again, so a duplicate lets two holders through.
pub fn check_duplicate_grants(grants: &[Grant]) -> Vec<Violation> {
    let mut first: HashMap<u64, &Grant> = HashMap::new();
    let mut out = Vec::new();
    for g in grants {
        let Some(t) = g.token else { continue };
        match first.get(&t) {
            Some(a) => out.push(Violation {
                kind: ViolationKind::DuplicateToken,
                record: None,
                seq: None,
                mono_ns: g.granted_ns,
                clients: vec![g.client, a.client],
                detail: format!(
                    "token {t} granted to client {} (acquisition {}) and to client {} (acquisition {})",
                    a.client, a.acq, g.client, g.acq
                ),
                since_ns: None,
            }),
            None => {
                first.insert(t, g);
            }
        }
    }
    out
}

/// Fenced writes committed after the storage committed a row (read or write) of a holder that
/// was granted the lock after the writer's validity ended. The fence let the write through
/// (it is in the table), so the writer's token was not below the newer holder's: whatever the
/// fence said, the lock had passed on and the newer holder had acted, and the write is stale.
/// `rows` are one record's rows in commit order.
pub fn check_superseded(rows: &[&StorageRow], grants: &[Grant]) -> Vec<Violation> {
    let by_key: HashMap<(u32, u64), &Grant> =
        grants.iter().map(|g| ((g.client, g.acq), g)).collect();
    let mut out = Vec::new();
    // The holder with the latest grant among those with a committed row so far.
    let mut newest: Option<&Grant> = None;
    for row in rows {
        let Some(g) = by_key.get(&(row.client, row.acq)).copied() else {
            continue;
        };
        if row.op == Op::Write {
            if let Some(n) = newest {
                if n.earliest_ns > g.end_ns && (n.client, n.acq) != (g.client, g.acq) {
                    out.push(storage_violation(
                        ViolationKind::SupersededWrite,
                        row,
                        vec![row.client, n.client],
                        format!(
                            "client {} (acquisition {}, token {}) committed a write after client {} (acquisition {}, token {}), granted {:.1} ms after the writer's validity ended, had committed a row: a stale write accepted",
                            row.client,
                            row.acq,
                            fmt_token(g.token),
                            n.client,
                            n.acq,
                            fmt_token(n.token),
                            (n.earliest_ns - g.end_ns) as f64 / 1e6
                        ),
                    ));
                }
            }
        }
        if newest.is_none_or(|n| g.earliest_ns > n.earliest_ns) {
            newest = Some(g);
        }
    }
    out
}

fn fmt_token(t: Option<u64>) -> String {
    t.map_or_else(|| "none".to_owned(), |t| t.to_string())
}

fn storage_violation(
    kind: ViolationKind,
    row: &StorageRow,
    clients: Vec<u32>,
    detail: String,
) -> Violation {
    Violation {
        kind,
        record: Some(row.record),
        seq: Some(row.seq),
        mono_ns: row.mono_ns,
        clients,
        detail,
        since_ns: None,
    }
}

/// Token checks over one record's rows in commit order: stale rows accepted, writes out of token
/// order, and tokens committed by two different critical sections.
pub fn check_tokens(rows: &[&StorageRow]) -> (Vec<Violation>, Vec<Violation>, Vec<Violation>) {
    let mut stale = Vec::new();
    let mut order = Vec::new();
    let mut dups = Vec::new();
    let mut max_seen: Option<(u64, u32)> = None;
    let mut last_write: Option<u64> = None;
    let mut owner: HashMap<u64, (u32, u64)> = HashMap::new();
    for row in rows {
        let Some(token) = row.token else { continue };
        if let Some((max, by)) = max_seen {
            if token < max {
                stale.push(storage_violation(
                    ViolationKind::StaleAccepted,
                    row,
                    vec![row.client, by],
                    format!(
                        "client {} committed a {:?} with token {token} after token {max} (client {by}) was committed",
                        row.client, row.op
                    ),
                ));
            }
        }
        if max_seen.is_none_or(|(max, _)| token > max) {
            max_seen = Some((token, row.client));
        }
        match owner.get(&token) {
            Some(&(c, a)) if (c, a) != (row.client, row.acq) => dups.push(storage_violation(
                ViolationKind::DuplicateToken,
                row,
                vec![row.client, c],
                format!(
                    "token {token} committed by client {} (acquisition {}) and client {c} (acquisition {a})",
                    row.client, row.acq
                ),
            )),
            Some(_) => {}
            None => {
                owner.insert(token, (row.client, row.acq));
            }
        }
        if row.op == Op::Write {
            if let Some(prev) = last_write {
                if token < prev {
                    order.push(storage_violation(
                        ViolationKind::TokenOrder,
                        row,
                        vec![row.client],
                        format!(
                            "write with token {token} committed after a write with token {prev}"
                        ),
                    ));
                }
            }
            last_write = Some(token);
        }
    }
    (stale, order, dups)
}

/// Read-modify-write checks over one record's rows in commit order (rows of other records must
/// not be in `rows`).
pub fn check_record(rows: &[&StorageRow], final_value: i64) -> RecordFindings {
    let mut findings = RecordFindings {
        final_value,
        ..RecordFindings::default()
    };
    // The value the last committed write left (the record starts at 0).
    let mut current = 0i64;
    let mut last_writer: Option<u32> = None;
    // Where each critical section's latest read sits in `rows`.
    let mut read_at: HashMap<(u32, u64), usize> = HashMap::new();
    for (i, row) in rows.iter().enumerate() {
        let holder = (row.client, row.acq);
        match row.op {
            Op::Read => {
                read_at.insert(holder, i);
            }
            Op::Write => {
                findings.writes += 1;
                if row.value_read != current {
                    findings.stale_reads.push(storage_violation(
                        ViolationKind::StaleRead,
                        row,
                        vec![row.client],
                        format!(
                            "client {} wrote {} based on reading {}, but the value was {current} (last written by client {}): an update was lost",
                            row.client,
                            row.value_written.unwrap_or_default(),
                            row.value_read,
                            last_writer.map_or("?".into(), |c| c.to_string())
                        ),
                    ));
                }
                if let Some(&r) = read_at.get(&holder) {
                    let between: Vec<u32> = rows[r + 1..i]
                        .iter()
                        .filter(|o| (o.client, o.acq) != holder)
                        .map(|o| o.client)
                        .collect();
                    if !between.is_empty() {
                        let others: BTreeSet<u32> = between.iter().copied().collect();
                        let mut clients = vec![row.client];
                        clients.extend(others.iter().copied().filter(|c| *c != row.client));
                        findings.interleaved.push(storage_violation(
                            ViolationKind::Interleaved,
                            row,
                            clients,
                            format!(
                                "{} row(s) of other critical sections (clients {others:?}) committed between client {}'s read (seq {}) and write (seq {}): two holders at once",
                                between.len(),
                                row.client,
                                rows[r].seq,
                                row.seq
                            ),
                        ));
                    }
                }
                current = row.value_written.unwrap_or(current);
                last_writer = Some(row.client);
            }
        }
    }
    findings.lost_updates = findings.writes as i64 - final_value;
    findings
}

/// One holder's validity as its client saw it: from the grant to the earlier of the deadline
/// and the release call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Span {
    start: u64,
    end: u64,
    client: u32,
    acq: u64,
    /// A read lock (`redlock-rwlock` mode): read locks may overlap each other.
    shared: bool,
}

/// The holders' spans in `events`, by start. The lock is held from the grant to the earlier of
/// the deadline and the release call; the grant is stamped after the quorum answered and the
/// release before any key is deleted, so an overlap of two spans is certain, not an artefact
/// of when the stamps were taken. A grant stamped after its own validity ended (its client
/// stopped between the quorum's answer and the stamp) held nothing in the stamped interval: its
/// span is empty and left out.
fn spans(events: &[ClientEvent]) -> Vec<Span> {
    // (client, acq) -> its span, ending at the deadline until its release is seen.
    let mut held: HashMap<(u32, u64), Span> = HashMap::new();
    for e in events {
        let (client, acq) = (e.client, e.acq);
        let (deadline_ns, shared) = match &e.kind {
            EventKind::AcquireOk { deadline_ns, .. } => (*deadline_ns, false),
            EventKind::ReadOk { deadline_ns, .. } => (*deadline_ns, true),
            EventKind::ReleaseStart => {
                if let Some(span) = held.get_mut(&(client, acq)) {
                    span.end = span.end.min(e.mono_ns);
                }
                continue;
            }
            _ => continue,
        };
        let span = Span {
            start: e.mono_ns,
            end: deadline_ns,
            client,
            acq,
            shared,
        };
        held.insert((client, acq), span);
    }
    let mut spans: Vec<Span> = held.into_values().filter(|s| s.end > s.start).collect();
    spans.sort();
    spans
}

/// Grants that happened while another client's lock was within its validity and not released.
/// Read locks (`redlock-rwlock` mode) may overlap each other; a write lock may overlap nobody.
pub fn check_validity(events: &[ClientEvent]) -> Vec<Violation> {
    let mut out = Vec::new();
    // The span that runs longest among those seen so far: of any holder, and of the writers.
    let mut open_any: Option<Span> = None;
    let mut open_writer: Option<Span> = None;
    for span in spans(events) {
        // A writer must meet nobody; a reader must meet no writer.
        let against = if span.shared { open_writer } else { open_any };
        if let Some(open) = against.filter(|o| span.start < o.end && o.client != span.client) {
            let (what, other) = match (span.shared, open.shared) {
                (true, _) => ("a read lock", "write lock"),
                (false, true) => ("the write lock", "read lock"),
                (false, false) => ("the lock", "lock"),
            };
            out.push(Violation {
                kind: ViolationKind::OverlappingValidity,
                record: None,
                seq: None,
                mono_ns: span.start,
                clients: vec![span.client, open.client],
                detail: format!(
                    "client {} (acquisition {}) was granted {what} {:.1} ms before client {}'s {other} (acquisition {}) ended its validity",
                    span.client,
                    span.acq,
                    (open.end - span.start) as f64 / 1e6,
                    open.client,
                    open.acq
                ),
                since_ns: Some(open.start),
            });
        }
        if open_any.is_none_or(|o| span.end > o.end) {
            open_any = Some(span);
        }
        if !span.shared && open_writer.is_none_or(|o| span.end > o.end) {
            open_writer = Some(span);
        }
    }
    out
}

/// The most read locks within their validity at once (`redlock-rwlock` mode: readers share).
pub fn most_readers(events: &[ClientEvent]) -> u64 {
    let mut edges: Vec<(u64, i64)> = spans(events)
        .into_iter()
        .filter(|s| s.shared)
        .flat_map(|s| [(s.start, 1), (s.end, -1)])
        .collect();
    // An end before a start at the same instant: touching spans do not overlap.
    edges.sort_by_key(|&(t, d)| (t, d));
    let (mut now, mut most) = (0i64, 0i64);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as u64
}

/// The overlaps (from [`check_validity`]) that no clock jump explains: between the two grants,
/// no `clock-forward` or `clock-backward` episode was in progress. Redlock's mutual exclusion
/// rests on the nodes' clocks, so a jump can break it (docs/guarantees.md says so); a restart
/// without persistence must not, once restart quarantine is on. A mode with quarantine fails on
/// any of these.
pub fn exclusion_violations(overlaps: &[Violation], faults: &[FaultEvent]) -> Vec<Violation> {
    overlaps
        .iter()
        .filter(|v| {
            let from = v.since_ns.unwrap_or(v.mono_ns);
            !faults.iter().any(|f| {
                FaultClass::ClockJump.kinds().contains(&f.kind)
                    && f.start_ns <= v.mono_ns
                    && f.end_ns >= from
            })
        })
        .cloned()
        .collect()
}

/// A class of faults without which a fenced run shows little: the cases fencing exists for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultClass {
    /// A client paused past its TTL (`pause-client`).
    ClientPause,
    /// A node's clock jumped (`clock-forward`, `clock-backward`).
    ClockJump,
    /// A node restarted (`restart-nopersist`, `restart-persist`, `kill`, `kill-leader`).
    Restart,
    /// A `fencelock run` supervisor killed with SIGKILL (`kill-supervisor`, the `run` mode).
    SupervisorKill,
    /// A node lost its data while a client held the lock (`restart-nopersist`,
    /// `restart-two-nopersist`, `flushall`): the case the restart quarantine and the amnesia
    /// guard exist for. A plain `kill` does not count here, although its node comes back empty
    /// too: nobody held the lock on purpose when it struck.
    DataLoss,
}

impl FaultClass {
    /// Every class.
    pub const ALL: [FaultClass; 5] = [
        FaultClass::ClientPause,
        FaultClass::ClockJump,
        FaultClass::Restart,
        FaultClass::SupervisorKill,
        FaultClass::DataLoss,
    ];

    /// The fault kinds of the class.
    pub fn kinds(self) -> &'static [FaultKind] {
        match self {
            FaultClass::ClientPause => &[FaultKind::PauseClient],
            FaultClass::ClockJump => &[FaultKind::ClockForward, FaultKind::ClockBackward],
            FaultClass::Restart => &[
                FaultKind::RestartNopersist,
                FaultKind::RestartPersist,
                FaultKind::Kill,
                FaultKind::KillLeader,
            ],
            FaultClass::SupervisorKill => &[FaultKind::KillSupervisor],
            FaultClass::DataLoss => &[
                FaultKind::RestartNopersist,
                FaultKind::RestartTwoNopersist,
                FaultKind::Flushall,
            ],
        }
    }

    /// The class's name, as the report prints it.
    pub fn name(self) -> &'static str {
        match self {
            FaultClass::ClientPause => "client pause past the TTL",
            FaultClass::ClockJump => "clock jump",
            FaultClass::Restart => "node restart",
            FaultClass::SupervisorKill => "supervisor kill",
            FaultClass::DataLoss => "node data loss while held",
        }
    }
}

/// The fault classes that never fired although the mode can take some kind of them
/// (`can_take`: the kinds the mode does not skip, whether or not they were asked for). A fenced
/// run without them checks only the easy cases, so it fails: a clean history then proves little.
pub fn uncovered(can_take: &[FaultKind], fired: &[FaultEvent]) -> Vec<FaultClass> {
    FaultClass::ALL
        .into_iter()
        .filter(|c| c.kinds().iter().any(|k| can_take.contains(k)))
        .filter(|c| !fired.iter().any(|f| c.kinds().contains(&f.kind)))
        .collect()
}

/// The fault kinds in progress around each grant-order violation (between the earlier grant and
/// the later one), counted by kind; `none` counts violations with no fault in that window.
pub fn inversion_suspects(
    grant_order: &[Violation],
    faults: &[FaultEvent],
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for v in grant_order {
        let from = v.since_ns.unwrap_or(v.mono_ns);
        let kinds: BTreeSet<&'static str> = faults
            .iter()
            .filter(|f| f.start_ns <= v.mono_ns && f.end_ns >= from)
            .map(|f| f.kind.name())
            .collect();
        if kinds.is_empty() {
            *out.entry("none".to_owned()).or_default() += 1;
        }
        for k in kinds {
            *out.entry(k.to_owned()).or_default() += 1;
        }
    }
    out
}

/// Grants, failures by cause and acquire latency percentiles.
pub fn liveness(events: &[ClientEvent]) -> Liveness {
    let mut live = Liveness::default();
    let mut started: HashMap<(u32, u64), u64> = HashMap::new();
    let mut latencies = Vec::new();
    for e in events {
        let key = (e.client, e.acq);
        match &e.kind {
            EventKind::AcquireStart => {
                live.attempts += 1;
                started.insert(key, e.mono_ns);
            }
            EventKind::AcquireOk { .. } | EventKind::ReadOk { .. } => {
                live.grants += 1;
                if matches!(e.kind, EventKind::ReadOk { .. }) {
                    live.shared_grants += 1;
                }
                if let Some(s) = started.get(&key) {
                    latencies.push(e.mono_ns.saturating_sub(*s));
                }
            }
            EventKind::AcquireFail { cause, detail } => {
                *live.failures.entry(cause.clone()).or_default() += 1;
                if let Some(detail) = detail {
                    live.failure_examples
                        .entry(cause.clone())
                        .or_insert_with(|| format!("client {}: {detail}", e.client));
                }
            }
            EventKind::ReadRejected { .. } | EventKind::WriteRejected { .. } => {
                live.stale_rejected += 1;
            }
            EventKind::Release { ok: false, .. } => live.releases_lost += 1,
            // `run` mode: the command's main process started, so the lock was granted.
            EventKind::ProcStart { proc, .. } if proc == crate::runcmd::MAIN => {
                live.grants += 1;
                if let Some(s) = started.get(&key) {
                    latencies.push(e.mono_ns.saturating_sub(*s));
                }
            }
            EventKind::RunExit {
                code: Some(code), ..
            } if *code != 0 => {
                *live.failures.entry(format!("run exit {code}")).or_default() += 1;
            }
            _ => {}
        }
    }
    latencies.sort_unstable();
    let pct = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() - 1) as f64 * p).round() as usize;
        latencies[i] as f64 / 1e6
    };
    live.latency_p50_ms = pct(0.5);
    live.latency_p99_ms = pct(0.99);
    live.latency_max_ms = pct(1.0);
    live
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::Mode;

    fn row(
        seq: i64,
        record: Record,
        op: Op,
        client: u32,
        acq: u64,
        token: Option<u64>,
        read: i64,
    ) -> StorageRow {
        StorageRow {
            seq,
            record,
            op,
            client,
            acq,
            token,
            value_read: read,
            value_written: (op == Op::Write).then_some(read + 1),
            mono_ns: seq as u64 * 1000,
            slot: None,
        }
    }

    fn fenced(seq: i64, op: Op, client: u32, acq: u64, token: u64, read: i64) -> StorageRow {
        row(seq, Record::Fenced, op, client, acq, Some(token), read)
    }

    fn ev(client: u32, acq: u64, mono_ns: u64, kind: EventKind) -> ClientEvent {
        ClientEvent {
            client,
            acq,
            mono_ns,
            wall_ms: 0,
            kind,
        }
    }

    fn history(rows: Vec<StorageRow>, final_fenced: i64, final_counter: i64) -> History {
        History {
            rows,
            events: vec![],
            final_fenced,
            final_counter,
            final_slots: vec![],
        }
    }

    #[test]
    fn a_clean_fenced_history_has_no_violations() {
        let h = history(
            vec![
                fenced(1, Op::Read, 0, 1, 1, 0),
                fenced(2, Op::Write, 0, 1, 1, 0),
                row(3, Record::Counter, Op::Write, 0, 1, None, 0),
                fenced(4, Op::Read, 1, 1, 2, 1),
                fenced(5, Op::Write, 1, 1, 2, 1),
                row(6, Record::Counter, Op::Write, 1, 1, None, 1),
            ],
            2,
            2,
        );
        let f = check(&h);
        assert_eq!(f.fenced_record_violations(), 0, "{f:#?}");
        assert_eq!(f.counter_violations(), 0, "{f:#?}");
        assert_eq!(f.fenced.writes, 2);
    }

    #[test]
    fn the_pause_scenario_without_fencing_is_flagged() {
        // A reads 0, pauses past the TTL; B takes the lock, reads 0, writes 1; A wakes, writes 1.
        let h = history(
            vec![
                row(1, Record::Fenced, Op::Read, 0, 1, None, 0),
                row(2, Record::Fenced, Op::Read, 1, 1, None, 0),
                row(3, Record::Fenced, Op::Write, 1, 1, None, 0),
                row(4, Record::Fenced, Op::Write, 0, 1, None, 0),
            ],
            1,
            0,
        );
        let f = check(&h);
        assert_eq!(f.fenced.lost_updates, 1);
        assert_eq!(f.fenced.stale_reads.len(), 1);
        assert_eq!(f.fenced.stale_reads[0].seq, Some(4));
        assert_eq!(
            f.fenced.interleaved.len(),
            1,
            "A's read and write straddle B's"
        );
        assert!(f.fenced_record_violations() > 0);
    }

    #[test]
    fn a_stale_token_that_got_through_is_flagged() {
        // B (token 8) committed, then A's write with token 7 was (wrongly) accepted.
        let h = history(
            vec![
                fenced(1, Op::Read, 0, 1, 7, 0),
                fenced(2, Op::Read, 1, 1, 8, 0),
                fenced(3, Op::Write, 1, 1, 8, 0),
                fenced(4, Op::Write, 0, 1, 7, 0),
            ],
            1,
            0,
        );
        let f = check(&h);
        assert_eq!(f.stale_accepted.len(), 1);
        assert_eq!(f.stale_accepted[0].seq, Some(4));
        assert_eq!(f.token_order.len(), 1);
        assert!(f.fenced_record_violations() >= 3);
    }

    #[test]
    fn a_rejected_stale_write_leaves_a_clean_history() {
        // The same run with a working fence: A's write was refused, so it is not in the table.
        let h = history(
            vec![
                fenced(1, Op::Read, 0, 1, 7, 0),
                fenced(2, Op::Read, 1, 1, 8, 0),
                fenced(3, Op::Write, 1, 1, 8, 0),
            ],
            1,
            0,
        );
        let f = check(&h);
        assert_eq!(f.fenced_record_violations(), 0, "{f:#?}");
    }

    #[test]
    fn a_duplicate_token_is_flagged_even_in_order() {
        let h = history(
            vec![
                fenced(1, Op::Read, 0, 1, 5, 0),
                fenced(2, Op::Write, 0, 1, 5, 0),
                fenced(3, Op::Read, 1, 3, 5, 1),
                fenced(4, Op::Write, 1, 3, 5, 1),
            ],
            2,
            0,
        );
        let f = check(&h);
        assert_eq!(
            f.duplicate_tokens.len(),
            2,
            "both rows of the second holder"
        );
        assert!(f.stale_accepted.is_empty());
        assert!(f.token_order.is_empty());
    }

    #[test]
    fn two_readers_with_one_token_are_duplicates() {
        // Two critical sections read with the same token: the second is a duplicate.
        let h = history(
            vec![
                fenced(1, Op::Read, 0, 1, 7, 0),
                fenced(2, Op::Read, 1, 1, 7, 0),
            ],
            0,
            0,
        );
        let f = check(&h);
        assert_eq!(f.duplicate_tokens.len(), 1);
        // A read-only overlap is a duplicate token, but no write straddles anything yet.
        assert!(f.fenced.interleaved.is_empty());
    }

    #[test]
    fn counter_lost_updates_come_from_final_value_and_stale_reads() {
        let h = history(
            vec![
                row(1, Record::Counter, Op::Write, 0, 1, None, 0),
                row(2, Record::Counter, Op::Write, 1, 1, None, 0),
                row(3, Record::Counter, Op::Write, 2, 1, None, 1),
            ],
            0,
            2,
        );
        let f = check(&h);
        assert_eq!(f.counter.writes, 3);
        assert_eq!(f.counter.lost_updates, 1);
        assert_eq!(f.counter.stale_reads.len(), 1);
        assert_eq!(f.counter.stale_reads[0].seq, Some(2));
        assert_eq!(f.counter_violations(), 2);
        assert_eq!(f.fenced_record_violations(), 0);
    }

    #[test]
    fn overlapping_validity_is_flagged_but_a_pause_past_the_ttl_is_not() {
        let ms = 1_000_000u64;
        let ok = |deadline_ms: u64| EventKind::AcquireOk {
            token: None,
            deadline_ns: deadline_ms * ms,
            attempt_ns: None,
        };
        // A granted at 0 valid until 990; paused; B granted at 1000: no overlap.
        let pause = vec![
            ev(0, 1, 0, ok(990)),
            ev(1, 1, 1000 * ms, ok(1990)),
            ev(1, 1, 1010 * ms, EventKind::ReleaseStart),
            ev(0, 1, 2500 * ms, EventKind::ReleaseStart),
        ];
        assert!(check_validity(&pause).is_empty());
        // A clock jump: B granted at 300 while A is valid until 990 and has not released.
        let jump = vec![
            ev(0, 1, 0, ok(990)),
            ev(1, 1, 300 * ms, ok(1290)),
            ev(0, 1, 600 * ms, EventKind::ReleaseStart),
        ];
        let v = check_validity(&jump);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].clients, vec![1, 0]);
        // Back-to-back grants after a release are fine, and a client's own next grant too.
        let fine = vec![
            ev(0, 1, 0, ok(990)),
            ev(0, 1, 10 * ms, EventKind::ReleaseStart),
            ev(1, 1, 11 * ms, ok(1000)),
            ev(1, 1, 20 * ms, EventKind::ReleaseStart),
        ];
        assert!(check_validity(&fine).is_empty());
    }

    #[test]
    fn readers_may_share_but_never_meet_a_valid_writer() {
        let ms = 1_000_000u64;
        let read = |deadline_ms: u64| EventKind::ReadOk {
            deadline_ns: deadline_ms * ms,
            attempt_ns: None,
            last_writer: None,
        };
        let write = |deadline_ms: u64| EventKind::AcquireOk {
            token: Some(7),
            deadline_ns: deadline_ms * ms,
            attempt_ns: None,
        };
        // Two readers at once, then a writer after both released: clean, 2 readers at once.
        let shared = vec![
            ev(0, 1, 0, read(990)),
            ev(1, 1, 100 * ms, read(1090)),
            ev(0, 1, 200 * ms, EventKind::ReleaseStart),
            ev(1, 1, 300 * ms, EventKind::ReleaseStart),
            ev(2, 1, 310 * ms, write(1300)),
            ev(2, 1, 400 * ms, EventKind::ReleaseStart),
        ];
        assert!(check_validity(&shared).is_empty());
        assert_eq!(most_readers(&shared), 2);
        // A writer granted while a reader is valid, and a reader granted under a valid writer.
        let writer_in = vec![
            ev(0, 1, 0, read(990)),
            ev(1, 1, 100 * ms, write(1090)),
            ev(0, 1, 200 * ms, EventKind::ReleaseStart),
        ];
        let v = check_validity(&writer_in);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].detail.contains("the write lock"), "{}", v[0].detail);
        let reader_in = vec![
            ev(0, 1, 0, write(990)),
            ev(1, 1, 100 * ms, read(1090)),
            ev(2, 1, 150 * ms, read(1140)),
            ev(0, 1, 200 * ms, EventKind::ReleaseStart),
        ];
        let v = check_validity(&reader_in);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v.iter().all(|v| v.detail.contains("a read lock")));
        // A reader paused past its validity does not count against the writer after it.
        let paused = vec![
            ev(0, 1, 0, read(990)),
            ev(1, 1, 1000 * ms, write(1990)),
            ev(1, 1, 1010 * ms, EventKind::ReleaseStart),
            ev(0, 1, 2500 * ms, EventKind::ReleaseStart),
        ];
        assert!(check_validity(&paused).is_empty());
    }

    #[test]
    fn an_overlap_counts_against_exclusion_unless_a_clock_jump_was_in_progress() {
        let ms = 1_000_000u64;
        let ok = |deadline_ms: u64| EventKind::AcquireOk {
            token: None,
            deadline_ns: deadline_ms * ms,
            attempt_ns: None,
        };
        // The job (client 1, 3 s TTL) granted at 100 ms; an application client (500 ms TTL)
        // granted at 700 ms, inside the job's validity.
        let events = vec![
            ev(1, 1, 100 * ms, ok(3000)),
            ev(0, 1, 700 * ms, ok(1190)),
            ev(0, 1, 710 * ms, EventKind::ReleaseStart),
            ev(1, 1, 1900 * ms, EventKind::ReleaseStart),
        ];
        let overlaps = check_validity(&events);
        assert_eq!(overlaps.len(), 1, "{overlaps:#?}");
        assert_eq!(overlaps[0].since_ns, Some(100 * ms));
        let during = |kind, start_ms: u64, end_ms: u64| FaultEvent {
            start_ns: start_ms * ms,
            end_ns: end_ms * ms,
            ..FaultEvent::of_kinds(&[kind]).remove(0)
        };
        // A restart without persistence between the grants: quarantine had to prevent it.
        let restart = [during(FaultKind::RestartNopersist, 50, 2000)];
        assert_eq!(exclusion_violations(&overlaps, &restart).len(), 1);
        // A forward clock jump in progress explains it; one that ended before does not.
        let jump = [during(FaultKind::ClockForward, 50, 2000)];
        assert!(exclusion_violations(&overlaps, &jump).is_empty());
        let earlier = [during(FaultKind::ClockForward, 0, 90)];
        assert_eq!(exclusion_violations(&overlaps, &earlier).len(), 1);
        // A grant stamped after its own validity ended (a pause before the stamp) holds
        // nothing in the stamped interval: no overlap with the grant made meanwhile.
        // Client 0 was granted at about 0 (valid until 990) and stopped before its stamp;
        // client 1 was granted at 1000, after that validity; client 0 stamps at 1500.
        let late_stamp = vec![
            ev(1, 1, 1000 * ms, ok(1990)),
            ev(0, 1, 1500 * ms, ok(990)),
            ev(0, 1, 1510 * ms, EventKind::ReleaseStart),
        ];
        assert!(check_validity(&late_stamp).is_empty());
    }

    #[test]
    fn liveness_counts_and_percentiles() {
        let ms = 1_000_000u64;
        let mut events = vec![];
        for i in 0..100u64 {
            events.push(ev(0, i, i * 1000 * ms, EventKind::AcquireStart));
            events.push(ev(
                0,
                i,
                i * 1000 * ms + (i + 1) * ms,
                EventKind::AcquireOk {
                    token: None,
                    deadline_ns: 0,
                    attempt_ns: None,
                },
            ));
        }
        events.push(ev(1, 1, 0, EventKind::AcquireStart));
        events.push(ev(
            1,
            1,
            5,
            EventKind::AcquireFail {
                cause: "contention".into(),
                detail: Some("held by another client on 2 of 3 nodes".into()),
            },
        ));
        let l = liveness(&events);
        assert_eq!((l.attempts, l.grants), (101, 100));
        assert_eq!(l.failures.get("contention"), Some(&1));
        assert_eq!(
            l.failure_examples.get("contention").map(String::as_str),
            Some("client 1: held by another client on 2 of 3 nodes")
        );
        assert_eq!(l.latency_max_ms, 100.0);
        assert!(
            (l.latency_p50_ms - 51.0).abs() <= 1.0,
            "{}",
            l.latency_p50_ms
        );
        assert!(l.latency_p99_ms >= 98.0);
    }

    #[test]
    fn salted_tokens_are_judged_by_order_only() {
        // Tokens as the library issues them: (prefix << 16) | random salt. They jump by about
        // 65536 per grant and are not consecutive; only their order matters. Two grants that saw
        // the same largest counter share a prefix and differ in salt: the fence orders them.
        let t = |prefix: u64, salt: u64| (prefix << 16) | salt;
        let clean = history(
            vec![
                fenced(1, Op::Read, 0, 1, t(1, 40_000), 0),
                fenced(2, Op::Write, 0, 1, t(1, 40_000), 0),
                fenced(3, Op::Read, 1, 1, t(7, 3), 1),
                fenced(4, Op::Write, 1, 1, t(7, 3), 1),
            ],
            2,
            0,
        );
        assert_eq!(check(&clean).fenced_record_violations(), 0);
        // Same prefix (a node lost its counter): the lower salt committing after the higher one
        // is a stale row, not a duplicate.
        let same_prefix = history(
            vec![
                fenced(1, Op::Read, 0, 1, t(2, 9_000), 0),
                fenced(2, Op::Write, 0, 1, t(2, 9_000), 0),
                fenced(3, Op::Write, 1, 1, t(2, 5), 0),
            ],
            1,
            0,
        );
        let f = check(&same_prefix);
        assert_eq!(f.stale_accepted.len(), 1);
        assert!(f.duplicate_tokens.is_empty());
    }

    const MS: u64 = 1_000_000;

    /// A grant at `at_ms`, valid for `valid_ms`, released at `release_ms` (if any).
    fn grant(
        client: u32,
        acq: u64,
        at_ms: u64,
        valid_ms: u64,
        release_ms: Option<u64>,
        token: u64,
    ) -> Vec<ClientEvent> {
        let mut v = vec![ev(
            client,
            acq,
            at_ms * MS,
            EventKind::AcquireOk {
                token: Some(token),
                deadline_ns: (at_ms + valid_ms) * MS,
                attempt_ns: None,
            },
        )];
        if let Some(r) = release_ms {
            v.push(ev(client, acq, r * MS, EventKind::ReleaseStart));
        }
        v
    }

    fn fenced_at(
        seq: i64,
        op: Op,
        client: u32,
        acq: u64,
        token: u64,
        read: i64,
        at_ms: u64,
    ) -> StorageRow {
        StorageRow {
            mono_ns: at_ms * MS,
            ..fenced(seq, op, client, acq, token, read)
        }
    }

    #[test]
    fn a_later_grant_with_a_lower_token_is_flagged_though_the_storage_checks_pass() {
        // What the write-back without its counter update produces: A is granted token 50_000,
        // pauses before touching the storage, its validity ends at 100 ms; B is granted at 200 ms
        // with the lower token 30, reads and writes; A wakes and reads and writes with its higher
        // token. The fence accepts every row (tokens rise in commit order), so the old checks
        // see a clean history; by the order of the grants, A's write is stale.
        let t = |prefix: u64, salt: u64| (prefix << 16) | salt;
        let mut events = grant(0, 1, 0, 100, Some(900), t(1, 50_000));
        events.extend(grant(1, 1, 200, 100, Some(260), t(1, 30)));
        let h = History {
            rows: vec![
                fenced_at(1, Op::Read, 1, 1, t(1, 30), 0, 210),
                fenced_at(2, Op::Write, 1, 1, t(1, 30), 0, 250),
                fenced_at(3, Op::Read, 0, 1, t(1, 50_000), 1, 800),
                fenced_at(4, Op::Write, 0, 1, t(1, 50_000), 1, 810),
            ],
            events,
            final_fenced: 2,
            final_counter: 0,
            final_slots: vec![],
        };
        let f = check(&h);
        assert!(f.stale_accepted.is_empty() && f.token_order.is_empty());
        assert!(f.fenced.interleaved.is_empty() && f.fenced.lost_updates == 0);
        assert_eq!(f.grant_order.len(), 1, "{f:#?}");
        assert_eq!(f.grant_order[0].clients, vec![1, 0]);
        assert_eq!(f.superseded_writes.len(), 1, "{f:#?}");
        assert_eq!(f.superseded_writes[0].seq, Some(4));
        assert!(f.fenced_failures() >= 2);
        assert!(f.fenced_data_violations() >= 1);
    }

    #[test]
    fn an_inversion_the_fence_refuses_still_fails_the_token_guarantee() {
        // A (token 9) reads, its lock ends at 100 ms; B is granted at 150 ms with token 5 and is
        // refused (no row): the storage is fine and counts a "stale refused", but the newer
        // holder got the lower token.
        let mut events = grant(0, 1, 0, 100, None, 9);
        events.extend(grant(1, 1, 150, 100, Some(200), 5));
        let h = History {
            rows: vec![
                fenced_at(1, Op::Read, 0, 1, 9, 0, 10),
                fenced_at(2, Op::Write, 0, 1, 9, 0, 20),
            ],
            events,
            final_fenced: 1,
            final_counter: 0,
            final_slots: vec![],
        };
        let f = check(&h);
        assert_eq!(f.fenced_data_violations(), 0);
        assert_eq!(f.grant_order.len(), 1);
        assert_eq!(f.token_violations(), 1);
        assert_eq!(f.fenced_failures(), 1);
    }

    #[test]
    fn an_equal_token_after_an_ended_grant_is_a_grant_order_violation_and_a_duplicate() {
        let mut events = grant(0, 1, 0, 100, Some(50), 7);
        events.extend(grant(1, 1, 60, 100, Some(90), 7));
        let f = check(&History {
            events,
            ..History::default()
        });
        assert_eq!(f.grant_order.len(), 1);
        assert_eq!(f.duplicate_tokens.len(), 1, "grants alone, no rows: {f:#?}");
        assert!(f.fenced_failures() >= 2);
    }

    #[test]
    fn grants_in_token_order_and_concurrent_grants_are_not_flagged() {
        // Sequential grants with rising tokens; then C granted at 500 ms while D's lock (granted
        // at 450 ms with a lower token) is still valid: concurrent grants are not ordered by the
        // stamps (the overlap check reports them).
        let mut events = grant(0, 1, 0, 100, Some(40), 1);
        events.extend(grant(1, 1, 50, 100, Some(90), 2));
        events.extend(grant(0, 2, 100, 100, Some(140), 3));
        events.extend(grant(2, 1, 500, 100, None, 4));
        events.extend(grant(1, 2, 450, 300, None, 5));
        let grants = grants(&events);
        assert_eq!(grants.len(), 5);
        assert_eq!(grants[0].end_ns, 40 * MS, "ends at the release call");
        assert!(check_grant_order(&grants).is_empty());
        assert!(check_duplicate_grants(&grants).is_empty());
        assert_eq!(check_validity(&events).len(), 1);
    }

    #[test]
    fn a_grant_stamped_late_by_a_pause_is_ordered_by_its_attempt() {
        // A's attempt started at 0 and was granted token 1, but A was paused before it logged the
        // grant (stamped at 900 ms). B (token 2) held and released in between. By the stamps A
        // came after B with a lower token; by the attempt's start it did not.
        let mut events = vec![ev(
            0,
            1,
            900 * MS,
            EventKind::AcquireOk {
                token: Some(1),
                deadline_ns: 100 * MS,
                attempt_ns: Some(0),
            },
        )];
        events.extend(grant(1, 1, 300, 100, Some(350), 2));
        let g = grants(&events);
        assert_eq!(g[0].earliest_ns, 0);
        assert!(
            check_grant_order(&g).is_empty(),
            "{:#?}",
            check_grant_order(&g)
        );
        // Without the attempt's start the late stamp would be flagged.
        let mut stamped = events.clone();
        if let EventKind::AcquireOk { attempt_ns, .. } = &mut stamped[0].kind {
            *attempt_ns = None;
        }
        assert_eq!(check_grant_order(&grants(&stamped)).len(), 1);
    }

    #[test]
    fn a_write_before_the_next_holder_touched_the_storage_is_not_superseded() {
        // A's validity ends at 100 ms, B is granted at 150 ms, A's write commits at 160 ms before
        // B's read: the storage saw A's whole critical section first, and B read A's write.
        let mut events = grant(0, 1, 0, 100, None, 1);
        events.extend(grant(1, 1, 150, 100, Some(240), 2));
        let rows = [
            fenced_at(1, Op::Read, 0, 1, 1, 0, 10),
            fenced_at(2, Op::Write, 0, 1, 1, 0, 160),
            fenced_at(3, Op::Read, 1, 1, 2, 1, 170),
            fenced_at(4, Op::Write, 1, 1, 2, 1, 180),
        ];
        let refs: Vec<&StorageRow> = rows.iter().collect();
        assert!(check_superseded(&refs, &grants(&events)).is_empty());
    }

    #[test]
    fn fault_classes_that_did_not_fire_are_named_unless_the_mode_cannot_take_them() {
        let fired = FaultEvent::of_kinds;
        let redis: Vec<FaultKind> = FaultKind::ALL
            .into_iter()
            .filter(|k| Mode::RedlockFenced.skips(*k).is_none())
            .collect();
        assert_eq!(
            uncovered(&redis, &fired(&[FaultKind::Latency, FaultKind::PauseNode])),
            vec![
                FaultClass::ClientPause,
                FaultClass::ClockJump,
                FaultClass::Restart,
                FaultClass::DataLoss
            ]
        );
        // A restart that keeps the data (AOF) is a restart, not a data loss.
        assert_eq!(
            uncovered(
                &redis,
                &fired(&[
                    FaultKind::PauseClient,
                    FaultKind::ClockBackward,
                    FaultKind::RestartPersist
                ])
            ),
            vec![FaultClass::DataLoss]
        );
        assert_eq!(
            uncovered(
                &redis,
                &fired(&[
                    FaultKind::PauseClient,
                    FaultKind::ClockBackward,
                    FaultKind::RestartPersist,
                    FaultKind::Flushall
                ])
            ),
            vec![]
        );
        // etcd cannot take clock faults: a run without one is not short of anything.
        let etcd: Vec<FaultKind> = FaultKind::ALL
            .into_iter()
            .filter(|k| Mode::Etcd.skips(*k).is_none())
            .collect();
        assert_eq!(
            uncovered(&etcd, &fired(&[FaultKind::PauseClient])),
            vec![FaultClass::Restart]
        );
        assert_eq!(
            uncovered(
                &etcd,
                &fired(&[FaultKind::PauseClient, FaultKind::KillLeader])
            ),
            vec![]
        );
    }

    #[test]
    fn processes_of_two_holders_at_once_are_flagged_and_a_holders_own_are_not() {
        let ms = 1_000_000u64;
        let start = |c, a, t, name: &str, pid| {
            ev(
                c,
                a,
                t * ms,
                EventKind::ProcStart {
                    proc: name.into(),
                    pid,
                },
            )
        };
        let beat = |c, a, t, pid| ev(c, a, t * ms, EventKind::ProcBeat { pid });
        let end = |c, a, t, pid| ev(c, a, t * ms, EventKind::ProcEnd { pid });
        // Holder (0, 1): main 0-100, a background job 10-900 (it outlives main; run keeps the
        // lock). Holder (1, 1) starts at 950: clean. Its own processes overlap each other.
        let mut events = vec![
            start(0, 1, 0, "main", 10),
            end(0, 1, 100, 10),
            start(0, 1, 10, "bg", 11),
            beat(0, 1, 500, 11),
            end(0, 1, 900, 11),
            start(1, 1, 950, "main", 20),
            start(1, 1, 951, "setsid", 21),
            end(1, 1, 990, 20),
            end(1, 1, 1200, 21),
            ev(
                1,
                1,
                1300 * ms,
                EventKind::RunExit {
                    code: Some(0),
                    signal: None,
                },
            ),
        ];
        assert!(
            check_processes(&events).is_empty(),
            "{:#?}",
            check_processes(&events)
        );
        // Holder (0, 2)'s supervisor is killed; its setsid process is not, and beats at 2100
        // after holder (1, 2)'s command started at 2000.
        events.extend([
            start(0, 2, 1400, "main", 30),
            start(0, 2, 1401, "setsid", 31),
            ev(
                0,
                2,
                1450 * ms,
                EventKind::RunExit {
                    code: None,
                    signal: Some(9),
                },
            ),
            start(1, 2, 2000, "main", 40),
            beat(0, 2, 2100, 31),
            end(1, 2, 2050, 40),
        ]);
        let v = check_processes(&events);
        assert_eq!(v.len(), 1, "{v:#?}");
        assert_eq!(v[0].kind, ViolationKind::ProcessOverlap);
        assert_eq!(v[0].clients, vec![1, 0]);
        assert_eq!(v[0].mono_ns, 2000 * ms);
        let c = commands(&events);
        assert_eq!(c.holders, 4);
        assert_eq!(c.processes.get("setsid"), Some(&2));
        // pid 30 and 31 never stamped their end.
        assert_eq!(c.killed, 2);
        assert_eq!((c.supervisors_killed, c.supervisors_killed_holding), (1, 1));
        assert_eq!(liveness(&events).grants, 4);
    }

    #[test]
    fn empty_history_is_clean() {
        let f = check(&History::default());
        assert_eq!(f.fenced_record_violations() + f.counter_violations(), 0);
        assert!(f.overlapping_validity.is_empty());
    }

    /// A permit grant of `slot` (the grant's events and its `slot` event).
    fn permit(
        client: u32,
        acq: u64,
        slot: u32,
        at_ms: u64,
        valid_ms: u64,
        release_ms: Option<u64>,
        token: u64,
    ) -> Vec<ClientEvent> {
        let mut v = grant(client, acq, at_ms, valid_ms, release_ms, token);
        v.push(ev(client, acq, at_ms * MS, EventKind::Slot { slot }));
        v
    }

    fn slot_row(
        seq: i64,
        op: Op,
        client: u32,
        acq: u64,
        slot: u32,
        token: u64,
        read: i64,
    ) -> StorageRow {
        StorageRow {
            slot: Some(slot),
            ..fenced(seq, op, client, acq, token, read)
        }
    }

    #[test]
    fn more_than_n_permit_holders_at_once_are_found() {
        // N = 2: A and B hold slots 0 and 1; C is granted slot 0 again while both are valid
        // (the rule's mutant case: a third holder); D comes after A released.
        let mut events = permit(0, 1, 0, 0, 100, None, 1);
        events.extend(permit(1, 1, 1, 10, 100, None, 2));
        events.extend(permit(2, 1, 0, 50, 100, Some(60), 3));
        events.extend(permit(3, 1, 1, 200, 100, None, 4));
        let of = slots(&events);
        let v = check_permit_holders(&events, &of, 2);
        assert_eq!(v.len(), 1, "{v:#?}");
        assert_eq!(v[0].kind, ViolationKind::TooManyHolders);
        assert_eq!(v[0].clients, vec![0, 1, 2]);
        assert_eq!(v[0].since_ns, Some(0));
        assert_eq!(most_permit_holders(&events, &of), 3);
        // With three permits the same history is fine; without C's grant too.
        assert!(check_permit_holders(&events, &of, 3).is_empty());
        let fine: Vec<ClientEvent> = events.iter().filter(|e| e.client != 2).cloned().collect();
        assert!(check_permit_holders(&fine, &slots(&fine), 2).is_empty());
        // Two holders of slot 0 at once are a lock violation of that slot too.
        let f = check(&History {
            events,
            ..History::default()
        });
        assert_eq!(f.overlapping_validity.len(), 1, "{f:#?}");
    }

    #[test]
    fn each_slot_is_fenced_by_its_own_tokens() {
        // Slot 0 accepts token 5 then token 3: stale. Slot 1's token 2 after slot 0's 5 is not:
        // tokens of two slots are not comparable (a checker that ignored the slot, the mutant,
        // would flag it and miss nothing else).
        let mut events = permit(0, 1, 0, 0, 100, None, 5);
        events.extend(permit(1, 1, 1, 0, 100, None, 2));
        events.extend(permit(2, 1, 0, 500, 100, None, 3));
        let rows = vec![
            slot_row(1, Op::Read, 0, 1, 0, 5, 0),
            slot_row(2, Op::Write, 0, 1, 0, 5, 0),
            slot_row(3, Op::Read, 1, 1, 1, 2, 0),
            slot_row(4, Op::Write, 1, 1, 1, 2, 0),
        ];
        let before_c: Vec<ClientEvent> = events.iter().filter(|e| e.client != 2).cloned().collect();
        let clean = check(&History {
            rows: rows.clone(),
            events: before_c,
            final_slots: vec![1, 1],
            ..History::default()
        });
        assert_eq!(clean.fenced_failures(), 0, "{clean:#?}");
        assert_eq!(clean.fenced.writes, 2);
        let mut stale = rows;
        stale.push(slot_row(5, Op::Read, 2, 1, 0, 3, 1));
        stale.push(slot_row(6, Op::Write, 2, 1, 0, 3, 1));
        let f = check(&History {
            rows: stale,
            events,
            final_slots: vec![2, 1],
            ..History::default()
        });
        assert_eq!(f.stale_accepted.len(), 2, "{f:#?}");
        assert_eq!(f.stale_accepted[0].seq, Some(5));
        // C was granted slot 0 after A's validity ended, with a lower token.
        assert_eq!(f.grant_order.len(), 1, "{f:#?}");
        assert!(f.fenced_failures() > 0);
    }

    #[test]
    fn terms_held_twice_or_going_back_are_found() {
        // Leaders one after another with rising terms: fine.
        let mut events = grant(0, 1, 0, 100, Some(50), 3);
        events.extend(grant(1, 1, 60, 100, Some(120), 7));
        assert!(check_terms(&grants(&events)).is_empty());
        // The mutants: a later leader with the same term, then one with a lower term.
        let mut twice = events.clone();
        twice.extend(grant(2, 1, 200, 100, None, 7));
        let v = check_terms(&grants(&twice));
        assert_eq!(v.len(), 2, "a duplicate and not above: {v:#?}");
        assert!(v.iter().all(|v| v.kind == ViolationKind::TermOrder));
        assert!(
            v[0].detail.starts_with("election: term 7"),
            "{}",
            v[0].detail
        );
        let mut back = events;
        back.extend(grant(2, 1, 200, 100, None, 5));
        let v = check_terms(&grants(&back));
        assert_eq!(v.len(), 1, "{v:#?}");
        assert!(v[0].detail.contains("elected"), "{}", v[0].detail);
    }
}
