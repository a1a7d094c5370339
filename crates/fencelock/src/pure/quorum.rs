//! Quorum arithmetic and the early decision of a round: pure logic, no I/O.
//!
//! Public so that tools (and benchmarks) can reuse the exact rule the client applies.

/// The quorum for `n` nodes: a strict majority, `n / 2 + 1`.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Where a round of votes stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Not yet known: more answers are needed.
    Pending,
    /// At least a quorum granted.
    Reached,
    /// So many nodes refused or failed that a quorum can no longer be reached.
    Impossible,
}

/// Counts the answers of one round and decides as soon as the outcome is known.
#[derive(Debug, Clone)]
pub struct Tally {
    nodes: usize,
    quorum: usize,
    granted: usize,
    refused: usize,
}

impl Tally {
    /// A round over `nodes` nodes that needs `quorum` grants.
    pub fn new(nodes: usize, quorum: usize) -> Tally {
        debug_assert!(quorum >= 1 && quorum <= nodes);
        Tally {
            nodes,
            quorum,
            granted: 0,
            refused: 0,
        }
    }

    /// Records one answer: granted or not (refused, failed, timed out).
    pub fn record(&mut self, granted: bool) -> Decision {
        if granted {
            self.granted += 1;
        } else {
            self.refused += 1;
        }
        self.decision()
    }

    /// The decision given the answers so far.
    pub fn decision(&self) -> Decision {
        if self.granted >= self.quorum {
            Decision::Reached
        } else if self.nodes - self.refused < self.quorum {
            Decision::Impossible
        } else {
            Decision::Pending
        }
    }

    /// How many nodes granted so far.
    #[cfg(test)]
    pub(crate) fn granted(&self) -> usize {
        self.granted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
        assert_eq!(quorum(7), 4);
        for n in 1..50 {
            // Two quorums always share a node: this is what mutual exclusion rests on.
            assert!(2 * quorum(n) > n);
        }
    }

    #[test]
    fn decides_reached_as_soon_as_a_quorum_grants() {
        let mut t = Tally::new(5, 3);
        assert_eq!(t.record(true), Decision::Pending);
        assert_eq!(t.record(false), Decision::Pending);
        assert_eq!(t.record(true), Decision::Pending);
        assert_eq!(t.record(true), Decision::Reached);
        assert_eq!(t.granted(), 3);
    }

    #[test]
    fn decides_impossible_as_soon_as_too_many_refuse() {
        let mut t = Tally::new(5, 3);
        assert_eq!(t.record(false), Decision::Pending);
        assert_eq!(t.record(true), Decision::Pending);
        assert_eq!(t.record(false), Decision::Pending);
        assert_eq!(t.record(false), Decision::Impossible);
    }

    #[test]
    fn single_node_decides_on_its_one_answer() {
        assert_eq!(Tally::new(1, 1).record(true), Decision::Reached);
        assert_eq!(Tally::new(1, 1).record(false), Decision::Impossible);
    }

    #[test]
    fn every_order_of_answers_decides_exactly_once_and_correctly() {
        // All 2^5 answer patterns, in the given order: the decision, once made, matches the
        // final count, and it is made no later than the last answer.
        for mask in 0u32..32 {
            let mut t = Tally::new(5, 3);
            let mut first = None;
            for i in 0..5 {
                let d = t.record(mask & (1 << i) != 0);
                if d != Decision::Pending && first.is_none() {
                    first = Some(d);
                }
            }
            let grants = mask.count_ones() as usize;
            let expected = if grants >= 3 {
                Decision::Reached
            } else {
                Decision::Impossible
            };
            assert_eq!(first, Some(expected), "mask {mask:05b}");
        }
    }
}
