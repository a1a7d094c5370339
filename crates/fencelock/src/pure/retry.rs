//! How long to wait between attempts: pure logic, no I/O.

use std::time::Duration;

/// Retry settings for [`Client::acquire`](crate::Client::acquire).
///
/// Between attempts the client waits a jittered delay that grows from `base_delay` toward
/// `max_delay`; it stops at the wait deadline or after `max_attempts`, whichever comes first.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    max_attempts: Option<u32>,
    wait: Duration,
    base_delay: Duration,
    max_delay: Duration,
}

impl RetryPolicy {
    /// Default total time `acquire` keeps trying.
    pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);
    /// Default first delay between attempts.
    pub const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(50);
    /// Default largest delay between attempts.
    pub const DEFAULT_MAX_DELAY: Duration = Duration::from_millis(500);

    /// Default retry policy: up to 10 s, delays from 50 ms to 500 ms, no attempt cap.
    pub fn new() -> RetryPolicy {
        RetryPolicy {
            max_attempts: None,
            wait: Self::DEFAULT_WAIT,
            base_delay: Self::DEFAULT_BASE_DELAY,
            max_delay: Self::DEFAULT_MAX_DELAY,
        }
    }

    /// Makes exactly one attempt (what `try_acquire` does).
    pub fn once() -> RetryPolicy {
        RetryPolicy::new().with_max_attempts(1)
    }

    /// Stops after this many attempts (at least 1).
    pub fn with_max_attempts(mut self, attempts: u32) -> RetryPolicy {
        self.max_attempts = Some(attempts.max(1));
        self
    }

    /// Stops trying once this much time has passed since the first attempt.
    pub fn with_wait(mut self, wait: Duration) -> RetryPolicy {
        self.wait = wait;
        self
    }

    /// The first delay between attempts; later delays grow toward `max_delay`.
    pub fn with_base_delay(mut self, delay: Duration) -> RetryPolicy {
        self.base_delay = delay;
        self.max_delay = self.max_delay.max(delay);
        self
    }

    /// The largest delay between attempts.
    pub fn with_max_delay(mut self, delay: Duration) -> RetryPolicy {
        self.max_delay = delay.max(self.base_delay);
        self
    }

    /// The attempt cap, if any.
    pub fn max_attempts(&self) -> Option<u32> {
        self.max_attempts
    }

    /// The total wait.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The largest delay between attempts.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// The delay before attempt number `attempt + 1`, given that `attempt` attempts (>= 1)
    /// have failed, and `unit`, a uniform random number in `[0, 1)`.
    ///
    /// The ceiling is `2 * base_delay` after the first attempt and doubles with each attempt up
    /// to `max_delay`; the delay is drawn from `[ceiling / 2, ceiling)` (never below
    /// `base_delay`) so that competing clients spread out instead of retrying in step. Every
    /// delay thus lies between `base_delay` and `max_delay`, as documented.
    pub(crate) fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let exp = attempt.clamp(1, 16);
        let ceiling = self
            .base_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay);
        let floor = (ceiling / 2).max(self.base_delay).min(ceiling);
        let unit = unit.clamp(0.0, 1.0);
        floor + (ceiling - floor).mul_f64(unit)
    }

    /// Whether another attempt may start after `attempts` attempts and `elapsed` time.
    pub(crate) fn may_retry(&self, attempts: u32, elapsed: Duration) -> bool {
        self.max_attempts.is_none_or(|max| attempts < max) && elapsed < self.wait
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn jitter_stays_within_half_to_full_ceiling() {
        let p = RetryPolicy::new()
            .with_base_delay(100 * MS)
            .with_max_delay(800 * MS);
        for attempt in 1..20u32 {
            let ceiling = (100 * MS * 2u32.pow(attempt.min(16))).min(800 * MS);
            for i in 0..=100 {
                let d = p.delay(attempt, i as f64 / 100.0);
                assert!(d >= ceiling / 2, "attempt {attempt}: {d:?}");
                assert!(d <= ceiling, "attempt {attempt}: {d:?}");
                // The documented range of every delay.
                assert!(
                    (100 * MS..=800 * MS).contains(&d),
                    "attempt {attempt}: {d:?}"
                );
            }
        }
    }

    #[test]
    fn delays_grow_then_cap() {
        let p = RetryPolicy::new()
            .with_base_delay(10 * MS)
            .with_max_delay(80 * MS);
        assert_eq!(p.delay(1, 0.0), 10 * MS);
        assert_eq!(p.delay(2, 0.0), 20 * MS);
        assert_eq!(p.delay(3, 0.0), 40 * MS);
        assert_eq!(p.delay(4, 0.0), 40 * MS);
        assert_eq!(p.delay(30, 0.0), 40 * MS);
        assert_eq!(p.delay(u32::MAX, 0.99), (40 * MS) + (40 * MS).mul_f64(0.99));
        // base == max: no jitter left, but never below the base.
        let flat = RetryPolicy::new()
            .with_base_delay(30 * MS)
            .with_max_delay(30 * MS);
        assert_eq!(flat.delay(1, 0.5), 30 * MS);
        assert_eq!(flat.delay(9, 0.99), 30 * MS);
    }

    #[test]
    fn stops_at_attempts_or_wait() {
        let p = RetryPolicy::new()
            .with_max_attempts(3)
            .with_wait(1_000 * MS);
        assert!(p.may_retry(2, 10 * MS));
        assert!(!p.may_retry(3, 10 * MS));
        assert!(!p.may_retry(1, 1_000 * MS));
        assert!(!RetryPolicy::once().may_retry(1, Duration::ZERO));
    }
}
