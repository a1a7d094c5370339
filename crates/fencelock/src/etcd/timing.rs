//! Lease and timeout arithmetic of the etcd backend: pure logic, no I/O.

use std::time::{Duration, Instant};

/// The shortest time one etcd request gets. A write is a raft round (a quorum of members
/// append and fsync it), so the Redis-sized default node timeout (50 ms) would fail requests
/// that are merely slow on a loaded machine; a failed request costs a retry, not safety.
pub(crate) const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest lease etcd grants (its `MaxLeaseTTL`, in seconds).
pub(crate) const MAX_LEASE_SECS: u64 = 9_000_000_000;

/// The most operations one transaction may hold: etcd's default `--max-txn-ops`.
pub(crate) const MAX_TXN_OPS: usize = 128;

/// The most resources one lock may hold: joining the queues puts one key per resource and
/// reads back one key plus the oldest of each queue, `2n + 1` operations in one transaction.
pub(crate) const MAX_RESOURCES: usize = (MAX_TXN_OPS - 1) / 2;

/// The pause between two tries of a request that failed for a passing reason (an election, a
/// member going away).
pub(crate) const RETRY_DELAY: Duration = Duration::from_millis(100);

/// The lease TTL to ask for: etcd counts lease TTLs in whole seconds, so the configured TTL is
/// rounded up (at least 1 s). `None` when it exceeds what etcd grants.
pub(crate) fn lease_secs(ttl: Duration) -> Option<i64> {
    let secs = ttl
        .as_secs()
        .saturating_add(u64::from(ttl.subsec_nanos() > 0));
    let secs = secs.max(1);
    (secs <= MAX_LEASE_SECS).then_some(secs as i64)
}

/// The timeout of one request: the configured node timeout, but at least
/// [`MIN_REQUEST_TIMEOUT`].
pub(crate) fn request_timeout(node_timeout: Duration) -> Duration {
    node_timeout.max(MIN_REQUEST_TIMEOUT)
}

/// The drift allowance for a lease of `granted`: the configured allowance, scaled up when etcd
/// granted more than the configured TTL (the proportional part grows with the TTL; scaling the
/// fixed part too errs on the safe side).
pub(crate) fn drift_for(granted: Duration, ttl: Duration, drift: Duration) -> Duration {
    if granted <= ttl || ttl.is_zero() {
        return drift;
    }
    // In whole nanoseconds, rounded up: the allowance must not shrink by rounding.
    drift
        .as_nanos()
        .checked_mul(granted.as_nanos())
        .map(|n| n.div_ceil(ttl.as_nanos()))
        .and_then(|n| u64::try_from(n).ok())
        .map_or(Duration::MAX, Duration::from_nanos)
}

/// The local validity deadline of a lease of `granted` that was granted or renewed by a request
/// sent at `sent`: `sent + granted - drift`. The server starts the lease's clock when it handles
/// the request, which is after `sent`, so this deadline is never later than the server's.
/// `None` when nothing is left after the drift.
pub(crate) fn deadline(sent: Instant, granted: Duration, drift: Duration) -> Option<Instant> {
    let valid = granted.checked_sub(drift).filter(|v| !v.is_zero())?;
    sent.checked_add(valid)
}

/// How often a waiter renews its lease (and looks at the queue again, in case a watch missed
/// its event): a third of the lease, so two renewals may fail before the lease runs out.
pub(crate) fn renew_interval(granted: Duration) -> Duration {
    (granted / 3).max(Duration::from_millis(100))
}

/// The most leases a client keeps for its next locks (see "Leases carried over" in `mod.rs`):
/// enough for as many locks at once as a busy service holds; one beyond is left to expire.
pub(crate) const MAX_SPARE_LEASES: usize = 256;

/// Whether a lease last granted or renewed `age` ago may carry a new lock of `granted` without
/// a renewal: while the lock still gets nine tenths of a fresh lease. Older ones are left to
/// expire (they hold no key) and a new lease is granted.
pub(crate) fn spare_usable(age: Duration, granted: Duration) -> bool {
    age <= granted / 10
}

/// Whether a lock whose acquisition started `since_release` after its client's last release
/// (`None`: the client has released nothing yet) comes in a run of locks: within a tenth of its
/// TTL `granted`, the window in which a spare lease carries a lock. Such a client is likely to
/// take the next lock as soon: the bet that [`leave`] makes for a lease too old to carry one
/// as it stands.
pub(crate) fn in_a_run(since_release: Option<Duration>, granted: Duration) -> bool {
    since_release.is_some_and(|d| d <= granted / 10)
}

