//! The scripts' guards on a real node, one script call at a time. Each test here is the one that
//! kills a mutant of the script or of the code that reads its answer (see docs/mutants.md and
//! `scripts/mutants.sh`): the write-back's counter update and its ownership check, the client's
//! check that a quorum took the write-back, and the one-round path's acceptance of a proposed
//! token in the fenced and the queued acquisition.

use std::time::Duration;

use fencelock_testkit::{RedisNode, RedisNodes};
use redis::aio::MultiplexedConnection;

use super::scripts;
use crate::{fencing, Client, Config, Error, ErrorKind};

async fn connect(node: &RedisNode) -> MultiplexedConnection {
    redis::Client::open(node.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn write_back(conn: &mut MultiplexedConnection, owner: &str, token: u64) -> i64 {
    scripts::WRITE_BACK
        .key("wb")
        .key(fencing::FENCE_COUNTER_KEY)
        .key(fencing::counter_key("wb"))
        .arg(owner)
        .arg(token.to_string())
        .invoke_async(conn)
        .await
        .unwrap()
}

fn counter(node: &RedisNode) -> String {
    node.cli(&["GET", fencing::FENCE_COUNTER_KEY]).unwrap()
}

#[tokio::test]
async fn the_write_back_raises_the_counter_to_the_token_and_never_lowers_it() {
    let node = RedisNode::start().unwrap();
    let mut conn = connect(&node).await;
    // A node whose read was trusted (a plain write-back creates no missing counter: issue 27,
    // `tests/counter.rs`).
    node.cli(&["SET", fencing::FENCE_COUNTER_KEY, "1"]).unwrap();
    node.cli(&["SET", "wb", "mine", "PX", "60000"]).unwrap();
    assert_eq!(write_back(&mut conn, "mine", 70_000).await, 1);
    assert_eq!(counter(&node), "70000");
    // A smaller token (compared as a number: "9" < "70000" although "9" > "7" as text) leaves it.
    assert_eq!(write_back(&mut conn, "mine", 9).await, 1);
    assert_eq!(counter(&node), "70000");
    assert_eq!(write_back(&mut conn, "mine", 70_001).await, 1);
    assert_eq!(counter(&node), "70001");
}

#[tokio::test]
async fn a_write_back_on_a_key_another_client_owns_returns_0_and_leaves_the_counter() {
    let node = RedisNode::start().unwrap();
    let mut conn = connect(&node).await;
    node.cli(&["SET", fencing::FENCE_COUNTER_KEY, "5"]).unwrap();
    // Our key expired and another client took the lock: our late write-back must not count.
    node.cli(&["SET", "wb", "someone-else", "PX", "60000"])
        .unwrap();
    assert_eq!(write_back(&mut conn, "mine", 9).await, 0);
    assert_eq!(counter(&node), "5");
    // No key at all (expired, nobody took it): the same.
    node.cli(&["DEL", "wb"]).unwrap();
    assert_eq!(write_back(&mut conn, "mine", 9).await, 0);
    assert_eq!(counter(&node), "5");
}

/// Nodes 1 and 2 refuse the write-back script to the client (an ACL that allows EVALSHA of
/// every other script): the acquisition reaches a quorum, the write-back does not, so there is
/// no token that a quorum knows of, and the acquisition must fail and leave no key behind.
#[tokio::test]
async fn an_acquisition_whose_write_back_a_majority_refuses_fails_and_keeps_no_key() {
    let nodes = RedisNodes::start(3).unwrap();
    let write_back_sha = scripts::WRITE_BACK.get_hash().to_owned();
    let mut urls = vec![nodes.node(0).url()];
    for i in 1..3 {
        let node = nodes.node(i);
        let mut rule = vec![
            "ACL", "SETUSER", "nowb", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
        for src in scripts::ALL {
            let sha = redis::Script::new(src).get_hash().to_owned();
            if sha != write_back_sha {
                rule.push(format!("+evalsha|{sha}"));
            }
        }
        let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
        node.cli(&rule).unwrap();
        urls.push(format!("redis://nowb:pw@127.0.0.1:{}", node.port()));
    }
    let client = Client::new(
        Config::new(&urls)
            .with_fencing(true)
            .with_quarantine(false)
            .with_node_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let err = client.try_acquire("wb").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        matches!(&err, Error::Unavailable { votes, .. } if votes.failed() >= 1),
        "{err}"
    );
    // The keys are released in the background; give it a generous while.
    for _ in 0..100 {
        if nodes
            .iter()
            .all(|n| n.cli(&["EXISTS", "wb"]).unwrap() == "0")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("a failed acquisition left its key behind");
}

/// One fenced acquisition of the key `p` with `proposal`: the script's reply
/// `(granted, counter, exists, accepted)`.
async fn acquire_proposing(
    conn: &mut MultiplexedConnection,
    owner: &str,
    proposal: &str,
) -> redis::RedisResult<(i64, String, i64, i64)> {
    scripts::ACQUIRE_FENCED
        .key("p")
        .key(fencing::FENCE_COUNTER_KEY)
        .key(fencing::counter_key("p"))
        .arg(owner)
        .arg(60_000)
        .arg(proposal)
        .invoke_async(conn)
        .await
}

#[tokio::test]
async fn a_proposal_is_taken_with_the_grant_only_above_an_existing_counter() {
    let node = RedisNode::start().unwrap();
    let mut conn = connect(&node).await;
    // No counter (a fresh node, or one that lost it): the read is untrusted, nothing taken.
    let reply = acquire_proposing(&mut conn, "a", "50").await.unwrap();
    assert_eq!(reply, (1, "0".into(), 0, 0));
    assert_eq!(counter(&node), "(nil)");
    node.cli(&["DEL", "p"]).unwrap();
    node.cli(&["SET", fencing::FENCE_COUNTER_KEY, "70000"])
        .unwrap();
    // Equal to the counter, or below it (compared as numbers, not as text): refused.
    for low in ["70000", "9", "69999"] {
        let reply = acquire_proposing(&mut conn, "a", low).await.unwrap();
        assert_eq!(reply, (1, "70000".into(), 1, 0), "proposal {low}");
        node.cli(&["DEL", "p"]).unwrap();
    }
    // Above it: the counter takes the proposal with the grant, and the reply says so.
    let reply = acquire_proposing(&mut conn, "a", "70001").await.unwrap();
    assert_eq!(reply, (1, "70001".into(), 1, 1));
    assert_eq!(counter(&node), "70001");
    // A refused grant (the key is held) takes no proposal.
    let reply = acquire_proposing(&mut conn, "b", "99999").await.unwrap();
    assert_eq!(reply, (0, "70001".into(), 1, 0));
    assert_eq!(counter(&node), "70001");
    // A legacy per-resource counter counts, and goes once the proposal is taken.
    node.cli(&["DEL", "p"]).unwrap();
    node.cli(&["SET", &fencing::counter_key("p"), "80000"])
        .unwrap();
    let reply = acquire_proposing(&mut conn, "a", "75000").await.unwrap();
    assert_eq!(reply, (1, "80000".into(), 1, 0));
    node.cli(&["DEL", "p"]).unwrap();
    let reply = acquire_proposing(&mut conn, "a", "80001").await.unwrap();
    assert_eq!(reply, (1, "80001".into(), 1, 1));
    assert_eq!(
        node.cli(&["EXISTS", &fencing::counter_key("p")]).unwrap(),
        "0"
    );
}

#[tokio::test]
async fn a_malformed_proposal_is_an_error_and_writes_nothing() {
    let node = RedisNode::start().unwrap();
    let mut conn = connect(&node).await;
    node.cli(&["SET", fencing::FENCE_COUNTER_KEY, "5"]).unwrap();
    for bad in ["007", "-3", "1e9", "", "12345678901234567890"] {
        let err = acquire_proposing(&mut conn, "a", bad).await.unwrap_err();
        assert!(
            err.to_string().contains("proposed fencing token"),
            "{bad:?}: {err}"
        );
        assert_eq!(node.cli(&["EXISTS", "p"]).unwrap(), "0", "{bad:?}");
        assert_eq!(counter(&node), "5", "{bad:?}");
    }
}

/// One queued, fenced acquisition of the key `q` by the waiter `c.w` with `proposal`, alone in
/// line: the script's reply `(granted, counter, exists, accepted)`.
async fn queued_proposing(
    conn: &mut MultiplexedConnection,
    owner: &str,
    proposal: &str,
) -> redis::RedisResult<(i64, String, i64, i64)> {
    use crate::pure::queue;
    scripts::ACQUIRE_QUEUED
        .key("q")
        .key(queue::queue_key("q"))
        .key(queue::lease_key("q"))
        .key(queue::waiting_key("q"))
        .key(fencing::FENCE_COUNTER_KEY)
        .key(fencing::counter_key("q"))
        .arg(owner)
        .arg(60_000)
        .arg("c.w")
        .arg(1)
        .arg(10_000)
        .arg(20_000)
        .arg(proposal)
        .invoke_async(conn)
        .await
}

#[tokio::test]
async fn a_queued_grant_takes_a_proposal_by_the_same_rule() {
    // The queued script judges the proposal with the fenced script's `accept`: only with the
    // grant, only above a counter that exists.
    let node = RedisNode::start().unwrap();
    let mut conn = connect(&node).await;
    let reply = queued_proposing(&mut conn, "a", "50").await.unwrap();
    assert_eq!(reply, (1, "0".into(), 0, 0), "no counter");
    assert_eq!(counter(&node), "(nil)");
    node.cli(&["DEL", "q"]).unwrap();
    node.cli(&["SET", fencing::FENCE_COUNTER_KEY, "70000"])
        .unwrap();
    for low in ["70000", "69999", "0"] {
        let reply = queued_proposing(&mut conn, "a", low).await.unwrap();
        assert_eq!(reply, (1, "70000".into(), 1, 0), "proposal {low}");
        node.cli(&["DEL", "q"]).unwrap();
    }
    let reply = queued_proposing(&mut conn, "a", "70001").await.unwrap();
    assert_eq!(reply, (1, "70001".into(), 1, 1));
    assert_eq!(counter(&node), "70001");
    // Held (by the grant just made): refused, nothing taken.
    let reply = queued_proposing(&mut conn, "b", "99999").await.unwrap();
    assert_eq!(reply, (0, "70001".into(), 1, 0));
    assert_eq!(counter(&node), "70001");
    let err = queued_proposing(&mut conn, "a", "007").await.unwrap_err();
    assert!(err.to_string().contains("proposed fencing token"), "{err}");
}

/// Issue 27, item 8: the election log scores entries by term, a double, exact only below 2^53,
/// while terms (fencing tokens) reach 2^63 - 1 after a reseed. Above 2^53 neighbouring terms
/// share a score, and Redis orders ties by the member's text: across a power of ten,
/// `10000000000000000 …` sorts before `9999999999999999 …`. The append's trim must still drop
/// the oldest terms, by their exact value.
#[tokio::test]
async fn the_election_log_keeps_its_newest_terms_exactly_above_2_pow_53() {
    let node = RedisNode::start().unwrap();
    let mut conn = connect(&node).await;
    node.cli(&["SET", "election:big", "me", "PX", "60000"])
        .unwrap();
    let first: u64 = 9_999_999_999_999_999;
    assert!(first > 1 << 53);
    for term in first..first + 65 {
        let appended: i64 = scripts::ELECTION_APPEND
            .key("election:big")
            .key("fencelock:leaders:big")
            .arg("me")
            .arg(term.to_string())
            .arg(format!("{term} host-{term}"))
            .arg(64)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(appended, 1, "term {term}");
    }
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg("fencelock:leaders:big")
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut kept: Vec<u64> = members
        .iter()
        .map(|m| super::election::parse_member(m).unwrap().0)
        .collect();
    kept.sort_unstable();
    let want: Vec<u64> = (first + 1..first + 65).collect();
    assert_eq!(
        kept.len(),
        64,
        "the log holds {} entries, not 64",
        kept.len()
    );
    assert_eq!(
        kept.first(),
        want.first(),
        "the trim dropped a newer term and kept the oldest ({first})"
    );
    assert_eq!(kept, want);
}
