//! The way back after every node lost its fence counter: [`Client::reseed_fence`].

use crate::client::Client;
use crate::error::{Error, Result};
use crate::pure::fencing::FENCE_COUNTER_KEY;
use crate::pure::vote::{VoteOutcome, Votes};

/// How a reseed's vote names a node that has no fence counter (the CLI looks for it).
pub(crate) const NO_COUNTER: &str = "has no fence counter";

impl Client {
    /// Raises the fence counter of every node ([`FENCE_COUNTER_KEY`]) to at least `above`
    /// (`max(current, above)`: it never lowers one), so that the next fenced grant's token is
    /// above `above`. For an operator, after every node lost its counter (a redeploy without
    /// persistence) when the clocks that start a new epoch cannot be trusted, or when a fenced
    /// write failed with [`Error::CounterReset`], whose message names the token to pass: the
    /// fenced storage's last accepted token. `fencelock reseed --above TOKEN` calls this.
    ///
    /// It succeeds once a quorum of the nodes raised their counter: every later grant's quorum
    /// meets at least one of them and reads its counter. Nodes in restart quarantine are asked
    /// too (a higher counter is safe on any node). A node without a counter is left without
    /// one, its vote [`VoteOutcome::Excluded`] saying so, unless every node answered without
    /// one (a total loss): such a node lost its data and may have recorded a token above
    /// `above` (the storage's last token can lag the last one issued), and a counter created
    /// below that token would make the node trusted below it. Running it again, or with a
    /// smaller `above`, is harmless. The votes are in node order; a granted one means the
    /// node's counter is now at least `above`.
    ///
    /// On etcd there is nothing to reseed: its fencing tokens are the cluster's revisions,
    /// which it keeps with its data, and no client can raise them. This returns
    /// [`Error::InvalidConfig`] there, before any I/O.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidConfig`] before any I/O if `above` is `i64::MAX` or larger: the next
    ///   token, `above + 1`, would not fit the fenced storages' signed 64-bit column; or if the
    ///   client is on etcd.
    /// - [`Error::Unavailable`] (resource [`FENCE_COUNTER_KEY`]) if fewer than a quorum of
    ///   nodes raised their counter: some did not answer, or have no counter while another node
    ///   has one; its votes name them, and why. The nodes that did were raised.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect: each node either raised its counter or did not, and raising it
    /// again is harmless; run it again to learn where it took.
    pub async fn reseed_fence(&self, above: u64) -> Result<Votes> {
        let limit = i64::MAX.unsigned_abs();
        if above >= limit {
            return Err(Error::config(
                "reseed token",
                format!(
                    "{above} is too large: the next token, {above} + 1, must fit the fenced storages' signed 64-bit column (at most {limit}); pass the storage's last accepted token, which is below it"
                ),
            ));
        }
        let backend = self.backend().redis("reseeding the fence counters").map_err(|_| {
            Error::config(
                "backend",
                "reseed is for Redis node sets: on etcd the fencing tokens are the cluster's revisions, which etcd keeps with its data and no client can raise, so there is nothing to reseed",
            )
        })?;
        let config = self.config();
        // An operator's one-shot command, not a latency-bound round: a fresh connection may
        // take up to the connect timeout.
        let timeout = config.node_timeout().max(config.connect_timeout());
        let mut round = backend.reseed(above, false, timeout).await;
        let nodes = round.votes.len();
        // A total loss (every node answered, none has a counter) is what reseed is for: the
        // counters are created. Otherwise a node without one keeps none: it lost its data and
        // may have recorded a token above `above` (the storage's last token can lag the last
        // issued), and a counter there would make it trusted below that token.
        if round.granted.len() == nodes && round.granted.iter().all(|(_, c)| c.is_none()) {
            round = backend.reseed(above, true, timeout).await;
        }
        let lacking = |i: usize| round.granted.iter().any(|(j, c)| *j == i && c.is_none());
        let votes: Votes = round
            .votes
            .iter()
            .enumerate()
            .map(|(i, vote)| {
                let mut vote = vote.clone();
                if lacking(i) {
                    vote.outcome = VoteOutcome::Excluded(format!(
                        "{NO_COUNTER} (it lost its data, and may have recorded a token above {above}): not created there; the counters are created only when every node lacks one"
                    ));
                }
                vote
            })
            .collect();
        if votes.granted() >= backend.quorum() {
            Ok(votes)
        } else {
            Err(Error::Unavailable {
                resource: FENCE_COUNTER_KEY.to_owned(),
                votes,
            })
        }
    }
}
