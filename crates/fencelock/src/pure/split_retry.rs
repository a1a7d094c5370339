//! How a request whose keys a Redis Cluster slot move has split is sent again: while the tag's
//! slot migrates key by key, a request naming a key that moved and one that did not is refused
//! (`TRYAGAIN`, or inside a script "a non local key") without running. `MIGRATE` moves a few
//! keys per call in milliseconds, so the split usually ends soon: the request is sent again
//! after a short pause, doubled each time up to [`MAX_PAUSE`], while the pause still ends before
//! the deadline its caller gives (an extension: within the lock's validity; a release: within
//! the node timeout). The last refusal is the answer after that.

use std::time::{Duration, Instant};

/// The first pause: a few `MIGRATE` calls.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(5);

/// The longest pause: short beside any TTL, so that the end of a split is seen soon.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(100);

/// The pauses of one request until `until`.
#[derive(Debug, Clone)]
pub(crate) struct SplitRetry {
    until: Instant,
    next: Duration,
}

impl SplitRetry {
    /// Retries until `until`.
    pub(crate) fn until(until: Instant) -> SplitRetry {
        SplitRetry {
            until,
            next: FIRST_PAUSE,
        }
    }

    /// The pause before the next try at `now`, or `None` when it would end past the deadline
    /// (the refusal is then the answer).
    pub(crate) fn pause(&mut self, now: Instant) -> Option<Duration> {
        let pause = self.next;
        if now + pause >= self.until {
            return None;
        }
        self.next = (pause * 2).min(MAX_PAUSE);
        Some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_stop_before_the_deadline() {
        let start = Instant::now();
        let mut retry = SplitRetry::until(start + Duration::from_millis(500));
        let mut now = start;
        let mut pauses = Vec::new();
        while let Some(p) = retry.pause(now) {
            pauses.push(p.as_millis());
            now += p;
        }
        assert_eq!(pauses, [5, 10, 20, 40, 80, 100, 100, 100]);
        // The next pause (100 ms) would end past the deadline, 45 ms away.
        assert!(now < start + Duration::from_millis(500));
        // A deadline already past: no retry.
        assert_eq!(SplitRetry::until(start).pause(start), None);
    }
}
