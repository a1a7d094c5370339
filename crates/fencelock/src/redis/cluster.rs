//! A Redis Cluster as one node (`redis+cluster://`): which primary owns the slot of the node's
//! hash tag now, and the checks that keep a client on it.
//!
//! Each new connection asks every seed of the URL at once for the slot map (`CLUSTER SLOTS`,
//! which every Redis since 3.0 answers), takes the first answer in the URL's order that names
//! an owner of the tag's slot, connects to that primary and checks that `ROLE` says `master`
//! before anything is written. Every key fencelock sends there carries the tag
//! (`tagged.rs`), so the shard that owns the slot holds all of them: it is the node.
//!
//! `ASK` (the slot half moved, this request's keys on the importing node) is followed within
//! the request (`tagged.rs`); `TRYAGAIN` (its keys split between the two, or a script's
//! "non local key" while the slot migrates) is sent again by extensions and releases within
//! their deadline (`pure/split_retry.rs`), and fails the other requests.
//! The connection is dropped when the cluster says the slot is not (or no longer) served
//! there: `MOVED`, `CLUSTERDOWN`, an `ASK` that could not be followed, a script told it touched
//! a non-local key (once its retries, if any, ran out), or `READONLY` (a primary demoted by a failover). The next request asks the
//! seeds again (`conn.rs`, [`super::conn::is_broken`]).
//!
//! A new owner is judged as the Sentinel code judges a failover (`conn.rs`, `failover_seen`):
//! the marker `{tag}fencelock:node` it carries names another run id, so it is taken as a node
//! that may have lost data (restart quarantine, amnesia guard). That is right after a replica's
//! promotion (replication is asynchronous) and spurious after a slot migration (`MIGRATE` moves
//! the keys whole, TTLs included): the cost is one quarantine, never a second holder.

use std::time::Duration;

use redis::{AsyncConnectionConfig, ErrorKind, RedisError, Value};

use crate::node::NodeAddr;
use crate::pure::hash_slot;

/// The start of the description of this module's errors, which `describe.rs` shows as their
/// detail.
pub(crate) const CLUSTER_ERR: &str = "cluster";

/// The `host` and `port` of the primary that owns the slot of `addr`'s tag now.
///
/// # Errors
///
/// A driver error of kind `Client` described by [`CLUSTER_ERR`] when no seed answered within
/// `timeout`, or none names an owner of the slot.
pub(crate) async fn owner(addr: &NodeAddr, timeout: Duration) -> Result<(String, u16), RedisError> {
    let seeds = &addr
        .cluster()
        .expect("owner() is asked for cluster nodes only")
        .seeds;
    let tag = addr.hash_tag().unwrap_or_default();
    let slot = hash_slot::key_slot(tag.as_bytes());
    let asks = seeds.iter().map(|(host, port)| async move {
        let ask = async {
            // With the URL's user and password: a cluster's nodes share them.
            let seed = redis::Client::open(addr.primary_url(host, *port))?;
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout));
            let mut conn = crate::sim::multiplexed(&seed, &config).await?;
            let map: Value = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async(&mut conn)
                .await?;
            Ok::<_, RedisError>(slot_owner(&map, slot, host))
        };
        match tokio::time::timeout(timeout, ask).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) if e.is_connection_refusal() => Err("connection refused".to_string()),
            // The driver's errors name no password (the URL is not in them).
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer in time".to_string()),
        }
    });
    let answers = futures_util::future::join_all(asks).await;
    let mut failures = Vec::new();
    let mut unowned = 0;
    for ((host, port), answer) in seeds.iter().zip(answers) {
        match answer {
            Ok(Some(owner)) => return Ok(owner),
            Ok(None) => unowned += 1,
            Err(why) => failures.push(format!("{}:{port}: {why}", bracket(host))),
        }
    }
    let why = if unowned > 0 {
        format!(
            "{unowned} seed(s) answered, but no node serves slot {slot} of the tag {tag} (a \
             cluster not fully set up, or slots left uncovered after a failure: CLUSTER SLOTS \
             lists the map, `redis-cli --cluster check` repairs it){}",
            if failures.is_empty() {
                String::new()
            } else {
                format!("; the others failed: {}", failures.join("; "))
            }
        )
    } else {
        format!(
            "no seed answered CLUSTER SLOTS ({}); check their addresses, that they run, and \
             that they are cluster nodes (cluster-enabled yes)",
            failures.join("; ")
        )
    };
    Err(RedisError::from((ErrorKind::Client, CLUSTER_ERR, why)))
}

/// The primary that serves `slot` in a `CLUSTER SLOTS` reply: each entry is `[start, end,
/// [ip, port, id, ...], replicas...]`. An empty ip means the node that answered (`seed`).
fn slot_owner(map: &Value, slot: u16, seed: &str) -> Option<(String, u16)> {
    let Value::Array(ranges) = map else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let Value::Array(fields) = range else {
            return None;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(primary))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return None;
        };
        if i64::from(slot) < *start || i64::from(slot) > *end {
            return None;
        }
        let host = match primary.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => return None,
        };
        let port = match primary.get(1) {
            Some(Value::Int(p)) => u16::try_from(*p).ok()?,
            _ => return None,
        };
        let host = if host.is_empty() || host == "?" {
            seed.to_string()
        } else {
            host
        };
        Some((host, port))
    })
}

/// Checks that `first`, the first element of a `ROLE` reply, says `master`.
///
/// # Errors
///
/// As [`owner`], naming the address and the role found.
pub(crate) fn check_role(first: &str, host: &str, port: u16) -> Result<(), RedisError> {
    if first == "master" {
        return Ok(());
    }
    Err(RedisError::from((
        ErrorKind::Client,
        CLUSTER_ERR,
        format!(
            "the slot map named {}:{port} as the owner of the tag's slot, but it answers ROLE \
             {first:?} (a failover in progress, or a map older than it); not used, the seeds \
             are asked again at the next request",
            bracket(host)
        ),
    )))
}

/// Whether `e` says the slot is not served on this connection's node (any more, or not now):
/// the connection is dropped and the next request asks the seeds again. Not `TRYAGAIN`: the
/// node still owns the slot, which is half moved, and the request's keys are split between it
/// and the importing node; a new connection would reach the same node.
pub(crate) fn moved(e: &RedisError) -> bool {
    use redis::ServerErrorKind as K;
    matches!(
        e.kind(),
        ErrorKind::Server(K::Moved | K::Ask | K::ClusterDown | K::MasterDown)
    ) || e.to_string().contains("non local key")
}

fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ip: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(ip.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn the_owner_is_the_primary_of_the_range_holding_the_slot() {
        let map = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(10922), node("", 7001)]),
        ]);
        assert_eq!(
            slot_owner(&map, 5460, "seed"),
            Some(("10.0.0.1".to_string(), 7000))
        );
        assert_eq!(
            slot_owner(&map, 5461, "seed"),
            Some(("seed".to_string(), 7001))
        );
        assert_eq!(slot_owner(&map, 10923, "seed"), None);
        assert_eq!(slot_owner(&Value::Nil, 1, "seed"), None);
    }
}
