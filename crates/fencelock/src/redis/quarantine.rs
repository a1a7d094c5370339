//! Restart quarantine, the pure part: how a node is judged from what it reports when a client
//! connects, and how long a node that may have lost locks stays out of the quorum.
//!
//! A node that restarted without its data forgot the locks it granted; counting it at once can
//! hand a lock to a second client while the first still holds it on too few nodes. Such a node
//! counts again once every lock it may have forgotten has expired: once the longest TTL any
//! client uses has passed since its restart.
//!
//! Two records on each node make that judgment without a setting the user keeps in sync:
//!
//! * the marker [`MARKER_KEY`] (no TTL, lives with the data): `<run_id> <ms>`, written by the
//!   first client that finds it missing (`SET NX`), with the node's time (`TIME`, ms) at which
//!   the loss was seen, or `<run_id> clear` once no lock it may have lost can still be live
//!   (written by the client that saw its quarantine end, or at birth by a tool that starts new
//!   nodes, as `fencelock up` does). A node whose marker is gone lost its data, whatever its
//!   configuration says, and whenever it did: a restart, but also `FLUSHALL`, `FLUSHDB`, a `DEL`
//!   of the marker or a failover to an empty replica, which leave the uptime as it was. So a
//!   missing marker is a loss of unknown time, counted from when it is seen, and the time it
//!   was first seen is kept in the marker for the clients that come later. A node whose marker
//!   came back from an earlier run kept its data. A client checks the marker again right behind
//!   every grant, on the same connection (`round.rs`): a grant on a node whose marker changed
//!   since the client connected is not counted, and the node is judged again.
//! * the TTLs in use [`TTLS_KEY`]: every acquisition and extension leaves its TTL there, in the
//!   same script that sets the key (a plain lock of one key, a bare `SET NX PX`, is announced
//!   ahead on its connection instead, and counts only while that covers it: `pure/ahead.rs`),
//!   scored by a time its lock may live until, or later (see
//!   `scripts::ANNOUNCE_LUA`: written one TTL ahead, with a mark that lets the next
//!   announcements of that TTL stop at one call). A restarted node forgot them, so a client judging it reads them
//!   from the other nodes, and needs enough of them to answer (see [`witnesses_needed`]).

use std::time::{Duration, Instant};

/// The node's marker key.
pub(crate) const MARKER_KEY: &str = "fencelock:node";
/// The sorted set of the TTLs in use on the node (member: TTL in ms, score: the node's time in
/// ms until which a lock with that TTL may live).
pub(crate) const TTLS_KEY: &str = "fencelock:ttls";
/// The word after the run id in the marker of a node that cannot have lost a live lock.
const CLEAR: &str = "clear";

/// The marker of a node, as the first client that finds it missing writes it: with the node's
/// time (ms) at which the loss was seen.
pub(crate) fn marker(run_id: &str, seen_ms: u64) -> String {
    format!("{run_id} {seen_ms}")
}

/// The marker of a node that cannot have lost a live lock in its current run.
pub(crate) fn clear_marker(run_id: &str) -> String {
    format!("{run_id} {CLEAR}")
}

/// What a node reported when a client connected.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Report<'a> {
    /// `run_id` from `INFO server` (new at every start of the process).
    pub(crate) run_id: Option<&'a str>,
    /// `uptime_in_seconds` from `INFO server`: whole seconds, its whole-second clock minus its
    /// whole-second start time, so up to a second more than the true age.
    pub(crate) uptime: Option<Duration>,
    /// AOF on with `appendfsync always` (false when unknown).
    pub(crate) fsync_always: bool,
    /// The marker's value, if the key exists.
    pub(crate) marker: Option<&'a str>,
    /// The node's `TIME` in ms, read with the report.
    pub(crate) node_ms: Option<u64>,
}

/// How a node stands, from its report alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Counted at once; the reason, for logs.
    Counted(&'static str),
    /// It may have lost locks: counted once the longest TTL in use has passed since its restart,
    /// which was at most `age` before `seen`.
    Suspect {
        seen: Instant,
        age: Duration,
        why: String,
    },
}

