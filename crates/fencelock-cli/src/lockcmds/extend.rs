//! `fencelock extend`: resets the TTL of a lock this token holds.

use std::time::Instant;

use super::{token_votes, votes_json};
use crate::cli::human;
use crate::exit;
use crate::settings::Settings;

/// `fencelock extend`.
///
/// # Errors
///
/// 76 when the token does not hold the lock on a quorum (wrong token or expired; the keys are
/// left untouched), 69 when too many nodes did not answer.
pub(crate) async fn extend(
    settings: &Settings,
    resource: &str,
    token: &str,
    json: bool,
) -> anyhow::Result<u8> {
    let client = settings.client(false).await?;
    let started = Instant::now();
    let result = client.extend_token(resource, token).await;
    let votes = token_votes(settings, "extend", resource, client.quorum(), result).await?;
    if json {
        let value = serde_json::json!({
            "resource": resource,
            "operation": "extend",
            "granted": votes.granted(),
            "nodes": votes.len(),
            "votes": votes_json(&votes),
            "ttl_ms": u64::try_from(settings.ttl.as_millis()).unwrap_or(u64::MAX),
        });
        println!("{value}");
    } else {
        println!(
            "extended {resource:?} ({} of {} nodes agreed) to a TTL of {} (valid for {}: TTL - elapsed - drift)",
            votes.granted(),
            votes.len(),
            human(settings.ttl),
            human(
                settings
                    .ttl
                    .saturating_sub(started.elapsed() + client.config().drift())
            )
        );
    }
    Ok(exit::OK)
}
