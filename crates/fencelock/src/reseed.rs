//! The way back after every node lost its fence counter: [`Client::reseed_fence`].

use crate::client::Client;
use crate::error::{Error, Result};
use crate::pure::fencing::FENCE_COUNTER_KEY;
use crate::pure::quorum::Decision;
use crate::pure::vote::Votes;

impl Client {
    /// Raises the fence counter of every node ([`FENCE_COUNTER_KEY`]) to at least `above`
    /// (`max(current, above)`: it never lowers one), so that the next fenced grant's token is
    /// above `above`. For an operator, after every node lost its counter (a redeploy without
    /// persistence) when the clocks that start a new epoch cannot be trusted, or when a fenced
    /// write failed with [`Error::CounterReset`], whose message names the token to pass: the
    /// fenced storage's last accepted token. `fencelock reseed --above TOKEN` calls this.
    ///
    /// It succeeds once a quorum of the nodes answered: every later grant's quorum meets at
    /// least one of them and reads its counter. Nodes in restart quarantine are asked too (a
    /// higher counter is safe on any node). Running it again, or with a smaller `above`, is
    /// harmless. The votes are in node order; a granted one means the node's counter is now at
    /// least `above`.
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
    ///   nodes answered; its votes name the nodes that did not, and why. The nodes that did
    ///   answer were raised; run it again once the others are back.
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
        let round = backend.reseed(above, timeout).await;
        match round.decision {
            Decision::Reached => Ok(round.votes),
            _ => Err(Error::Unavailable {
                resource: FENCE_COUNTER_KEY.to_owned(),
                votes: round.votes,
            }),
        }
    }
}