/// Judges a node from its report, received at `now`. Anything unknown counts against the node:
/// an unknown uptime means it may have restarted just now, an unknown run id or marker means it
/// may have lost its data.
pub(crate) fn judge(report: &Report<'_>, now: Instant) -> Verdict {
    // Redis computes the uptime as its cached whole-second clock minus its whole-second start
    // time, so it may exceed the true age by up to a second (a node started at 10.95 s reports
    // 1 at 11.05 s). One second off makes `now - age` no later than the restart: the
    // quarantine ends no sooner than it must.
    let (age, unknown_age) = match report.uptime {
        Some(uptime) => (uptime.saturating_sub(Duration::from_secs(1)), ""),
        None => (Duration::ZERO, " (its uptime is unknown: counted from now)"),
    };
    let suspect = |why: &str| Verdict::Suspect {
        seen: now,
        age,
        why: format!("{why}{unknown_age}"),
    };
    let Some(run_id) = report.run_id.filter(|r| !r.is_empty()) else {
        return suspect("its run id is unknown (a restart cannot be ruled out)");
    };
    // A loss whose time is unknown (a FLUSHALL leaves the uptime as it was) is counted from
    // when it is seen.
    let seen_now = |why: &str| Verdict::Suspect {
        seen: now,
        age: Duration::ZERO,
        why: why.to_string(),
    };
    let Some(value) = report.marker else {
        return seen_now(
            "has no fencelock:node marker: new, or it lost its data (a restart, FLUSHALL, \
             FLUSHDB, a DEL or a failover to an empty replica; counted from now)",
        );
    };
    let (marked_run, word) = match value.split_once(' ') {
        Some((run, word)) => (run, Some(word)),
        None => (value, None),
    };
    let clear = word == Some(CLEAR);
    if marked_run == run_id && !clear {
        // The loss this run's marker records: when it was first seen, in the node's time.
        return match (word.and_then(|w| w.parse::<u64>().ok()), report.node_ms) {
            (Some(seen_ms), Some(node_ms)) => Verdict::Suspect {
                seen: now,
                age: Duration::from_millis(node_ms.saturating_sub(seen_ms)),
                why: "lost its data, its quarantine not yet seen to end".to_string(),
            },
            _ => seen_now(
                "lost its data at a time its marker does not say, its quarantine not yet seen \
                 to end (counted from now)",
            ),
        };
    }
    match (marked_run == run_id, clear, report.fsync_always) {
        (true, _, _) => Verdict::Counted("its marker says it lost no live lock in this run"),
        (false, true, true) => Verdict::Counted(
            "it kept its data across a restart (its marker came back, appendfsync always)",
        ),
        (false, true, false) => {
            suspect("kept its data without appendfsync always (the last writes may be lost)")
        }
        (false, false, _) => suspect("restarted before an earlier quarantine was seen to end"),
    }
}

impl Verdict {
    /// When a suspect node counts again, given the longest TTL in use.
    pub(crate) fn counted_from(&self, longest: Duration) -> Option<Instant> {
        match self {
            Verdict::Counted(_) => None,
            Verdict::Suspect { seen, age, .. } => Some(*seen + longest.saturating_sub(*age)),
        }
    }
}

/// How many of the other nodes must report their TTLs before a suspect node may count. A lock
/// the node forgot was granted by a quorum, so it is still recorded on at least `quorum - 1` of
/// the others; any `n - quorum + 1` of the others include one of those.
pub(crate) fn witnesses_needed(nodes: usize) -> usize {
    let quorum = crate::pure::quorum::quorum(nodes);
    (nodes - quorum + 1).min(nodes - 1)
}

/// The longest TTL whose lock may still live, from a node's `TIME` and its [`TTLS_KEY`] entries
/// (`(ttl ms, until ms)`). Entries that do not parse count as nothing.
pub(crate) fn longest_live(time: &[String], entries: &[(String, f64)]) -> Option<Duration> {
    let secs: u64 = time.first()?.parse().ok()?;
    let micros: u64 = time.get(1)?.parse().ok()?;
    let now_ms = secs.saturating_mul(1000).saturating_add(micros / 1000) as f64;
    entries
        .iter()
        .filter(|(_, until)| *until > now_ms)
        .filter_map(|(ttl, _)| ttl.parse::<u64>().ok())
        .max()
        .map(Duration::from_millis)
}

