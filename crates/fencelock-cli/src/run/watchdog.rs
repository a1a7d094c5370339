//! The guard's own kill clock: the SIGKILL deadline of `fencelock run`, kept in the guard
//! process so that it holds when the supervisor cannot act on it.
//!
//! The supervisor owns the lock and its kill clock, but it is one process: stopped (`kill
//! -STOP`, a debugger), starved, or frozen in a swap storm, it sends nothing, and the command
//! would run on past the validity deadline beside the next holder. The guard is another process
//! in another process group, so what stops the supervisor does not stop it (a `kill -STOP` of
//! the guard itself does: that, and a pause of the whole host, stay client pauses, fencing's
//! job). The supervisor tells the guard the SIGKILL time of the current validity deadline when
//! the command starts and again after every extension that moves it; the guard kills every
//! process of the command at that time unless a later time came meanwhile. Only SIGKILL: the
//! supervisor's SIGTERM a grace earlier is not repeated, since a second SIGTERM means "hurry"
//! to some programs.
//!
//! Both processes read `CLOCK_MONOTONIC`, which is one clock for the whole host, so a time
//! passes between them as nanoseconds on it (`at_ns`). No I/O here beyond reading the clock.

use std::time::{Duration, Instant};

/// `CLOCK_MONOTONIC` now, the clock `Instant` reads on Linux.
pub(crate) fn monotonic_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// `at` as nanoseconds of `CLOCK_MONOTONIC`, never later than `at` itself: the clock is read
/// before `Instant::now()`, so a preemption between the two reads moves the result earlier.
pub(crate) fn at_ns(at: Instant) -> u64 {
    let clock = monotonic_now();
    let now = Instant::now();
    let t = match at.checked_duration_since(now) {
        Some(ahead) => clock + ahead,
        None => clock.saturating_sub(now - at),
    };
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// The guard's SIGKILL deadline, as the supervisor last set it.
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    kill_at_ns: Option<u64>,
    fired: bool,
}

impl Watchdog {
    /// The supervisor's latest SIGKILL time. Once fired, the watchdog stays fired: a kill that
    /// began is never taken back.
    pub(crate) fn set(&mut self, at_ns: u64) {
        if !self.fired {
            self.kill_at_ns = Some(at_ns);
        }
    }

    /// Whether SIGKILL is due at `now_ns` and was not sent yet; marks it sent.
    pub(crate) fn due(&mut self, now_ns: u64) -> bool {
        match self.kill_at_ns {
            Some(at) if !self.fired && now_ns >= at => {
                self.fired = true;
                true
            }
            _ => false,
        }
    }

    /// How long the guard may wait for orders before it must look at the clock again: at most
    /// `idle`, and no later than the deadline.
    pub(crate) fn wait_ms(&self, now_ns: u64, idle: Duration) -> i32 {
        let idle_ms = i32::try_from(idle.as_millis()).unwrap_or(i32::MAX);
        match self.kill_at_ns {
            Some(at) if !self.fired => {
                let left_ms = at.saturating_sub(now_ns).div_ceil(1_000_000);
                i32::try_from(left_ms).unwrap_or(i32::MAX).min(idle_ms)
            }
            _ => idle_ms,
        }
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC` now.
pub(crate) fn now_ns() -> u64 {
    u64::try_from(monotonic_now().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_once_at_the_latest_deadline_and_never_moves_after() {
        let mut dog = Watchdog::default();
        assert!(!dog.due(u64::MAX), "no deadline, no kill");
        dog.set(1_000);
        dog.set(5_000);
        assert!(!dog.due(4_999));
        assert!(dog.due(5_000));
        assert!(!dog.due(6_000), "fires once");
        dog.set(10_000);
        assert!(!dog.due(20_000), "a fired kill is not re-armed");
    }

    #[test]
    fn waits_no_longer_than_the_deadline() {
        let mut dog = Watchdog::default();
        assert_eq!(dog.wait_ms(0, Duration::from_millis(20)), 20);
        dog.set(3_500_000);
        assert_eq!(dog.wait_ms(0, Duration::from_millis(20)), 4);
        assert_eq!(dog.wait_ms(3_500_000, Duration::from_millis(20)), 0);
    }

    #[test]
    fn a_deadline_passes_between_processes_no_later_than_it_is() {
        let at = Instant::now() + Duration::from_secs(3);
        let before = now_ns();
        let ns = at_ns(at);
        assert!(ns <= now_ns() + 3_000_000_000, "{ns}");
        assert!(
            ns + 50_000_000 >= before + 3_000_000_000,
            "{ns} vs {before}"
        );
    }
}
