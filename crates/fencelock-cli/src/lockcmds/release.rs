//! `fencelock release`: deletes a lock this owner value holds.

use super::{owner_votes, votes_json};
use crate::exit;
use crate::settings::Settings;

/// `fencelock release`.
///
/// # Errors
///
/// 76 when the owner value does not hold the lock on a quorum (wrong value or expired; the keys are
/// left untouched), 69 when too many nodes did not answer.
pub(crate) async fn release(
    settings: &Settings,
    resource: &str,
    given: &str,
    json: bool,
) -> anyhow::Result<u8> {
    let client = settings.client(false).await?;
    let owner = super::owner::parse(given).owner;
    let result = client.release_by_owner(resource, owner).await;
    let votes = owner_votes(settings, "release", resource, client.quorum(), result).await?;
    if json {
        let value = serde_json::json!({
            "resource": resource,
            "operation": "release",
            "granted": votes.granted(),
            "nodes": votes.len(),
            "votes": votes_json(&votes),
        });
        println!("{value}");
    } else {
        println!(
            "released {resource:?} ({} of {} nodes agreed)",
            votes.granted(),
            votes.len()
        );
    }
    Ok(exit::OK)
}