/// A duration for people: tenths of a second, `less than 0.1s` below that.
pub(crate) fn secs(d: Duration) -> String {
    if d < Duration::from_millis(100) {
        "less than 0.1s".to_string()
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report<'a>(uptime: Option<u64>, fsync: bool, marker: Option<&'a str>) -> Report<'a> {
        Report {
            run_id: Some("r2"),
            uptime: uptime.map(Duration::from_secs),
            fsync_always: fsync,
            marker,
            node_ms: Some(4_000),
        }
    }

    fn suspect(v: &Verdict) -> bool {
        matches!(v, Verdict::Suspect { .. })
    }

    #[test]
    fn a_missing_or_unparsable_uptime_means_restarted_just_now() {
        let now = Instant::now();
        // Before: a missing uptime skipped the check and the node counted at once.
        let v = judge(&report(None, false, None), now);
        assert!(suspect(&v), "{v:?}");
        assert_eq!(
            v.counted_from(Duration::from_secs(10)),
            Some(now + Duration::from_secs(10))
        );
        // Even with appendfsync always: without a marker the node lost its data.
        assert!(suspect(&judge(&report(None, true, None), now)));
    }

    #[test]
    fn an_uptime_of_one_second_may_be_a_few_milliseconds() {
        // Redis reports `uptime_in_seconds` as its cached whole-second clock minus its whole-
        // second start time: a node started at 10.95 s reports 1 at 11.05 s. Taken at its word,
        // a node restarted 0.1 s ago counted at once for a TTL of 500 ms (seen in the harness's
        // run mode: a second holder while the first was valid, 0.1 s after the restart).
        let now = Instant::now();
        let v = judge(&report(Some(1), false, None), now);
        assert_eq!(
            v.counted_from(Duration::from_millis(500)),
            Some(now + Duration::from_millis(500))
        );
    }

    #[test]
    fn an_unknown_run_id_is_a_possible_restart() {
        let r = Report {
            run_id: None,
            ..report(Some(100), true, Some("r1 clear"))
        };
        assert!(suspect(&judge(&r, Instant::now())));
    }

    #[test]
    fn a_lost_marker_means_lost_data_whatever_the_configuration() {
        let now = Instant::now();
        let v = judge(&report(Some(3), true, None), now);
        assert!(suspect(&v), "{v:?}");
        assert_eq!(
            v.counted_from(Duration::from_secs(10)),
            Some(now + Duration::from_secs(10))
        );
    }

    #[test]
    fn a_loss_without_a_restart_is_counted_from_when_it_is_seen() {
        // Issue 27, item 4: a FLUSHALL leaves the uptime as it was; before, a node up for an
        // hour whose marker was flushed counted at once, as if it had lost its data an hour ago.
        let now = Instant::now();
        let v = judge(&report(Some(3_600), false, None), now);
        assert_eq!(
            v.counted_from(Duration::from_secs(2)),
            Some(now + Duration::from_secs(2))
        );
        // A later client reads when the loss was first seen (node time, ms) from the marker.
        let v = judge(&report(Some(3_600), false, Some("r2 1000")), now);
        assert_eq!(
            v.counted_from(Duration::from_secs(10)),
            Some(now + Duration::from_secs(7))
        );
        // Without the node's time, or with a marker that does not say: from now.
        let r = Report {
            node_ms: None,
            ..report(Some(3_600), false, Some("r2 1000"))
        };
        assert_eq!(
            judge(&r, now).counted_from(Duration::from_secs(10)),
            Some(now + Duration::from_secs(10))
        );
        assert_eq!(
            judge(&report(Some(3_600), false, Some("r2")), now)
                .counted_from(Duration::from_secs(10)),
            Some(now + Duration::from_secs(10))
        );
    }

    #[test]
    fn a_marker_that_came_back_with_appendfsync_always_means_kept_data() {
        let now = Instant::now();
        assert!(!suspect(&judge(
            &report(Some(0), true, Some("r1 clear")),
            now
        )));
        // Without appendfsync always the last writes (and locks) may be gone.
        assert!(suspect(&judge(
            &report(Some(0), false, Some("r1 clear")),
            now
        )));
        // The earlier run was itself in quarantine: it may still owe it.
        assert!(suspect(&judge(&report(Some(0), true, Some("r1")), now)));
    }

    #[test]
    fn a_marker_of_this_run_counts_once_cleared() {
        let now = Instant::now();
        assert!(suspect(&judge(&report(Some(0), false, Some("r2")), now)));
        assert!(!suspect(&judge(
            &report(Some(0), false, Some("r2 clear")),
            now
        )));
        assert!(suspect(&judge(
            &report(Some(0), false, Some("r2 maybe")),
            now
        )));
        assert_eq!(clear_marker("r2"), "r2 clear");
        assert_eq!(marker("r2", 5), "r2 5");
    }

    #[test]
    fn witnesses_are_enough_to_meet_every_quorum_of_the_others() {
        assert_eq!(witnesses_needed(1), 0);
        assert_eq!(witnesses_needed(2), 1);
        assert_eq!(witnesses_needed(3), 2);
        assert_eq!(witnesses_needed(5), 3);
        assert_eq!(witnesses_needed(7), 4);
        // Brute force for small sets: every set of `needed` others meets every set of
        // `quorum - 1` others (the nodes still recording a forgotten lock).
        for n in 2..=7usize {
            let q = crate::pure::quorum::quorum(n);
            let others = n - 1;
            let needed = witnesses_needed(n);
            for a in 0u32..(1 << others) {
                for b in 0u32..(1 << others) {
                    if a.count_ones() as usize == needed && b.count_ones() as usize == q - 1 {
                        assert!(a & b != 0, "n={n}: {a:b} misses {b:b}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_longest_live_ttl_ignores_expired_entries() {
        let time = ["1000".to_string(), "500000".to_string()]; // 1,000,500 ms
        let entries = [
            ("60000".to_string(), 1_000_400.0), // expired
            ("6000".to_string(), 1_000_600.0),
            ("1000".to_string(), 1_001_000.0),
            ("junk".to_string(), 9e12),
        ];
        assert_eq!(
            longest_live(&time, &entries),
            Some(Duration::from_millis(6000))
        );
        assert_eq!(longest_live(&time, &entries[..1]), None);
        assert_eq!(longest_live(&[], &entries), None);
    }

    #[test]
    fn durations_read_as_seconds() {
        assert_eq!(secs(Duration::ZERO), "less than 0.1s");
        assert_eq!(secs(Duration::from_millis(9_998)), "10.0s");
        assert_eq!(secs(Duration::from_millis(1_240)), "1.2s");
    }
}
