//! A Sentinel-managed primary as one node (`redis+sentinel://`): which primary the Sentinels
//! name now, and the checks that keep a client off a replica.
//!
//! Each new connection asks every Sentinel of the URL at once (`SENTINEL
//! GET-MASTER-ADDR-BY-NAME`), takes the answer of the first one in the URL's order that knows
//! the name, connects there and checks `ROLE` says `master` before anything is written. A
//! connection is never kept on a replica: a node that answers as one, or a write refused with
//! `READONLY` (a primary demoted under a live connection), drops the connection, and the next
//! request asks the Sentinels again (`conn.rs`). A Sentinel that still names a demoted primary
//! is caught by the `ROLE` check; the next attempt asks again.
//!
//! A failover is a possible loss of data (replication is asynchronous): the promoted replica
//! has a run id of its own while the `fencelock:node` marker it replicated names the old
//! primary's, and `quarantine.rs` judges such a node as one that lost its data when the client
//! saw it.

use std::time::Duration;

use redis::{AsyncConnectionConfig, ErrorKind, RedisError};

use crate::node::SentinelGroup;

/// The start of the description of this module's errors, which `describe.rs` shows as their
/// detail (it says which Sentinels, what they answered and what to try).
pub(crate) const SENTINEL_ERR: &str = "sentinel";

/// The primary's `host` and `port` as the Sentinels name it now.
///
/// # Errors
///
/// A driver error of kind `Client` described by [`SENTINEL_ERR`] when no Sentinel answered
/// within `timeout`, or none knows the name.
pub(crate) async fn primary(
    group: &SentinelGroup,
    timeout: Duration,
) -> Result<(String, u16), RedisError> {
    let asks = group.sentinels.iter().map(|(host, port)| async move {
        let ask = async {
            let sentinel = redis::Client::open(redis::ConnectionAddr::Tcp(host.clone(), *port))?;
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout));
            let mut conn = crate::sim::multiplexed(&sentinel, &config).await?;
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&group.master)
                .query_async::<Option<(String, u16)>>(&mut conn)
                .await
        };
        match tokio::time::timeout(timeout, ask).await {
            Ok(Ok(answer)) => Ok(answer),
            // The Sentinels are asked without credentials: their errors hold no secret.
            Ok(Err(e)) if e.is_connection_refusal() => Err("connection refused".to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer in time".to_string()),
        }
    });
    let answers = futures_util::future::join_all(asks).await;
    let mut failures = Vec::new();
    let mut unknown = 0;
    for ((host, port), answer) in group.sentinels.iter().zip(answers) {
        match answer {
            Ok(Some(addr)) => return Ok(addr),
            Ok(None) => unknown += 1,
            Err(why) => failures.push(format!("{host}:{port}: {why}")),
        }
    }
    let why = if unknown > 0 {
        format!(
            "{unknown} Sentinel(s) answered but know no primary named {:?} (SENTINEL \
             GET-MASTER-ADDR-BY-NAME replied nil); check the name in the URL against the \
             Sentinels' `sentinel monitor <name> ...` (SENTINEL MASTERS lists them){}",
            group.master,
            if failures.is_empty() {
                String::new()
            } else {
                format!("; the others failed: {}", failures.join("; "))
            }
        )
    } else {
        format!(
            "no Sentinel answered ({}); check their addresses and ports (26379 by default) \
             and that they run",
            failures.join("; ")
        )
    };
    Err(RedisError::from((ErrorKind::Client, SENTINEL_ERR, why)))
}

/// Checks that `role`, a node's `ROLE` reply (its first element), says `master`.
///
/// # Errors
///
/// As [`primary`], naming the address and the role found.
pub(crate) fn check_role(first: &str, host: &str, port: u16) -> Result<(), RedisError> {
    if first == "master" {
        return Ok(());
    }
    Err(RedisError::from((
        ErrorKind::Client,
        SENTINEL_ERR,
        format!(
            "the Sentinels named {host}:{port} as the primary, but it answers ROLE {first:?} \
             (a failover in progress, or a Sentinel that has not seen it yet); not used, the \
             Sentinels are asked again at the next request"
        ),
    )))
}
