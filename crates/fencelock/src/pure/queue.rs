//! The waiting line of a contended lock: pure logic, no I/O.
//!
//! When several fencelock clients wait for one key, a release used to wake them all and each
//! sent its `SET NX` to every node: each node granted whoever arrived first, the votes split,
//! nobody reached a quorum, everyone released its partial keys and tried again. The hand-over
//! took several round trips, and who got the lock next was luck.
//!
//! A waiter now takes a *ticket* when it starts waiting and registers it on every node, in a
//! sorted set beside the lock key (the same script that tries the `SET NX`). A node grants a
//! queued request only to the waiter with the smallest live ticket. Tickets come from the
//! waiter's wall clock (microseconds, ties broken by a random id), so every node orders the same
//! waiters the same way and the head of the line collects the same quorum everywhere: no split
//! votes, and the line is served first come, first served (across machines: as far as their
//! clocks agree; skew reorders the line, it never breaks mutual exclusion, which rests on the
//! lock key alone).
//!
//! Each registration carries a lease: a waiter that stops asking (crashed, gave up, cancelled)
//! drops out of the line once it runs out, so a dead waiter delays the others by at most one
//! lease. A client that releases a lock others are waiting for, and asks for it again soon,
//! joins the end of the line instead of racing the waiters for the free key.
//!
//! Only fencelock's waiting acquisitions of one key queue. A first attempt, `try_acquire`, and
//! other Redlock clients use the plain `SET NX PX`: they can still take a free key ahead of the
//! line (at most once per hand-over window), and the lock key stays compatible with them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The sorted set of waiting tickets of `resource` on each node (member: waiter id, score:
/// ticket).
pub fn queue_key(resource: &str) -> String {
    format!("fencelock:queue:{resource}")
}

/// The sorted set of the waiters' lease deadlines of `resource` (member: waiter id, score: the
/// node's clock in ms when the registration lapses).
pub fn lease_key(resource: &str) -> String {
    format!("fencelock:queue-lease:{resource}")
}

/// The mark, beside the lock key of `resource`, that someone waits for it: a waiter renews it
/// with each attempt (it expires a few leases after the last), and a release wakes waiters only
/// when it is there, so that a lock nobody waits for is released by a bare compare-and-delete.
pub fn waiting_key(resource: &str) -> String {
    format!("fencelock:waiting:{resource}")
}

/// One waiting acquisition's place in line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ticket {
    /// Names the waiter in the line (its client's id, a dot, a random part) and breaks ties
    /// between equal tickets.
    pub(crate) id: String,
    /// Microseconds since the Unix epoch when the wait started. Exact as a Redis score (a double)
    /// until the year 2255.
    pub(crate) order: u64,
    /// How long a registration stays in line without being renewed.
    pub(crate) lease: Duration,
}

impl Ticket {
    /// A ticket for the wait of waiter `id` that starts at `now`.
    pub(crate) fn new(now: SystemTime, id: String, lease: Duration) -> Ticket {
        let order = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Ticket { id, order, lease }
    }

    /// The lease in whole milliseconds, at least 1.
    pub(crate) fn lease_ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

/// How long a line, and a key's wait mark, outlive the last registration that renewed them:
/// four leases. A line nobody renews goes away by itself; tickets keep their order if it is
/// rebuilt.
pub(crate) fn keep(lease: Duration) -> Duration {
    lease * 4
}

/// How long a waiter's registration lasts: three of its longest waits between attempts (each
/// attempt renews it) plus two node timeouts for the attempt itself, and at least 500 ms, so
/// a live waiter never drops out on a loaded machine while a dead one blocks the line briefly.
pub(crate) fn lease(max_delay: Duration, node_timeout: Duration) -> Duration {
    (max_delay * 3 + node_timeout * 2).max(Duration::from_millis(500))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_order_by_start_time() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let a = Ticket::new(t0, "c.2".into(), Duration::from_secs(1));
        let b = Ticket::new(
            t0 + Duration::from_micros(1),
            "c.1".into(),
            Duration::from_secs(1),
        );
        assert!(a.order < b.order);
        assert_eq!(a.id, "c.2");
        assert_eq!(a.order, 1_800_000_000_000_000);
        // Scores are doubles: the ticket must survive the round trip exactly.
        assert_eq!(a.order as f64 as u64, a.order);
        assert!(a.order < 1 << 53);
    }

    #[test]
    fn a_clock_before_the_epoch_gives_the_first_place_not_a_panic() {
        let t = Ticket::new(
            UNIX_EPOCH - Duration::from_secs(5),
            "c.7".into(),
            Duration::ZERO,
        );
        assert_eq!(t.order, 0);
        assert_eq!(t.lease_ms(), 1);
    }

    #[test]
    fn lease_outlasts_the_longest_wait_between_attempts() {
        let l = lease(Duration::from_millis(500), Duration::from_millis(50));
        assert_eq!(l, Duration::from_millis(1600));
        assert!(l > Duration::from_millis(500) * 2);
        assert_eq!(
            lease(Duration::from_millis(10), Duration::from_millis(5)),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn keys_sit_beside_the_lock_key() {
        assert_eq!(queue_key("order:1"), "fencelock:queue:order:1");
        assert_eq!(lease_key("order:1"), "fencelock:queue-lease:order:1");
        assert_eq!(waiting_key("order:1"), "fencelock:waiting:order:1");
    }
}
