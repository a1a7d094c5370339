//! The operator's way back after a total fence-counter loss: raise the node counter
//! ([`crate::protocol::FENCE_COUNTER_KEY`]) on every node to at least a given token.
//!
//! Every node lost its counter (a redeploy of all nodes without persistence) and the clocks
//! that start a new epoch cannot be trusted, so new tokens may start below the token a fenced
//! storage accepted last: the storage then refuses every write of a live holder with
//! [`crate::Error::CounterReset`], which names that token. Raising the counters above it on a
//! quorum puts the next grant's token above it, since every later quorum meets this one.

use std::sync::Arc;
use std::time::Duration;

use redis::RedisError;

use super::ops::{eval, evalsha};
use super::round::{Answer, Mode, Round, WantsMore};
use super::scripts::RESEED;
use super::RedisBackend;
use crate::pure::fencing::FENCE_COUNTER_KEY;

/// A reseed's answer: the counter now, `None` where the node has none (the round waits for
/// every answer anyway).
impl WantsMore for Option<u64> {}

impl RedisBackend {
    /// Raises the node counter to at least `above` on every node that has one (no quarantine:
    /// raising a counter is safe on any node), waiting for every answer within the node
    /// timeout. A granted vote's value is the counter the node holds now, `None` where the node
    /// has no counter: it is created there only with `create` (every node lacks one), since a
    /// node that lost its counter may have recorded a token above `above`.
    pub(crate) async fn reseed(
        &self,
        above: u64,
        create: bool,
        node_timeout: Duration,
    ) -> Round<Option<u64>> {
        let mut cmd = evalsha(&RESEED, &[FENCE_COUNTER_KEY.to_owned()]);
        cmd.arg(above.to_string())
            .arg(if create { "1" } else { "0" });
        let cmd = Arc::new(cmd);
        let all = Mode::All { after: None };
        self.round(all, &self.all, node_timeout, move |mut conn, _, _| {
            let cmd = cmd.clone();
            async move {
                let (raised, counter): (i64, String) = eval(&RESEED, &cmd, &mut conn).await?;
                let now = if raised == 2 {
                    return Ok(Answer::Granted(None));
                } else if raised == 1 {
                    above
                } else {
                    counter.parse::<u64>().map_err(|_| {
                        RedisError::from((
                            redis::ErrorKind::Parse,
                            "the fence counter is not a u64",
                            counter,
                        ))
                    })?
                };
                Ok(Answer::Granted(Some(now)))
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use fencelock_testkit::RedisNode;

    use super::*;

    async fn reseed(node: &RedisNode, above: &str) -> (i64, String) {
        reseed_as(node, above, "1").await
    }

    async fn reseed_as(node: &RedisNode, above: &str, create: &str) -> (i64, String) {
        let mut conn = redis::Client::open(node.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        RESEED
            .key(FENCE_COUNTER_KEY)
            .arg(above)
            .arg(create)
            .invoke_async(&mut conn)
            .await
            .unwrap()
    }

    fn counter(node: &RedisNode) -> String {
        node.cli(&["GET", FENCE_COUNTER_KEY]).unwrap()
    }

    #[tokio::test]
    async fn the_reseed_script_raises_the_counter_exactly_and_never_lowers_it() {
        let node = RedisNode::start().unwrap();
        assert_eq!(reseed(&node, "70000").await, (1, String::new()));
        assert_eq!(counter(&node), "70000");
        // Compared as numbers: "9" < "70000" although "9" > "7" as text.
        assert_eq!(reseed(&node, "9").await, (0, "70000".to_owned()));
        assert_eq!(counter(&node), "70000");
        assert_eq!(reseed(&node, "70000").await, (0, "70000".to_owned()));
        // Beyond 2^53, where Lua's doubles would round: one more must still raise it.
        let big = (i64::MAX - 1).to_string();
        let below = (i64::MAX - 2).to_string();
        assert_eq!(reseed(&node, &below).await, (1, "70000".to_owned()));
        assert_eq!(reseed(&node, &big).await, (1, below.clone()));
        assert_eq!(counter(&node), big);
        assert_eq!(reseed(&node, &below).await, (0, big.clone()));
        assert_eq!(counter(&node), big);
    }

    /// Issue 27 item 6: without the create flag a node without a counter is left alone; with
    /// it (every node lacks one) the counter is created and the seed wait's mark goes.
    #[tokio::test]
    async fn the_reseed_script_creates_a_counter_only_when_asked() {
        let node = RedisNode::start().unwrap();
        node.cli(&["SET", crate::pure::fencing::LOST_KEY, "5"])
            .unwrap();
        assert_eq!(reseed_as(&node, "70000", "0").await, (2, String::new()));
        assert_eq!(counter(&node), "(nil)");
        assert_eq!(reseed_as(&node, "70000", "1").await, (1, String::new()));
        assert_eq!(counter(&node), "70000");
        assert_eq!(
            node.cli(&["EXISTS", crate::pure::fencing::LOST_KEY])
                .unwrap(),
            "0"
        );
        // An existing counter is raised either way.
        assert_eq!(
            reseed_as(&node, "70001", "0").await,
            (1, "70000".to_owned())
        );
    }

    #[tokio::test]
    async fn the_reseed_script_leaves_a_counter_that_is_not_a_number() {
        let node = RedisNode::start().unwrap();
        node.cli(&["SET", FENCE_COUNTER_KEY, "garbage"]).unwrap();
        let mut conn = redis::Client::open(node.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let err = RESEED
            .key(FENCE_COUNTER_KEY)
            .arg("5")
            .invoke_async::<(i64, String)>(&mut conn)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not a counter"), "{err}");
        assert_eq!(counter(&node), "garbage");
    }
}
