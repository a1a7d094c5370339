//! The extension rule: what happens after one attempt to extend a lock. Pure logic, no I/O; the
//! engine in `keepalive.rs` carries it out for every backend (the Redis batches, etcd's leases,
//! and through `LockGuard`, `fencelock run`).
//!
//! One rule for all: an attempt that extended moves the deadline and the next attempt is due an
//! interval after this one started. An attempt that shows a quorum impossible (the keys gone or
//! another owner's on too many nodes, an etcd lease that no longer exists) loses the lock at
//! once. Any other failure (nodes that did not answer, a connection refused) is retried within
//! the validity that is left, every retry delay, and the lock is lost only when the local
//! deadline minus the safety margin comes before an attempt succeeded.

use std::time::{Duration, Instant};

use crate::error::LostCause;

/// What one attempt to extend a lock found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// A quorum extended it; the new validity deadline.
    Extended(Instant),
    /// No quorum can extend it any more: the keys are gone or another owner's on too many nodes.
    Impossible,
    /// A quorum extended it, but the attempt took so long that no validity is left.
    TooLate,
    /// Too few nodes answered (failed, timed out); retrying may succeed.
    Failed,
}

/// What the engine does next with a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Extend it again at this instant (a deadline to set first, if the attempt extended).
    At {
        due: Instant,
        deadline: Option<Instant>,
    },
    /// No more extensions are wanted (the hold cap was reached): set the deadline, if the
    /// attempt extended, and let the lock run out.
    Stop { deadline: Option<Instant> },
    /// Fire the lost signal.
    Lost(LostCause),
}

/// The timing a lock is extended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Schedule {
    /// Between the starts of two successful attempts.
    pub(crate) interval: Duration,
    /// After a failed attempt, before the next.
    pub(crate) retry: Duration,
    /// How long before the validity deadline the lock counts as lost.
    pub(crate) margin: Duration,
    /// No extension starts at or after this instant (the hold cap).
    pub(crate) until: Option<Instant>,
}

/// The retry delay for a lock of `ttl`: a tenth of it, between 10 ms and 1 s, so that a lock
/// gets several retries within its validity and a long one does not hammer a failing node.
pub(crate) fn retry_delay(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// The rule. `started` is when the attempt began, `now` when its outcome is known, `deadline`
/// the lock's validity deadline before the attempt.
pub(crate) fn after(
    attempt: Attempt,
    schedule: &Schedule,
    started: Instant,
    now: Instant,
    deadline: Instant,
) -> Next {
    let give_up = deadline.checked_sub(schedule.margin).unwrap_or(deadline);
    match attempt {
        // A success that comes after the holder was told (or could have been told) it lost the
        // lock does not revive it: the signal has fired or its time has come.
        Attempt::Extended(_) | Attempt::TooLate | Attempt::Failed if now >= give_up => {
            Lost(if attempt == Attempt::Failed {
                LostCause::Unreachable
            } else {
                LostCause::Expired
            })
        }
        Attempt::Extended(new_deadline) => {
            let due = started + schedule.interval;
            match schedule.until {
                Some(until) if due >= until => Next::Stop {
                    deadline: Some(new_deadline),
                },
                _ => Next::At {
                    due,
                    deadline: Some(new_deadline),
                },
            }
        }
        Attempt::Impossible => Lost(LostCause::NotHeld),
        Attempt::TooLate => Lost(LostCause::Expired),
        Attempt::Failed => {
            let due = now + schedule.retry;
            if schedule.until.is_some_and(|u| due >= u) {
                Next::Stop { deadline: None }
            } else if due >= give_up {
                // No retry can start before the lock counts as lost: say why now rather than
                // let the clock say "expired" later.
                Lost(LostCause::Unreachable)
            } else {
                Next::At {
                    due,
                    deadline: None,
                }
            }
        }
    }
}

use Next::Lost;

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn schedule() -> Schedule {
        Schedule {
            interval: 300 * MS,
            retry: 100 * MS,
            margin: 100 * MS,
            until: None,
        }
    }

    #[test]
    fn a_success_moves_the_deadline_and_the_next_is_an_interval_after_its_start() {
        let t0 = Instant::now();
        let next = after(
            Attempt::Extended(t0 + 990 * MS),
            &schedule(),
            t0,
            t0 + 20 * MS,
            t0 + 600 * MS,
        );
        assert_eq!(
            next,
            Next::At {
                due: t0 + 300 * MS,
                deadline: Some(t0 + 990 * MS)
            }
        );
    }

    #[test]
    fn a_failure_is_retried_within_the_validity_left() {
        let t0 = Instant::now();
        let deadline = t0 + 600 * MS;
        let s = schedule();
        // Retries at 100 ms steps while the retry starts before deadline - margin (500 ms).
        let mut now = t0;
        let mut retries = 0;
        loop {
            match after(Attempt::Failed, &s, now, now, deadline) {
                Next::At {
                    due,
                    deadline: None,
                } => {
                    assert!(due < deadline - s.margin);
                    now = due;
                    retries += 1;
                }
                Next::Lost(cause) => {
                    assert_eq!(cause, LostCause::Unreachable);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(retries, 4, "retries at 100, 200, 300, 400 ms");
    }

    #[test]
    fn a_quorum_that_is_impossible_loses_the_lock_at_once() {
        let t0 = Instant::now();
        let next = after(Attempt::Impossible, &schedule(), t0, t0, t0 + 10_000 * MS);
        assert_eq!(next, Next::Lost(LostCause::NotHeld));
    }

    #[test]
    fn a_late_success_does_not_revive_a_lock_whose_time_had_come() {
        let t0 = Instant::now();
        let deadline = t0 + 600 * MS;
        let next = after(
            Attempt::Extended(t0 + 2_000 * MS),
            &schedule(),
            t0,
            deadline - 50 * MS,
            deadline,
        );
        assert_eq!(next, Next::Lost(LostCause::Expired));
        // And a failure at that time is the nodes' doing.
        let next = after(Attempt::Failed, &schedule(), t0, deadline, deadline);
        assert_eq!(next, Next::Lost(LostCause::Unreachable));
    }

    #[test]
    fn the_hold_cap_stops_extensions_after_the_last_success() {
        let t0 = Instant::now();
        let s = Schedule {
            until: Some(t0 + 200 * MS),
            ..schedule()
        };
        let next = after(
            Attempt::Extended(t0 + 990 * MS),
            &s,
            t0,
            t0 + 10 * MS,
            t0 + 600 * MS,
        );
        assert_eq!(
            next,
            Next::Stop {
                deadline: Some(t0 + 990 * MS)
            }
        );
        // A failure past the cap stops retrying too; the lock runs out by itself.
        let next = after(
            Attempt::Failed,
            &s,
            t0 + 150 * MS,
            t0 + 150 * MS,
            t0 + 600 * MS,
        );
        assert_eq!(next, Next::Stop { deadline: None });
    }

    #[test]
    fn too_late_is_expired() {
        let t0 = Instant::now();
        assert_eq!(
            after(Attempt::TooLate, &schedule(), t0, t0, t0 + 600 * MS),
            Next::Lost(LostCause::Expired)
        );
    }

    #[test]
    fn retry_delays_stay_within_bounds() {
        assert_eq!(retry_delay(50 * MS), 10 * MS);
        assert_eq!(retry_delay(1_000 * MS), 100 * MS);
        assert_eq!(retry_delay(30_000 * MS), 1_000 * MS);
    }
}
