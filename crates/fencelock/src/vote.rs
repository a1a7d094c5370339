//! Per-node outcomes of one round of requests (acquire, extend, release).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What one node answered in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VoteOutcome {
    /// The node granted the request (the key was set, extended or deleted).
    Granted,
    /// The node holds the key for another owner.
    HeldByOther,
    /// The node did not hold our key (release or extend after expiry, or the key belongs to no one).
    NotHeld,
    /// The node did not answer within the per-node timeout.
    TimedOut,
    /// The node answered with an error, or could not be reached: why, with its cause. The text
    /// never holds secrets.
    Failed(crate::node_error::NodeError),
    /// The node had not answered yet when the round's outcome was decided (its request finishes
    /// in the background).
    Pending,
    /// The node is not counted toward the quorum (for example: it restarted recently and is in
    /// quarantine).
    Excluded(String),
}

impl VoteOutcome {
    /// Whether the node granted the request.
    pub fn is_granted(&self) -> bool {
        matches!(self, VoteOutcome::Granted)
    }

    /// Whether the node failed to answer (error, timeout or exclusion), as opposed to a clear refusal.
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            VoteOutcome::TimedOut | VoteOutcome::Failed(_) | VoteOutcome::Excluded(_)
        )
    }
}

impl fmt::Display for VoteOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VoteOutcome::Granted => f.write_str("granted"),
            VoteOutcome::HeldByOther => f.write_str("held by another owner"),
            VoteOutcome::NotHeld => f.write_str("not held by us"),
            VoteOutcome::TimedOut => f.write_str("timed out"),
            VoteOutcome::Pending => f.write_str("no answer needed: the round had decided"),
            VoteOutcome::Failed(why) => write!(f, "failed: {why}"),
            VoteOutcome::Excluded(why) => write!(f, "excluded: {why}"),
        }
    }
}

/// One node's answer in one round, with the time it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeVote {
    /// The node, as its redacted address (`redis://:***@host:port/db`). Shared by every vote
    /// of the node: a round allocates no names.
    pub node: Arc<str>,
    /// What the node answered.
    pub outcome: VoteOutcome,
    /// Time from sending the request to the answer (or to the timeout).
    pub latency: Duration,
}

impl fmt::Display for NodeVote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.outcome {
            // Not awaited: there is no latency to show.
            VoteOutcome::Pending => write!(f, "{}: {}", self.node, self.outcome),
            _ => write!(f, "{}: {} in {:?}", self.node, self.outcome, self.latency),
        }
    }
}

/// The per-node answers of one round, in the order the nodes were configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Votes(pub Vec<NodeVote>);

impl Votes {
    /// How many nodes granted.
    pub fn granted(&self) -> usize {
        self.0.iter().filter(|v| v.outcome.is_granted()).count()
    }

    /// How many nodes failed (error, timeout, exclusion).
    pub fn failed(&self) -> usize {
        self.0.iter().filter(|v| v.outcome.is_failure()).count()
    }

    /// How many nodes hold the key for another owner.
    pub fn held_by_other(&self) -> usize {
        self.0
            .iter()
            .filter(|v| v.outcome == VoteOutcome::HeldByOther)
            .count()
    }

    /// Iterates over the votes.
    pub fn iter(&self) -> std::slice::Iter<'_, NodeVote> {
        self.0.iter()
    }
}

impl fmt::Display for Votes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{v}")?;
        }
        Ok(())
    }
}
