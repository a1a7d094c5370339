//! One attempt of the Redlock algorithm, and the settling of every round into a result.
//!
//! An attempt: round 1 sets the keys on every node (until a quorum is decided); in fencing mode
//! [`RedisBackend::fence`] (`guard.rs`) derives the token from the counters the granting
//! nodes returned and writes it back, and once the token is issued [`RedisBackend::seed`] seeds
//! the granting nodes that had no counter; the validity left decides whether the lock is worth
//! having. Whatever fails, the keys are released on every node before the error returns.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ops::Wait;
use super::undo::{Side, Undo};
use super::{Grant, RedisBackend, RedisHeld};
use crate::error::{Error, LostCause, Result};
use crate::keepalive::Outcome;
use crate::pure::extension::Attempt;
use crate::pure::quorum::Decision;
use crate::pure::token::OwnerToken;
use crate::pure::validity;
use crate::pure::vote::{VoteOutcome, Votes};

impl RedisBackend {
    /// One attempt to take `keys`: see the module docs.
    ///
    /// # Errors
    ///
    /// As `Client::try_acquire`; whatever the error, release has been sent to every node.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before it returns, it releases what it may have set in the
    /// background (`undo.rs`).
    pub(crate) async fn attempt(
        self: &Arc<Self>,
        keys: &Arc<[String]>,
        wait: Wait<'_>,
    ) -> Result<Grant> {
        let resource = keys[0].as_str();
        let line = match wait {
            Wait::InLine(ticket) => Some(ticket),
            _ => None,
        };
        // The holder label rides in the value (`holder.rs`): no key and no command of its own.
        let token = OwnerToken::generate()
            .map_err(|e| {
                Error::config(
                    "random source",
                    format!("the OS random number generator failed: {e}"),
                )
            })?
            .carrying(self.holder.as_deref());
        let proposal = if self.settings.fencing {
            self.next_proposal()
        } else {
            0
        };
        // Armed before the first write, disarmed on every return below.
        let undo = Undo::arm(self, keys, token.as_str(), Side::Exclusive);
        let started = Instant::now();
        let round = self.acquire(keys, token.as_str(), wait, proposal).await;
        if round.decision != Decision::Reached {
            self.release_quietly(keys, token.as_str(), None).await;
            undo.disarm();
            return Err(classify(resource, round.votes, self.quorum));
        }
        let fenced = if self.settings.fencing {
            match self
                .fence(&round.granted, &round.votes, keys, token.as_str(), proposal)
                .await
            {
                Ok(f) => Some(f),
                Err(e) => {
                    self.release_quietly(keys, token.as_str(), None).await;
                    undo.disarm();
                    return Err(e);
                }
            }
        } else {
            None
        };
        let votes = round.votes;
        let elapsed = started.elapsed();
        let Some(valid_for) = validity::validity(self.settings.ttl, elapsed, self.settings.drift)
        else {
            self.release_quietly(keys, token.as_str(), None).await;
            undo.disarm();
            return Err(Error::TooSlow {
                resource: resource.to_string(),
                votes,
            });
        };
        let deadline = started + (elapsed + valid_for);
        // Issued: only now are the granting nodes without a counter seeded (`guard.rs`).
        if let Some(f) = &fenced {
            crate::telemetry::token_issued(f.path);
            self.seed(f, keys, token.as_str(), started).await;
        }
        let fencing_token = fenced.map(|f| f.token);
        tracing::debug!(resource, ?elapsed, validity = ?valid_for, fencing_token, "acquired");
        // From here to the `Lock` no await: the caller's drop of that lock releases it.
        undo.disarm();
        Ok(Grant {
            // A lock taken in line leaves the line with its release.
            held: RedisHeld {
                token,
                line: line.map(|t| Arc::from(t.id.as_str())),
            },
            fencing_token,
            deadline,
            votes,
        })
    }

    /// Releases, ignoring the outcome. `line`: the waiter id to take out of the line (after a
    /// failed attempt the waiter keeps its place: `None`).
    pub(crate) async fn release_quietly(&self, keys: &[String], token: &str, line: Option<&str>) {
        let round = self.release(keys, token, line, false).await;
        tracing::debug!(resource = %keys[0], votes = %round.votes, "released");
    }

    /// Releases what a lock holds, ignoring the outcome (after failures and on drop).
    pub(crate) async fn release_held_quietly(&self, keys: &[String], held: &RedisHeld) {
        self.release_quietly(keys, held.owner(), held.line.as_deref())
            .await;
    }

    /// Releases what a lock holds on every node; returns once a quorum deleted (the other
    /// nodes' requests finish in the background, see `round.rs`'s `Mode::Release`).
    ///
    /// # Errors
    ///
    /// As `Lock::release`.
    pub(crate) async fn release_held(&self, keys: &[String], held: &RedisHeld) -> Result<Votes> {
        let round = self
            .release(keys, held.owner(), held.line.as_deref(), true)
            .await;
        if round.granted.iter().any(|(_, heard)| *heard > 0) {
            self.note_waiters(&keys[0]);
        }
        // The acquisition's counterpart ("acquired" above), for a reader of the debug log.
        tracing::debug!(resource = %keys[0], votes = %round.votes, "release of a held lock");
        self.settle(&keys[0], round.decision, round.votes, false)
    }

