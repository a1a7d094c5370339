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
//! - **Overlapping validity**: a lock granted while another client's lock was still within its
//!   validity and not yet released. Redlock promises this never happens; a pause past the TTL
//!   does not break it (the paused lock's validity has ended), a clock jump or a restart without
//!   persistence does.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::history::{ClientEvent, EventKind, History, Op, Record, StorageRow};

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
    /// Liveness.
    pub liveness: Liveness,
}

impl Findings {
    /// Violations of the data the fenced storage protects (in unfenced modes: written without a
    /// token check): stale accepted, token order, duplicates, interleavings, stale reads.
    pub fn fenced_record_violations(&self) -> usize {
        self.stale_accepted.len()
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

    /// Violations that harmed the fenced record's data: a stale row accepted, tokens out of
    /// order, an interleaving, a lost update. (A duplicate token breaks the token guarantee but
    /// harms data only if the two holders' writes interleave, which the others then show.)
    pub fn fenced_data_violations(&self) -> usize {
        self.fenced_record_violations() - self.duplicate_tokens.len()
    }

    /// Every violation, for the timeline.
    pub fn all(&self) -> impl Iterator<Item = &Violation> {
        self.stale_accepted
            .iter()
            .chain(&self.token_order)
            .chain(&self.duplicate_tokens)
            .chain(&self.fenced.interleaved)
            .chain(&self.fenced.stale_reads)
            .chain(&self.counter.interleaved)
            .chain(&self.counter.stale_reads)
            .chain(&self.overlapping_validity)
    }
}

/// Runs every check on `history`.
pub fn check(history: &History) -> Findings {
    let mut rows: Vec<&StorageRow> = history.rows.iter().collect();
    rows.sort_by_key(|r| r.seq);
    let of = |record| -> Vec<&StorageRow> {
        rows.iter()
            .copied()
            .filter(|r| r.record == record)
            .collect()
    };
    let fenced_rows = of(Record::Fenced);
    let counter_rows = of(Record::Counter);
    let (stale_accepted, token_order, duplicate_tokens) = check_tokens(&fenced_rows);
    Findings {
        fenced: check_record(&fenced_rows, history.final_fenced),
        counter: check_record(&counter_rows, history.final_counter),
        stale_accepted,
        token_order,
        duplicate_tokens,
        overlapping_validity: check_validity(&history.events),
        liveness: liveness(&history.events),
    }
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

/// Grants that happened while another client's lock was within its validity and not released.
pub fn check_validity(events: &[ClientEvent]) -> Vec<Violation> {
    // (client, acq) -> (granted at, validity deadline, release started at)
    let mut held: HashMap<(u32, u64), (u64, u64, Option<u64>)> = HashMap::new();
    for e in events {
        let key = (e.client, e.acq);
        match &e.kind {
            EventKind::AcquireOk { deadline_ns, .. } => {
                held.insert(key, (e.mono_ns, *deadline_ns, None));
            }
            EventKind::ReleaseStart => {
                if let Some(h) = held.get_mut(&key) {
                    h.2 = Some(e.mono_ns);
                }
            }
            _ => {}
        }
    }
    // The lock is held from the grant to the earlier of the deadline and the release call; the
    // grant is stamped after the quorum answered and the release before any key is deleted, so
    // an overlap here is certain, not an artefact of when the stamps were taken.
    let mut spans: Vec<(u64, u64, u32, u64)> = held
        .iter()
        .map(|(&(c, a), &(start, deadline, release))| {
            (start, release.map_or(deadline, |r| r.min(deadline)), c, a)
        })
        .collect();
    spans.sort();
    let mut out = Vec::new();
    let mut open: Option<(u64, u32, u64)> = None; // (end, client, acq) of the longest-running span
    for (start, end, client, acq) in spans {
        if let Some((open_end, oc, oa)) = open {
            if start < open_end && oc != client {
                out.push(Violation {
                    kind: ViolationKind::OverlappingValidity,
                    record: None,
                    seq: None,
                    mono_ns: start,
                    clients: vec![client, oc],
                    detail: format!(
                        "client {client} (acquisition {acq}) was granted the lock {:.1} ms before client {oc}'s lock (acquisition {oa}) ended its validity",
                        (open_end - start) as f64 / 1e6
                    ),
                });
            }
            if end > open_end {
                open = Some((end, client, acq));
            }
        } else {
            open = Some((end, client, acq));
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
            EventKind::AcquireOk { .. } => {
                live.grants += 1;
                if let Some(s) = started.get(&key) {
                    latencies.push(e.mono_ns.saturating_sub(*s));
                }
            }
            EventKind::AcquireFail { cause } => {
                *live.failures.entry(cause.clone()).or_default() += 1;
            }
            EventKind::ReadRejected { .. } | EventKind::WriteRejected { .. } => {
                live.stale_rejected += 1;
            }
            EventKind::Release { ok: false, .. } => live.releases_lost += 1,
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
            },
        ));
        let l = liveness(&events);
        assert_eq!((l.attempts, l.grants), (101, 100));
        assert_eq!(l.failures.get("contention"), Some(&1));
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

    #[test]
    fn empty_history_is_clean() {
        let f = check(&History::default());
        assert_eq!(f.fenced_record_violations() + f.counter_violations(), 0);
        assert!(f.overlapping_validity.is_empty());
    }
}
