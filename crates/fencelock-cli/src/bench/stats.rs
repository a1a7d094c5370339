//! Latency samples and their summary: pure arithmetic, no I/O.

use std::time::Duration;

/// What one series (the library, or the raw baseline) measured.
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    /// Cycles that completed.
    pub(crate) count: usize,
    /// Cycles that failed.
    pub(crate) errors: usize,
    /// Wall time of the whole series.
    pub(crate) elapsed: Duration,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) max: Duration,
    pub(crate) mean: Duration,
}

impl Summary {
    /// Summarizes `samples` (one per completed cycle), sorting them in place so that the caller
    /// can plot them afterwards.
    pub(crate) fn of(samples: &mut [Duration], errors: usize, elapsed: Duration) -> Summary {
        samples.sort_unstable();
        let total: Duration = samples.iter().sum();
        let mean = u32::try_from(samples.len())
            .ok()
            .filter(|n| *n > 0)
            .map_or(Duration::ZERO, |n| total / n);
        Summary {
            count: samples.len(),
            errors,
            elapsed,
            p50: percentile(samples, 0.50),
            p99: percentile(samples, 0.99),
            max: samples.last().copied().unwrap_or_default(),
            mean,
        }
    }

    /// Completed cycles per second of wall time.
    pub(crate) fn per_sec(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.count as f64 / secs
        } else {
            0.0
        }
    }

    /// The summary as JSON fields (durations in microseconds, the unit the figures live in).
    pub(crate) fn json(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("cycles".into(), self.count.into());
        m.insert("errors".into(), self.errors.into());
        m.insert(
            "elapsed_ms".into(),
            micros(self.elapsed).div_euclid(1000).into(),
        );
        m.insert("cycles_per_sec".into(), round2(self.per_sec()).into());
        m.insert("p50_us".into(), micros(self.p50).into());
        m.insert("p99_us".into(), micros(self.p99).into());
        m.insert("max_us".into(), micros(self.max).into());
        m.insert("mean_us".into(), micros(self.mean).into());
        m
    }
}

/// Nearest-rank percentile of sorted samples (`q` in 0..=1); zero for no samples.
pub(crate) fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A duration for people: µs below a millisecond, ms below a second.
pub(crate) fn human(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0}µs")
    } else if us < 1e6 {
        format!("{:.2}ms", us / 1000.0)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut s: Vec<Duration> = (1..=100).rev().map(ms).collect();
        let sum = Summary::of(&mut s, 3, Duration::from_secs(2));
        assert_eq!(sum.p50, ms(50));
        assert_eq!(sum.p99, ms(99));
        assert_eq!(sum.max, ms(100));
        assert_eq!(sum.count, 100);
        assert_eq!(sum.errors, 3);
        assert!((sum.per_sec() - 50.0).abs() < 1e-9);
        assert_eq!(s[0], ms(1), "sorted in place for the plot");
    }

    #[test]
    fn empty_series_summarize_to_zero() {
        let sum = Summary::of(&mut [], 0, Duration::ZERO);
        assert_eq!(sum.p50, Duration::ZERO);
        assert_eq!(sum.per_sec(), 0.0);
        assert_eq!(sum.mean, Duration::ZERO);
    }

    #[test]
    fn humans_read_microseconds_and_milliseconds() {
        assert_eq!(human(Duration::from_micros(87)), "87µs");
        assert_eq!(human(Duration::from_micros(1500)), "1.50ms");
    }
}