    /// Releases `keys` if `token` still owns them (a token handed between processes).
    ///
    /// # Errors
    ///
    /// As `Client::release_by_owner`.
    pub(crate) async fn release_by_owner(&self, keys: &[String], token: &str) -> Result<Votes> {
        let round = self.release(keys, token, None, false).await;
        self.settle(&keys[0], round.decision, round.votes, false)
    }

    /// Extends `keys` to a fresh TTL if `token` still owns them on a quorum.
    ///
    /// # Errors
    ///
    /// As `Client::extend_by_owner`.
    pub(crate) async fn extend_by_owner(&self, keys: &[String], token: &str) -> Result<Votes> {
        let round = self.extend(keys, token, self.settings.node_timeout).await;
        self.settle(&keys[0], round.decision, round.votes, false)
    }

    /// Extends what a lock holds before `deadline` (its validity deadline), under the extension
    /// engine's rule: an attempt that too few nodes answered is retried within the validity
    /// left. Returns the new deadline.
    ///
    /// # Errors
    ///
    /// As `Lock::extend`.
    pub(crate) async fn extend_held(
        &self,
        keys: &[String],
        held: &RedisHeld,
        deadline: Instant,
    ) -> Result<(Instant, Votes)> {
        let retry = crate::pure::extension::retry_delay(self.settings.ttl);
        crate::keepalive::extend_within(deadline, retry, |budget| {
            self.extend_once(keys, held.owner(), budget)
        })
        .await
        .map_err(|(cause, votes)| Error::lost(keys[0].clone(), votes, cause))
    }

    /// One attempt to extend `keys` within `budget`: what it found, with the round's votes.
    async fn extend_once(
        &self,
        keys: &[String],
        token: &str,
        budget: Duration,
    ) -> (Outcome, Votes) {
        // Every time-based judgement below comes from one reading of the clock after the
        // round, `now`: two readings could judge "not expired" at the first and compute the
        // deadline from a later second one.
        let started = Instant::now();
        // A quorum may answer any time before the validity runs out; the round returns as soon
        // as it does, so a long bound costs nothing when the nodes are healthy.
        let round = self
            .extend(keys, token, budget.max(Duration::from_millis(1)))
            .await;
        self.extension_outcome(round, started, budget)
    }

    /// What an extension round that began at `started` with `budget` found (for a mutex here,
    /// for a reader in `rwlock.rs`).
    pub(super) fn extension_outcome(
        &self,
        round: super::round::Round<()>,
        started: Instant,
        budget: Duration,
    ) -> (Outcome, Votes) {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(started);
        let outcome = if round.decision == Decision::Reached {
            match validity::validity(self.settings.ttl, elapsed, self.settings.drift) {
                Some(valid_for) if elapsed < budget => Outcome::extended(now + valid_for),
                _ => Outcome::failed(
                    Attempt::TooLate,
                    "the extension reached a quorum after the validity ran out",
                ),
            }
        } else {
            let refused = round
                .votes
                .iter()
                .filter(|v| matches!(v.outcome, VoteOutcome::NotHeld | VoteOutcome::HeldByOther))
                .count();
            let attempt = if refused > self.nodes.len().saturating_sub(self.quorum) {
                Attempt::Impossible
            } else {
                Attempt::Failed
            };
            Outcome::failed(attempt, round.votes.to_string())
        };
        (outcome, round.votes)
    }

    /// The result of a release or extend round.
    pub(super) fn settle(
        &self,
        resource: &str,
        decision: Decision,
        votes: Votes,
        expired: bool,
    ) -> Result<Votes> {
        if decision == Decision::Reached && !expired {
            return Ok(votes);
        }
        let n = votes.len();
        let q = self.quorum;
        let refused = votes
            .iter()
            .filter(|v| matches!(v.outcome, VoteOutcome::NotHeld | VoteOutcome::HeldByOther))
            .count();
        if refused > n.saturating_sub(q) || (!expired && votes.failed() == 0) {
            Err(Error::lost(resource, votes, LostCause::NotHeld))
        } else if expired {
            Err(Error::lost(resource, votes, LostCause::Expired))
        } else {
            Err(Error::Unavailable {
                resource: resource.to_string(),
                votes,
            })
        }
    }
}

/// Contention when the nodes held by others alone rule out a quorum; otherwise the failures did.
pub(super) fn classify(resource: &str, votes: Votes, quorum: usize) -> Error {
    let n = votes.len();
    let resource = resource.to_string();
    if votes.held_by_other() > n.saturating_sub(quorum) || votes.failed() == 0 {
        Error::Contention { resource, votes }
    } else {
        Error::Unavailable { resource, votes }
    }
}
