//! The amnesia guard's I/O in fencing mode (the rules themselves are pure, in
//! [`crate::pure::fencing`]; the argument and its model check are in `docs/fencing.md`).
//!
//! The acquisition round waits for more grants while its grants hold fewer than a quorum of
//! counters ([`WantsMore`]). Then: classify the granting nodes' reads (trusted iff the node has
//! its fence counter), start a new epoch only if every node of the set granted and none has a
//! counter, derive the token, write it back to the trusted granting nodes (a quorum must
//! acknowledge), and, only once the token is issued, seed the untrusted granting nodes with it.
//!
//! Why every node must *grant* for an epoch start (not merely answer, as a refusal that reports
//! the counter would): the model checker (`tests/fencing_model.rs`) found that a refusal from a
//! node held by another client can say "no counter" just before that client's write-back lands
//! there, and with one node restarted and a clock behind, two epochs then issued the same token.
//! A node we hold the key of takes no other client's write-back while we hold it, so reads from
//! all N granting nodes show that no counter exists anywhere at the last grant.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use super::round::WantsMore;
use super::RedisBackend;
use crate::error::Error;
use crate::pure::fencing::{self, CounterRead, Derivation};
use crate::pure::quorum::Decision;
use crate::pure::vote::{VoteOutcome, Votes};

/// What a fenced acquisition script read on one node: the largest of its counters (the node
/// counter and the keys' legacy ones, 0 if none) and whether any exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FenceRead {
    /// The largest counter after the script (the proposal, where the node accepted it).
    pub(crate) value: u64,
    pub(crate) exists: bool,
    /// The node took the attempt's proposed token (the one-round path).
    pub(crate) accepted: bool,
    /// A fencing-mode read (else the grant of a plain acquisition, which reads no counter).
    pub(crate) fenced: bool,
}

impl WantsMore for FenceRead {
    fn wants_more(granted: &[(usize, Self)], quorum: usize) -> bool {
        granted.first().is_some_and(|(_, r)| r.fenced)
            && granted.iter().filter(|(_, r)| r.exists).count() < quorum
    }
}

pub(crate) use crate::pure::fencing::LOST_COUNTER;

/// A seed's condition, sent with the write-back (`ops::write_back`) to a node without a counter (`WRITE_BACK`'s
/// ARGV[3]): the node takes it only if our keys there were set at least `wait` after it was
/// first found without its counter (`fencing::seed_wait`, plus the time since the attempt
/// started: the keys were set after the start, at most that long after it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seed {
    pub(crate) wait: Duration,
}

/// Which write-back `ops::write_back` sends (`WRITE_BACK`'s ARGV after the token). Only an
/// epoch start's and a seed may create a node's missing counter: a plain one goes to nodes
/// whose read was trusted, so a node without a counter then lost it since, and may have
/// recorded a larger token; created at ours, it would be trusted below that (issue 27).
#[derive(Debug, Clone, Copy)]
pub(crate) enum WriteBack {
    /// To the trusted granting nodes: raises a counter, creates none.
    Plain,
    /// An epoch start's, to every node (all granted without a counter): creates them.
    Epoch,
    /// After issue, to the granting nodes without a counter, after the seed wait.
    Seed(Seed),
}

/// A token ready to be issued, and the granting nodes to seed once it is.
#[derive(Debug)]
pub(crate) struct Fenced {
    pub(crate) token: u64,
    seeds: Vec<usize>,
    /// How the token was made, for the metrics: `one-round`, `derived` or `epoch`.
    pub(crate) path: &'static str,
}

impl RedisBackend {
    /// The token the next fenced attempt proposes (`fencing::propose`): above every token this
    /// client proposed or saw, and at least its clock in microseconds. Concurrent attempts of
    /// one client propose distinct tokens.
    pub(crate) fn next_proposal(&self) -> u64 {
        let now = SystemTime::now();
        let mut last = self.last_token.load(Ordering::Relaxed);
        loop {
            let proposal = fencing::propose(last, now);
            match self.last_token.compare_exchange_weak(
                last,
                proposal,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return proposal,
                Err(seen) => last = seen,
            }
        }
    }

