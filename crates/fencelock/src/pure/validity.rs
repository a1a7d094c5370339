//! Validity and clock-drift arithmetic: pure logic, no I/O.

use std::time::Duration;

/// The drift allowance for a TTL: `ttl * factor + fixed`.
///
/// It covers the clocks of the nodes running at slightly different rates: a key set with TTL
/// `ttl` may expire on a node a little earlier than the client's own clock says.
pub(crate) fn drift(ttl: Duration, factor: f64, fixed: Duration) -> Duration {
    ttl.mul_f64(factor) + fixed
}

/// A TTL in whole milliseconds, as the scripts take it and announce it (at least 1).
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The time a lock may still be considered held: `ttl - elapsed - drift`, or `None` when that is
/// not positive (the lock must not be granted).
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn drift_defaults_match_the_redlock_description() {
        // ttl x 0.01 + 2 ms
        assert_eq!(drift(10_000 * MS, 0.01, 2 * MS), 102 * MS);
        assert_eq!(drift(30_000 * MS, 0.01, 2 * MS), 302 * MS);
    }

    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift() {
        assert_eq!(validity(10_000 * MS, 40 * MS, 102 * MS), Some(9_858 * MS));
    }

    #[test]
    fn validity_shrinks_as_acquisition_takes_longer() {
        let d = drift(1_000 * MS, 0.01, 2 * MS);
        let mut last = Duration::MAX;
        for elapsed in (0..988).step_by(7) {
            let v = validity(1_000 * MS, elapsed * MS, d).unwrap();
            assert!(v < last);
            assert!(v < 1_000 * MS);
            last = v;
        }
    }

    #[test]
    fn no_validity_left_is_none() {
        assert_eq!(validity(1_000 * MS, 988 * MS, 12 * MS), None);
        assert_eq!(validity(1_000 * MS, 2_000 * MS, 12 * MS), None);
        assert_eq!(validity(10 * MS, Duration::ZERO, 12 * MS), None);
    }
}
