//! Per-node outcomes of one round of requests (acquire, extend, release).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::pure::node_error::{FailureCause, NodeError};

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
    Failed(NodeError),
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
#[non_exhaustive]
pub struct NodeVote {
    /// The node, as its redacted address (`redis://:***@host:port/db`). Shared by every vote
    /// of the node: a round allocates no names.
    pub node: Arc<str>,
    /// What the node answered.
    pub outcome: VoteOutcome,
    /// Time from sending the request to the answer (or to the timeout).
    pub latency: Duration,
}

impl NodeVote {
    /// A vote: `node` (its redacted address), what it answered, and how long it took.
    pub fn new(node: impl Into<Arc<str>>, outcome: VoteOutcome, latency: Duration) -> NodeVote {
        NodeVote {
            node: node.into(),
            outcome,
            latency,
        }
    }
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
pub struct Votes(Vec<NodeVote>);

impl Votes {
    /// How many nodes voted (every node of the round).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is no vote (a backend that does not count nodes, such as etcd's releases).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The votes in node order.
    pub fn as_slice(&self) -> &[NodeVote] {
        &self.0
    }

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

impl From<Vec<NodeVote>> for Votes {
    fn from(votes: Vec<NodeVote>) -> Votes {
        Votes(votes)
    }
}

impl FromIterator<NodeVote> for Votes {
    fn from_iter<I: IntoIterator<Item = NodeVote>>(iter: I) -> Votes {
        Votes(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a Votes {
    type Item = &'a NodeVote;
    type IntoIter = std::slice::Iter<'a, NodeVote>;

    fn into_iter(self) -> Self::IntoIter {
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

/// The failure every node of the round reported, if they all reported the same one.
pub(crate) fn all_same(votes: &Votes) -> Option<&NodeError> {
    let mut errors = votes.iter().map(|v| match &v.outcome {
        VoteOutcome::Failed(e) => Some(e),
        _ => None,
    });
    let first = errors.next()??;
    errors.all(|e| e == Some(first)).then_some(first)
}

/// How many nodes of the round failed for a reason only a configuration change fixes.
pub(crate) fn misconfigured(votes: &Votes) -> usize {
    votes
        .iter()
        .filter(|v| matches!(&v.outcome, VoteOutcome::Failed(e) if e.needs_config_change()))
        .count()
}

/// What to try for a round that failed: the hint of each cause seen, most specific first, or
/// the general one.
pub(crate) fn advice(votes: &Votes) -> String {
    let mut hints: Vec<&'static str> = Vec::new();
    let lost_counter = |why: &str| why.starts_with(crate::pure::fencing::LOST_COUNTER);
    if votes
        .iter()
        .any(|v| matches!(&v.outcome, VoteOutcome::Excluded(why) if !lost_counter(why)))
    {
        hints.push("a node in restart quarantine counts again once the longest TTL in use has passed since its restart (each says when); fresh nodes that never held a lock can be counted at once with with_quarantine(false)");
    }
    if votes
        .iter()
        .any(|v| matches!(&v.outcome, VoteOutcome::Excluded(why) if lost_counter(why)))
    {
        hints.push("fencing needs a quorum of granting nodes that kept their fence counter: retry once the nodes that still have it answer (a later grant then seeds the others), or, if those nodes are gone for good, run `fencelock reseed --above <the fenced storage's last token>`");
    }
    for vote in votes.iter() {
        if let VoteOutcome::Failed(e) = &vote.outcome {
            if e.cause() != FailureCause::Other
                && e.cause() != FailureCause::Refused
                && !hints.contains(&e.hint())
            {
                hints.push(e.hint());
            }
        }
    }
    if hints.is_empty() || votes.iter().any(|v| general(&v.outcome)) {
        hints.push(NodeError::other("").hint());
    }
    hints.join("; ")
}

/// Whether an outcome calls for the general advice (the node is down, slow or unreachable).
fn general(outcome: &VoteOutcome) -> bool {
    match outcome {
        VoteOutcome::TimedOut => true,
        VoteOutcome::Failed(e) => matches!(e.cause(), FailureCause::Other | FailureCause::Refused),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn votes(outcomes: &[VoteOutcome]) -> Votes {
        Votes::from(
            outcomes
                .iter()
                .enumerate()
                .map(|(i, outcome)| NodeVote {
                    node: Arc::from(format!("redis://:***@127.0.0.1:{}/0", 7000 + i)),
                    outcome: outcome.clone(),
                    latency: Duration::from_millis(1),
                })
                .collect::<Vec<_>>(),
        )
    }

    fn failed(cause: FailureCause) -> VoteOutcome {
        VoteOutcome::Failed(NodeError::new(cause, "x"))
    }

    #[test]
    fn the_same_failure_everywhere_is_found() {
        let auth = failed(FailureCause::Auth);
        assert!(all_same(&votes(&[auth.clone(), auth.clone(), auth.clone()])).is_some());
        assert!(all_same(&votes(&[auth.clone(), auth.clone(), VoteOutcome::TimedOut])).is_none());
        assert!(all_same(&votes(&[auth.clone(), failed(FailureCause::Loading)])).is_none());
        assert!(all_same(&votes(&[])).is_none());
    }

    #[test]
    fn advice_follows_the_causes_seen() {
        let auth = failed(FailureCause::Auth);
        let advice_for = |o: &[VoteOutcome]| advice(&votes(o));
        let alone = advice_for(std::slice::from_ref(&auth));
        assert!(alone.starts_with("put the node's password"), "{alone}");
        assert!(!alone.contains("reachable"), "{alone}");
        let mixed = advice_for(&[auth, VoteOutcome::TimedOut]);
        assert!(
            mixed.contains("password") && mixed.contains("reachable"),
            "{mixed}"
        );
        assert!(advice_for(&[VoteOutcome::TimedOut]).contains("reachable"));
    }

    #[test]
    fn only_auth_and_acl_failures_count_as_misconfigured() {
        assert_eq!(
            misconfigured(&votes(&[
                failed(FailureCause::Auth),
                failed(FailureCause::NoPermission),
                VoteOutcome::TimedOut
            ])),
            2
        );
    }
}
