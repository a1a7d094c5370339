//! `fencelock acquire`: takes the lock and leaves it held after this process exits, for a later
//! `extend` or `release` with the owner value it prints.

use fencelock::RetryPolicy;

use super::votes_json;
use crate::cli::human;
use crate::exit;
use crate::hold::lock_failure;
use crate::settings::{Settings, WaitMode};

/// `fencelock acquire`.
///
/// # Errors
///
/// The lock errors with their exit codes (75 held, 69 nodes unavailable, 2 bad configuration).
pub(crate) async fn acquire(
    settings: &Settings,
    resource: &str,
    wait: WaitMode,
    fencing: bool,
    json: bool,
) -> anyhow::Result<u8> {
    let client = settings.client(fencing).await?;
    let result = match wait {
        WaitMode::NoWait => client.try_acquire(resource).await,
        WaitMode::Wait(wait) => {
            client
                .acquire_with(resource, &RetryPolicy::new().with_wait(wait))
                .await
        }
        WaitMode::Forever => client.acquire(resource).await,
    };
    let lock = match result {
        Ok(lock) => lock,
        Err(err) => return Err(lock_failure(settings, resource, err).await.into()),
    };
    let remaining = lock.remaining();
    // What `extend` and `release` take: the owner value with the TTL, so that an extension
    // without --ttl keeps this lock's TTL.
    let owner = super::owner::hand_out(lock.owner(), settings.ttl);
    if json {
        let value = serde_json::json!({
            "resource": lock.resource(),
            "owner": owner,
            "fencing_token": lock.fencing_token().map(|t| t.value()),
            "validity_ms": u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
            "ttl_ms": u64::try_from(settings.ttl.as_millis()).unwrap_or(u64::MAX),
            "granted": lock.votes().granted(),
            "nodes": lock.votes().len(),
            "votes": votes_json(lock.votes()),
        });
        println!("{value}");
    } else {
        println!("{owner}");
        let fencing = lock
            .fencing_token()
            .map(|t| t.value())
            .map(|t| format!(", fencing token {t}"))
            .unwrap_or_default();
        let quoted = crate::shell::quote(resource);
        if crate::probe::Backend::of(settings) == crate::probe::Backend::ZooKeeper {
            // The session, not a TTL on a key, keeps the node: nothing but the session renews it.
            eprintln!(
                "fencelock: acquired {resource:?}{fencing}; ZooKeeper keeps it for the session timeout ({}) after this process exits, and no later command can extend it; release it sooner with `fencelock release {quoted} --owner OWNER`, or use `fencelock run` for longer work",
                human(settings.ttl),
            );
            std::mem::forget(lock);
            return Ok(exit::OK);
        }
        eprintln!(
            "fencelock: acquired {resource:?} ({} of {} nodes agreed){fencing}, valid for {}; extend it by its TTL ({}) with `fencelock extend {quoted} --owner OWNER` before then, release it with `fencelock release {quoted} --owner OWNER`",
            lock.votes().granted(),
            lock.votes().len(),
            human(remaining),
            human(settings.ttl),
        );
    }
    // The lock outlives this process on purpose: dropping it would release it in the background.
    std::mem::forget(lock);
    // The round returned at a majority: let the other nodes' grants reach them before exiting
    // (bounded by two node timeouts), or the lock stands on a bare majority.
    client.close().await;
    Ok(exit::OK)
}
