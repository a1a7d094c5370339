//! `fencelock acquire`, `extend` and `release`: the lock as three shell steps, for scripts that
//! cannot wrap a command in `fencelock run`.

use std::time::Instant;

use fencelock::{RetryPolicy, Votes};

use crate::cli::human;
use crate::exit::{self, Failure};
use crate::hold::lock_failure;
use crate::settings::{Settings, WaitMode};

/// The votes as JSON.
pub(crate) fn votes_json(votes: &Votes) -> serde_json::Value {
    votes
        .iter()
        .map(|v| {
            serde_json::json!({
                "node": &*v.node,
                "outcome": v.outcome.to_string(),
                "latency_ms": v.latency.as_secs_f64() * 1000.0,
            })
        })
        .collect()
}

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
    if json {
        let value = serde_json::json!({
            "resource": lock.resource(),
            "token": lock.token(),
            "fencing_token": lock.fencing_token(),
            "validity_ms": u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
            "ttl_ms": u64::try_from(settings.ttl.as_millis()).unwrap_or(u64::MAX),
            "granted": lock.votes().granted(),
            "nodes": lock.votes().len(),
            "votes": votes_json(lock.votes()),
        });
        println!("{value}");
    } else {
        println!("{}", lock.token());
        let fencing = lock
            .fencing_token()
            .map(|t| format!(", fencing token {t}"))
            .unwrap_or_default();
        let quoted = crate::shell::quote(resource);
        eprintln!(
            "fencelock: acquired {resource:?} on {} of {} node(s){fencing}, valid for {}; extend it with `fencelock extend {quoted} --token TOKEN` before then, release it with `fencelock release {quoted} --token TOKEN`",
            lock.votes().granted(),
            lock.votes().len(),
            human(remaining),
        );
    }
    // The lock outlives this process on purpose: dropping it would release it in the background.
    std::mem::forget(lock);
    Ok(exit::OK)
}

/// Which token command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenOp {
    Extend,
    Release,
}

/// `fencelock extend` and `fencelock release`.
///
/// # Errors
///
/// 76 when the token does not hold the lock on a quorum (wrong token or expired; the keys are
/// left untouched), 69 when too many nodes did not answer.
pub(crate) async fn with_token(
    settings: &Settings,
    op: TokenOp,
    resource: &str,
    token: &str,
    json: bool,
) -> anyhow::Result<u8> {
    let client = settings.client(false).await?;
    let started = Instant::now();
    let result = match op {
        TokenOp::Extend => client.extend_token(resource, token).await,
        TokenOp::Release => client.release_token(resource, token).await,
    };
    let verb = match op {
        TokenOp::Extend => "extend",
        TokenOp::Release => "release",
    };
    let votes = match result {
        Ok(votes) => votes,
        Err(err) => {
            let code = exit::code_for(&err);
            let quoted = crate::shell::quote(resource);
            let message = match (&err, code) {
                (fencelock::Error::Lost { votes, .. }, exit::LOST) => format!(
                    "cannot {verb} {resource:?}: this token does not hold the lock on a quorum ({} of {} node(s) granted, {} needed): the token is wrong, or the lock expired; nothing was changed. Check the token, or run `fencelock inspect {quoted}`; acquire the lock again if it expired ({votes})",
                    votes.granted(),
                    votes.len(),
                    client.quorum(),
                ),
                _ => return Err(lock_failure(settings, resource, err).await.into()),
            };
            return Err(Failure::new(code, message).into());
        }
    };
    if json {
        let mut value = serde_json::json!({
            "resource": resource,
            "operation": verb,
            "granted": votes.granted(),
            "nodes": votes.len(),
            "votes": votes_json(&votes),
        });
        if op == TokenOp::Extend {
            value["ttl_ms"] = u64::try_from(settings.ttl.as_millis())
                .unwrap_or(u64::MAX)
                .into();
        }
        println!("{value}");
    } else {
        match op {
            TokenOp::Extend => println!(
                "extended {resource:?} on {} of {} node(s) to a TTL of {} (valid for {}: TTL - elapsed - drift)",
                votes.granted(),
                votes.len(),
                human(settings.ttl),
                human(
                    settings
                        .ttl
                        .saturating_sub(started.elapsed() + client.config().drift())
                )
            ),
            TokenOp::Release => println!(
                "released {resource:?} on {} of {} node(s)",
                votes.granted(),
                votes.len()
            ),
        }
    }
    Ok(exit::OK)
}
