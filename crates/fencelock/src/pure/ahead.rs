//! The announcement sent ahead of plain grants (`scripts::ANNOUNCE_AHEAD`): when a grant it
//! covers may count, and when a connection needs a new one. Pure logic, no I/O.
//!
//! A plain lock on several nodes is taken with a bare `SET NX PX`; the restart quarantine still
//! needs its TTL among the TTLs in use on the node for as long as the key may live. So the
//! client announces the TTL on the node's connection first, and the script replies with what
//! the TTL's mark has left (`left`): an entry with this TTL or a longer one lives at least that
//! long. A key of TTL `ttl` set within `left - ttl` of the announcement dies before that entry.
//! The client only knows its own clock: the announcement ran after it was sent, and the `SET`
//! (sent after the announcement, on the same connection) ran before its reply arrived, so the
//! grant is covered when the reply came within `left - ttl - drift` of the announcement's send
//! time (the drift allows for the node's clock running a little fast). A grant that came later
//! is not counted. The model checker holds the window to the model's `announce`
//! (`ahead_grants_are_covered_by_their_announcement` in `tests/fencing_model.rs`).

use std::time::{Duration, Instant};

/// An announcement of one TTL on one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ahead {
    /// When the client sent it (its own clock).
    pub(crate) sent: Instant,
    /// What the TTL's mark had left after it, per the node (`PTTL`).
    pub(crate) left: Duration,
}

impl Ahead {
    /// The latest arrival of a grant's reply that this announcement covers, `None` when it
    /// covers none.
    pub(crate) fn covered_until(&self, ttl: Duration, drift: Duration) -> Option<Instant> {
        // A millisecond less: the mark's PTTL is truncated to whole milliseconds, which matters
        // when the drift is configured to zero.
        let window = self
            .left
            .checked_sub(ttl)?
            .checked_sub(drift)?
            .checked_sub(Duration::from_millis(1))?;
        self.sent.checked_add(window)
    }

    /// Whether a grant whose reply arrived at `reply` may count.
    pub(crate) fn covers(&self, reply: Instant, ttl: Duration, drift: Duration) -> bool {
        self.covered_until(ttl, drift)
            .is_some_and(|until| reply <= until)
    }

    /// Whether a request sent at `now`, whose reply counts only within `limit` (the round's node
    /// timeout), can rely on this announcement; otherwise it announces first.
    pub(crate) fn serves(
        &self,
        now: Instant,
        limit: Duration,
        ttl: Duration,
        drift: Duration,
    ) -> bool {
        self.covered_until(ttl, drift)
            .is_some_and(|until| now.checked_add(limit).is_some_and(|by| by <= until))
    }
}

/// The margin (ms) an announcement sent ahead asks of the node: what its mark reports covers at
/// least that beyond one TTL (or a TTL, if shorter), so that its window is at least two node
/// timeouts after the drift. Then the grant sent with it is covered whenever its reply comes
/// within the round, and the next requests can rely on it for at least a node timeout. Without
/// it, a mark with between the TTL and the TTL plus the drift left stopped the announcement and
/// covered no grant: every plain grant on the node failed for about the drift, once per TTL
/// (`tests/quarantine.rs`, `plain_locks_are_granted_through_whole_announcement_cycles`).
pub(crate) fn margin_ms(drift: Duration, limit: Duration) -> u64 {
    let margin = drift.saturating_add(limit.saturating_mul(2));
    u64::try_from(margin.as_millis())
        .unwrap_or(u64::MAX)
        .saturating_add(1)
}

/// The later-covering of two announcements of the same TTL.
pub(crate) fn later(a: Ahead, b: Ahead, ttl: Duration, drift: Duration) -> Ahead {
    if b.covered_until(ttl, drift) > a.covered_until(ttl, drift) {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn ahead(at: Instant, left_ms: u64) -> Ahead {
        Ahead {
            sent: at,
            left: Duration::from_millis(left_ms),
        }
    }

    #[test]
    fn a_grant_is_covered_within_what_the_mark_has_left_less_the_ttl_and_the_drift() {
        let t0 = Instant::now();
        // A full announcement: the entry one TTL ahead, the mark at 2 TTL less a millisecond.
        let a = ahead(t0, 19_999);
        let (ttl, drift) = (10_000 * MS, 102 * MS);
        assert_eq!(a.covered_until(ttl, drift), Some(t0 + 9_896 * MS));
        assert!(a.covers(t0 + 9_896 * MS, ttl, drift));
        assert!(!a.covers(t0 + 9_897 * MS, ttl, drift));
        // A reply before the send time cannot happen, but is covered all the same.
        assert!(a.covers(t0, ttl, drift));
    }

    #[test]
    fn a_mark_with_no_more_than_the_ttl_and_the_drift_left_covers_nothing() {
        let t0 = Instant::now();
        let (ttl, drift) = (10_000 * MS, 102 * MS);
        for left in [0, 9_999, 10_000, 10_101, 10_102, 10_103] {
            let a = ahead(t0, left);
            assert!(!a.covers(t0 + MS, ttl, drift), "left {left}");
            assert!(!a.serves(t0, MS, ttl, drift), "left {left}");
        }
        assert!(ahead(t0, 10_104).covers(t0 + MS, ttl, drift));
    }

    #[test]
    fn a_request_announces_first_when_its_reply_could_come_after_the_window() {
        let t0 = Instant::now();
        let a = ahead(t0, 19_999);
        let (ttl, drift, limit) = (10_000 * MS, 102 * MS, 50 * MS);
        assert!(a.serves(t0 + 9_846 * MS, limit, ttl, drift));
        assert!(!a.serves(t0 + 9_847 * MS, limit, ttl, drift));
    }

    #[test]
    fn the_margin_leaves_a_window_of_two_node_timeouts_after_the_drift() {
        let (ttl, drift, limit) = (10_000 * MS, 102 * MS, 50 * MS);
        let margin = margin_ms(drift, limit);
        assert_eq!(margin, 203);
        // The least a mark reports with that margin: one TTL and the margin, less the
        // millisecond of PX.
        let t0 = Instant::now();
        let least = ahead(t0, 10_000 + margin - 1);
        assert!(least.serves(t0 + limit - MS, limit, ttl, drift));
        assert!(least.covers(t0 + limit, ttl, drift));
    }

    #[test]
    fn the_later_covering_announcement_is_kept() {
        let t0 = Instant::now();
        let (ttl, drift) = (10_000 * MS, 102 * MS);
        let early_full = ahead(t0, 19_999);
        let late_short = ahead(t0 + 1_000 * MS, 12_000);
        // Sent later, but its mark had little left: it covers less.
        assert_eq!(later(early_full, late_short, ttl, drift), early_full);
        let late_full = ahead(t0 + 1_000 * MS, 19_999);
        assert_eq!(later(early_full, late_full, ttl, drift), late_full);
        assert_eq!(later(late_full, early_full, ttl, drift), late_full);
    }
}
