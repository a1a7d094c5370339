//! The Redis side of the extension engine (`keepalive.rs`): one attempt for a batch of locks is
//! one pipeline per node (a compare-and-extend per lock, each announcing its TTL in the same
//! script), sent through the round engine like every other Redis operation, so that the traffic
//! grows with the number of batches, not the number of locks, and requests still in flight when
//! the round returns reach their node in the background.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{RedisBackend, RedisHeld};
use crate::keepalive::{Extends, GuardState, Outcome, Stop};
use crate::pure::extension::{Attempt, Schedule};
use crate::pure::validity;

/// What the engine keeps of a Redis lock: its keys and its owner value, and whether it is a
/// read lock (`rwlock.rs`: extended by the readers' script).
#[derive(Debug)]
pub(crate) struct ExtendedLock {
    pub(super) keys: Arc<[String]>,
    pub(super) token: Arc<str>,
    pub(super) shared: bool,
}

/// How the nodes answered the extension of one lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Count {
    /// Nodes that extended it.
    pub(crate) extended: usize,
    /// Nodes that answered that they do not hold it (key gone or another owner's).
    pub(crate) not_held: usize,
}

impl RedisBackend {
    /// Registers a lock with the client's extension engine; the returned [`Stop`] takes it out.
    pub(crate) fn keep_alive(
        self: &Arc<Self>,
        keys: Arc<[String]>,
        held: &RedisHeld,
        state: Arc<GuardState>,
        schedule: Schedule,
    ) -> Stop {
        let lock = ExtendedLock {
            token: Arc::from(held.owner()),
            keys: keys.clone(),
            shared: false,
        };
        self.engine.register(self, &keys[0], lock, state, schedule)
    }

    /// What one lock's counts mean: extended (with the deadline the attempt's start leaves),
    /// impossible (too many nodes do not hold it), or failed (too few answered).
    fn outcome(&self, count: Count, deadline: Option<Instant>, votes: &str) -> Outcome {
        let n = self.nodes.len();
        if count.extended >= self.quorum {
            return match deadline {
                Some(deadline) => Outcome::extended(deadline),
                None => Outcome::failed(
                    Attempt::TooLate,
                    "the extension reached a quorum after the validity ran out",
                ),
            };
        }
        let why = format!(
            "extended on {} of {n} nodes, not held on {}, quorum {}: {votes}",
            count.extended, count.not_held, self.quorum
        );
        if n - count.not_held < self.quorum {
            Outcome::failed(Attempt::Impossible, why)
        } else {
            Outcome::failed(Attempt::Failed, why)
        }
    }
}

impl Extends for RedisBackend {
    type Lock = ExtendedLock;

    async fn extend_batch(
        self: Arc<Self>,
        locks: Vec<Arc<ExtendedLock>>,
        budget: Duration,
    ) -> Vec<Outcome> {
        let started = Instant::now();
        // An extension may take as long as the validity it protects allows; a quorum usually
        // answers long before, and the round returns then.
        let timeout = budget.max(self.settings.node_timeout);
        let (counts, votes) = self.extend_batch_round(&locks, timeout).await;
        let now = Instant::now();
        let deadline = validity::validity(
            self.settings.ttl,
            now.saturating_duration_since(started),
            self.settings.drift,
        )
        .map(|v| now + v);
        let votes = votes.to_string();
        counts
            .into_iter()
            .map(|count| self.outcome(count, deadline, &votes))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::node::NodeAddr;

    fn backend(n: usize) -> RedisBackend {
        let urls: Vec<String> = (0..n)
            .map(|i| format!("redis://127.0.0.1:{}", i + 1))
            .collect();
        let addrs = urls.iter().map(|u| NodeAddr::parse(u).unwrap()).collect();
        RedisBackend::new(addrs, &Config::new(&urls).with_quarantine(false)).unwrap()
    }

    #[test]
    fn counts_become_the_rules_attempts() {
        let be = backend(5);
        let at = Instant::now();
        let of = |extended, not_held, deadline| {
            be.outcome(Count { extended, not_held }, deadline, "")
                .attempt
        };
        assert_eq!(of(3, 0, Some(at)), Attempt::Extended(at));
        assert_eq!(of(3, 2, None), Attempt::TooLate);
        // Two nodes answered "not held": three could still extend it, so retry.
        assert_eq!(of(1, 2, Some(at)), Attempt::Failed);
        // Three said "not held": no quorum of five can extend it any more.
        assert_eq!(of(2, 3, Some(at)), Attempt::Impossible);
        assert_eq!(of(0, 0, Some(at)), Attempt::Failed);
    }
}
