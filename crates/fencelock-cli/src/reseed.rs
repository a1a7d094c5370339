//! `fencelock reseed --above TOKEN`: the way back after every node lost its fence counter.

use std::time::Duration;

use fencelock::protocol::FENCE_COUNTER_KEY;
use fencelock::Votes;

use crate::exit::{self, Failure};
use crate::lockcmds::votes_json;
use crate::node::Node;
use crate::settings::Settings;

/// How the library's vote names a node without a counter (`Client::reseed_fence`).
const NO_COUNTER: &str = "has no fence counter";

/// Bound on reading each node's counter back for the report.
const READ_TIMEOUT: Duration = Duration::from_secs(1);

/// `fencelock reseed`: raises every node's fence counter to at least `above` and prints, per
/// node, the counter it holds now.
///
/// # Errors
///
/// 69 when fewer than a quorum of nodes answered (the message names the ones that did not),
/// 2 for a token too large for the fences or an etcd node set, 78 when the nodes refuse the
/// credentials.
pub(crate) async fn reseed(settings: &Settings, above: u64, json: bool) -> anyhow::Result<u8> {
    let client = settings.client(false).await?;
    let votes = match client.reseed_fence(above).await {
        Ok(votes) => votes,
        Err(err) => {
            let code = exit::code_for(&err);
            let message = match &err {
                fencelock::Error::Unavailable { votes, .. } if code == exit::UNAVAILABLE => {
                    let lost = votes.iter().any(|v| {
                        matches!(&v.outcome, fencelock::VoteOutcome::Excluded(why) if why.starts_with(NO_COUNTER))
                    });
                    let next = if lost {
                        "a node without its fence counter lost its data and keeps none: reseed creates the counters only when every node lacks one. If TOKEN is at least every token ever issued, delete fencelock:fence on every node (no fenced grant is possible meanwhile) and run reseed again"
                    } else {
                        "run the same command again once the others are back"
                    };
                    format!(
                        "reseed raised the counter on only {} of {} node(s), {} needed: {}; those hold a counter of at least {above} now; {next}",
                        votes.granted(),
                        votes.len(),
                        client.quorum(),
                        not_answered(votes),
                    )
                }
                _ => err.to_string(),
            };
            return Err(Failure::new(code, message).into());
        }
    };
    let counters = read_back(settings, &votes).await;
    if json {
        let value = serde_json::json!({
            "above": above,
            "key": FENCE_COUNTER_KEY,
            "granted": votes.granted(),
            "nodes": votes.len(),
            "quorum": client.quorum(),
            "votes": votes_json(&votes),
            "counters": votes.iter().zip(&counters).map(|(vote, counter)| serde_json::json!({
                "node": &*vote.node,
                "counter": counter.as_ref().ok(),
                "error": counter.as_ref().err(),
            })).collect::<Vec<_>>(),
        });
        println!("{value}");
    } else {
        for (vote, counter) in votes.iter().zip(&counters) {
            match (&vote.outcome, counter) {
                (outcome, _) if !outcome.is_granted() => {
                    println!("{}: not set: {outcome}", vote.node);
                }
                (_, Ok(counter)) => println!("{}: {FENCE_COUNTER_KEY} = {counter}", vote.node),
                (_, Err(why)) => println!(
                    "{}: {FENCE_COUNTER_KEY} >= {above} (reading it back failed: {why})",
                    vote.node
                ),
            }
        }
        let missed = votes.len() - votes.granted();
        let rest = if missed == 0 {
            String::new()
        } else {
            format!(
                "; {missed} node(s) did not answer ({}): run it again once they are back",
                not_answered(&votes)
            )
        };
        eprintln!(
            "fencelock: the fence counter is at least {above} on {} of {} node(s) (a quorum), so the next fenced grant's token is above {above}{rest}",
            votes.granted(),
            votes.len(),
        );
    }
    Ok(exit::OK)
}

/// The nodes that did not raise their counter, with why.
fn not_answered(votes: &Votes) -> String {
    let missed: Vec<String> = votes
        .iter()
        .filter(|v| !v.outcome.is_granted())
        .map(|v| format!("{}: {}", v.node, v.outcome))
        .collect();
    missed.join("; ")
}

/// Each node's counter as it is now (it may already have been above `above`), read with a
/// plain `GET`; an error for a node that did not answer.
async fn read_back(settings: &Settings, votes: &Votes) -> Vec<Result<String, String>> {
    let Ok(nodes) = Node::parse_all(&settings.nodes, &settings.tls) else {
        return votes
            .iter()
            .map(|_| Err("not a Redis URL".to_owned()))
            .collect();
    };
    let reads = nodes
        .iter()
        .zip(votes.iter())
        .map(|(node, vote)| async move {
            if !vote.outcome.is_granted() {
                return Err(vote.outcome.to_string());
            }
            let mut conn = node.connect(READ_TIMEOUT).await?;
            let counter: Option<String> =
                conn.query(redis::cmd("GET").arg(FENCE_COUNTER_KEY)).await?;
            counter.ok_or_else(|| "the counter is gone again".to_owned())
        });
    futures_util::future::join_all(reads).await
}
