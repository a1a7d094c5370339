//! `fencelock extend`: resets the TTL of a lock this owner value holds.

use std::time::Instant;

use super::{owner_votes, votes_json};
use crate::cli::human;
use crate::exit::{self, Failure};
use crate::settings::Settings;

/// An extension without --ttl, of an owner value that carries no TTL (not `acquire`'s: another tool's
/// owner value, or the one `inspect` shows), sets the default TTL; a lock taken with a longer
/// one would be cut short by it, silently. The lock's own TTL is not stored on the nodes, but
/// what is left of it is: when a quorum of the owner value's keys has more left than the extension
/// would set, the caller is asked for the TTL instead (Redis nodes; etcd's lease keeps its own
/// TTL).
async fn refuse_to_shorten(
    settings: &Settings,
    resource: &str,
    owner: &str,
) -> Result<(), Failure> {
    if crate::probe::Backend::of(settings) != crate::probe::Backend::Redis {
        return Ok(());
    }
    let Ok(nodes) = crate::node::Node::parse_all(&settings.nodes, &settings.tls) else {
        return Ok(()); // the extension itself names the bad URL
    };
    let timeout = settings
        .node_timeout
        .max(std::time::Duration::from_millis(500));
    let states = crate::probe::redis::probe(&nodes, resource, timeout).await;
    let mut left: Vec<i64> = states
        .iter()
        .filter(|s| s.owner.as_deref() == Some(owner))
        .filter_map(|s| s.pttl_ms)
        .collect();
    let quorum = nodes.len() / 2 + 1;
    if left.len() < quorum {
        return Ok(()); // not held on a quorum: the extension's own error says so
    }
    // What a quorum has at least.
    left.sort_unstable_by(|a, b| b.cmp(a));
    let quorum_left =
        std::time::Duration::from_millis(u64::try_from(left[quorum - 1]).unwrap_or(0));
    if quorum_left <= settings.ttl {
        return Ok(());
    }
    let at_least =
        humantime::format_duration(std::time::Duration::from_secs(quorum_left.as_secs() + 1));
    Err(Failure::usage(format!(
        "extend {resource:?}: the lock has {} left, more than the TTL {} an extension without --ttl sets (it was taken with a longer --ttl), and this owner value carries no TTL (it is not the one `fencelock acquire` printed, which ends in .ttl<ms>ms); nothing was changed: pass the lock's TTL, e.g. --ttl {at_least} or more",
        human(quorum_left),
        human(settings.ttl)
    )))
}

/// `fencelock extend`.
///
/// # Errors
///
/// 76 when the owner value does not hold the lock on a quorum (wrong value or expired; the keys are
/// left untouched), 69 when too many nodes did not answer; 2 when, without --ttl (`ttl_given`)
/// and with an owner value that carries no TTL, the extension would shorten the lock.
pub(crate) async fn extend(
    settings: &Settings,
    resource: &str,
    given: &str,
    ttl_given: bool,
    json: bool,
) -> anyhow::Result<u8> {
    if crate::probe::Backend::of(settings) == crate::probe::Backend::ZooKeeper {
        return Err(Failure::usage(format!(
            "cannot extend {resource:?} on ZooKeeper: a lock there lives as long as the session that took it, and only that process keeps it alive; `acquire`'s lock lasts the session timeout (the TTL it was taken with) after `acquire` exited, and `release` ends it sooner. For work longer than that, wrap it: `fencelock run {} -- COMMAND`",
            crate::shell::quote(resource)
        ))
        .into());
    }
    let handed = super::owner::parse(given);
    let mut settings = settings.clone();
    match handed.ttl {
        // --ttl (or FENCELOCK_TTL) given wins.
        _ if ttl_given => {}
        Some(ttl) => {
            settings.ttl = ttl;
            // `acquire` took the lock with it, so a TTL above a day was allowed then.
            settings.long_ttl |= ttl > fencelock::Config::LONG_TTL;
        }
        None => refuse_to_shorten(&settings, resource, handed.owner).await?,
    }
    let settings = &settings;
    let client = settings.client(false).await?;
    let started = Instant::now();
    let result = client.extend_by_owner(resource, handed.owner).await;
    let votes = owner_votes(settings, "extend", resource, client.quorum(), result).await?;
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