/// What the release of a lock on a lease that may carry the next one does with that lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leave {
    /// Delete the key and keep the lease as it stands: young enough to carry a lock.
    Keep,
    /// Delete the key, renew the lease (etcd's leader does that without a raft write) and keep
    /// it: too old to carry a lock as it stands, but its client takes locks one after another,
    /// so the next lock saves its grant.
    RenewAndKeep,
    /// Revoke the lease, one write: a lone lock held past the tenth, whose client may take no
    /// other lock soon (a deleted key would leave the lease to a second write, its expiry).
    Revoke,
}

/// How the release of a lock whose lease was last granted or renewed `age` ago (of TTL
/// `granted`) leaves it, `in_a_run` as [`in_a_run`] says.
pub(crate) fn leave(age: Duration, granted: Duration, in_a_run: bool) -> Leave {
    if spare_usable(age, granted) {
        Leave::Keep
    } else if in_a_run {
        Leave::RenewAndKeep
    } else {
        Leave::Revoke
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const S: Duration = Duration::from_secs(1);

    #[test]
    fn lease_ttl_rounds_up_to_whole_seconds() {
        assert_eq!(lease_secs(10 * S), Some(10));
        assert_eq!(lease_secs(10 * S + MS), Some(11));
        assert_eq!(lease_secs(1500 * MS), Some(2));
        assert_eq!(lease_secs(30 * MS), Some(1));
        assert_eq!(lease_secs(Duration::ZERO), Some(1));
        assert_eq!(
            lease_secs(Duration::from_secs(MAX_LEASE_SECS)),
            Some(9_000_000_000)
        );
        assert_eq!(lease_secs(Duration::from_secs(MAX_LEASE_SECS + 1)), None);
        assert_eq!(lease_secs(Duration::MAX), None);
    }

    #[test]
    fn requests_get_at_least_a_second() {
        assert_eq!(request_timeout(50 * MS), S);
        assert_eq!(request_timeout(3 * S), 3 * S);
    }

    #[test]
    fn drift_grows_with_a_longer_grant() {
        assert_eq!(drift_for(10 * S, 10 * S, 102 * MS), 102 * MS);
        assert_eq!(
            drift_for(2 * S, 1500 * MS, 17 * MS),
            Duration::from_nanos(22_666_667)
        );
        assert_eq!(
            drift_for(S, Duration::from_nanos(1), S),
            Duration::from_secs(1_000_000_000)
        );
        assert_eq!(drift_for(S, 1500 * MS, 17 * MS), 17 * MS);
    }

    #[test]
    fn deadline_is_send_time_plus_ttl_minus_drift() {
        let t0 = Instant::now();
        assert_eq!(deadline(t0, 10 * S, 102 * MS), Some(t0 + 9898 * MS));
        assert_eq!(deadline(t0, S, S), None);
        assert_eq!(deadline(t0, S, 2 * S), None);
    }

    #[test]
    fn a_full_set_fits_one_transaction() {
        // Puts, our key, the oldest of each queue: 2n + 1 operations.
        assert_eq!(MAX_RESOURCES, 63);
        assert_eq!(2 * MAX_RESOURCES + 1, 127);
        assert_eq!(2 * (MAX_RESOURCES + 1) + 1, MAX_TXN_OPS + 1);
    }

    #[test]
    fn waiters_renew_three_times_per_lease() {
        assert_eq!(renew_interval(3 * S), S);
        assert_eq!(renew_interval(Duration::ZERO), 100 * MS);
    }

    #[test]
    fn an_old_lease_is_renewed_for_the_next_lock_only_in_a_run_of_locks() {
        assert!(in_a_run(Some(Duration::ZERO), 10 * S));
        assert!(in_a_run(Some(S), 10 * S));
        assert!(!in_a_run(Some(S + MS), 10 * S));
        assert!(!in_a_run(None, 10 * S));
        assert_eq!(leave(S, 10 * S, false), Leave::Keep);
        assert_eq!(leave(S, 10 * S, true), Leave::Keep);
        assert_eq!(leave(S + MS, 10 * S, true), Leave::RenewAndKeep);
        assert_eq!(leave(S + MS, 10 * S, false), Leave::Revoke);
    }

    #[test]
    fn a_spare_lease_carries_a_lock_while_nine_tenths_of_it_are_left() {
        assert!(spare_usable(Duration::ZERO, 10 * S));
        assert!(spare_usable(S, 10 * S));
        assert!(!spare_usable(S + MS, 10 * S));
        assert!(!spare_usable(MS, Duration::ZERO));
    }
}
