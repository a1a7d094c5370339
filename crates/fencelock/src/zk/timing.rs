//! The ZooKeeper lock's validity arithmetic: pure logic, no I/O.

use std::time::{Duration, Instant};

/// The shortest time one request gets: a write is a quorum round (append and fsync on a
/// majority), so the Redis-sized default node timeout would fail requests that are merely slow.
pub(crate) const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// The pause before a waiter joins the line again after a failure (a server down, an
/// election): elections take a few ticks.
pub(crate) const RETRY_DELAY: Duration = Duration::from_millis(200);

/// The local validity deadline of a lock whose session answered a request sent at `sent`, with
/// the negotiated session timeout `session`: `sent + session - drift`.
///
/// Every request a server receives touches the session: the leader expires it no sooner than
/// a session timeout after it learned of the touch (a follower reports its touches at the
/// leader's next ping, later still), and that is after `sent`. The lock's node is ephemeral: no
/// one else can be granted the lock before the node goes, and it goes only with the session
/// (or a delete). So the deadline is never later than the earliest moment another waiter can
/// hold the lock, as long as the leader's clock runs at the client's rate within `drift`.
/// `None` when nothing is left after the drift.
pub(crate) fn deadline(sent: Instant, session: Duration, drift: Duration) -> Option<Instant> {
    let valid = session.checked_sub(drift).filter(|v| !v.is_zero())?;
    sent.checked_add(valid)
}

/// The drift allowance for a session of `session` when the configured TTL was `ttl`: the
/// configured allowance, scaled up when the server negotiated a longer session (the
/// proportional part grows with it; scaling the fixed part too errs on the safe side).
pub(crate) fn drift_for(session: Duration, ttl: Duration, drift: Duration) -> Duration {
    if session <= ttl || ttl.is_zero() {
        return drift;
    }
    drift
        .as_nanos()
        .checked_mul(session.as_nanos())
        .map(|n| n.div_ceil(ttl.as_nanos()))
        .and_then(|n| u64::try_from(n).ok())
        .map_or(Duration::MAX, Duration::from_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_counts_from_the_send_time_less_the_drift() {
        let sent = Instant::now();
        let s = Duration::from_secs(6);
        assert_eq!(
            deadline(sent, s, Duration::from_millis(70)),
            Some(sent + Duration::from_millis(5930))
        );
        assert_eq!(deadline(sent, s, s), None);
    }

    #[test]
    fn a_longer_session_than_asked_scales_the_drift() {
        let d = Duration::from_millis(100);
        assert_eq!(
            drift_for(Duration::from_secs(4), Duration::from_secs(4), d),
            d
        );
        assert_eq!(
            drift_for(Duration::from_secs(2), Duration::from_secs(4), d),
            d
        );
        assert_eq!(
            drift_for(Duration::from_secs(8), Duration::from_secs(4), d),
            Duration::from_millis(200)
        );
    }
}