    /// Steps 2 and 3 of a fenced acquisition: the proposal `proposal` if a quorum of the round's
    /// granting nodes accepted it (one round: no write-back), else the token from their reads,
    /// written back to the trusted ones. The caller checks the validity, then calls
    /// [`RedisBackend::seed`]; on an error it releases the keys.
    pub(crate) async fn fence(
        &self,
        granted: &[(usize, FenceRead)],
        votes: &Votes,
        keys: &[String],
        owner: &str,
        proposal: u64,
    ) -> Result<Fenced, Error> {
        let resource = keys[0].clone();
        // Whatever comes next, the next proposal starts above the counters seen here.
        if let Some(seen) = granted
            .iter()
            .filter(|(_, r)| r.exists)
            .map(|(_, r)| r.value)
            .max()
        {
            self.last_token.fetch_max(seen, Ordering::Relaxed);
        }
        let accepted = granted.iter().filter(|(_, r)| r.accepted).count();
        if let Some(token) = fencing::one_round(proposal, accepted, self.quorum) {
            // Each accepting node raised its counter to the token with the grant, which is the
            // write-back done in the same atomic step; the nodes without a counter are seeded
            // once it is issued, as after two rounds.
            let seeds = granted
                .iter()
                .filter(|(_, r)| !r.exists)
                .map(|(i, _)| *i)
                .collect();
            return Ok(Fenced {
                token,
                seeds,
                path: "one-round",
            });
        }
        let reads = || {
            granted
                .iter()
                .map(|(_, r)| CounterRead::from_node(r.value, r.exists))
        };
        let epoch =
            fencing::is_epoch_start(granted.iter().map(|(_, r)| r.exists), self.nodes.len());
        let (token, targets, seeds, path, kind) = match fencing::derive(reads(), self.quorum, epoch)
        {
            Derivation::Token(t) => {
                let (trusted, untrusted): (Vec<_>, Vec<_>) =
                    granted.iter().partition(|(_, r)| r.exists);
                (
                    t,
                    trusted.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
                    untrusted.iter().map(|(i, _)| *i).collect(),
                    "derived",
                    WriteBack::Plain,
                )
            }
            Derivation::EpochStart => (
                fencing::epoch_floor(SystemTime::now()),
                granted.iter().map(|(i, _)| *i).collect(),
                Vec::new(),
                "epoch",
                WriteBack::Epoch,
            ),
            Derivation::TooFewTrusted { .. } => {
                return Err(self.too_few_trusted(resource, granted, votes));
            }
            Derivation::Exhausted => {
                let max = fencing::TOKEN_MAX;
                return Err(Error::config(
                    "fence counter",
                    format!(
                        "the fence counter of the nodes granting {resource:?} is at {max} (i64::MAX), the largest token a fenced storage's signed 64-bit column holds, so no larger token can be issued; once no holder is left, delete {} on every node and the fence rows, then run `fencelock reseed --above` with a smaller token",
                        fencing::FENCE_COUNTER_KEY
                    ),
                ));
            }
        };
        let wb = self.write_back(&targets, keys, owner, token, kind).await;
        self.last_token.fetch_max(token, Ordering::Relaxed);
        if wb.decision != Decision::Reached {
            return Err(if wb.votes.failed() > 0 {
                Error::Unavailable {
                    resource,
                    votes: wb.votes,
                }
            } else {
                // Our keys vanished between the two rounds: the TTL ran out or a node lost them.
                Error::TooSlow {
                    resource,
                    votes: wb.votes,
                }
            });
        }
        Ok(Fenced { token, seeds, path })
    }

    /// Seeds the granting nodes that had no counter with the fencing token (the same
    /// ownership-checked write-back; best effort, one round bounded by the node timeout), so
    /// that their later reads are trusted. A node takes the seed only once it has been without
    /// its counter for the seed wait before this attempt (`started`) began
    /// (`fencing::seed_wait`): the first seed that finds it so starts the wait.
    pub(crate) async fn seed(
        &self,
        fenced: &Fenced,
        keys: &[String],
        owner: &str,
        started: Instant,
    ) {
        if fenced.seeds.is_empty() {
            return;
        }
        let wait = fencing::seed_wait(self.settings.ttl, self.settings.drift)
            .saturating_add(started.elapsed());
        let round = self
            .write_back(
                &fenced.seeds,
                keys,
                owner,
                fenced.token,
                WriteBack::Seed(Seed { wait }),
            )
            .await;
        tracing::debug!(resource = %keys[0], votes = %round.votes, "seeded nodes without a fence counter");
    }

    /// The error of an attempt whose granting nodes hold too few counters: the votes name the
    /// granting nodes that lost theirs.
    fn too_few_trusted(
        &self,
        resource: String,
        granted: &[(usize, FenceRead)],
        votes: &Votes,
    ) -> Error {
        let lost = |i: usize| granted.iter().any(|(j, read)| *j == i && !read.exists);
        let votes: Votes = votes
            .iter()
            .enumerate()
            .map(|(i, vote)| {
                let mut vote = vote.clone();
                if lost(i) {
                    vote.outcome = VoteOutcome::Excluded(format!(
                        "{LOST_COUNTER} (it restarted without its data, or the counter was evicted), so its read cannot count"
                    ));
                }
                vote
            })
            .collect();
        Error::Unavailable { resource, votes }
    }
}
