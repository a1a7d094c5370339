//! `fencelock acquire`, `extend` and `release`: the lock as three shell steps, for scripts that
//! cannot wrap a command in `fencelock run`, one file per command; here what they share (the
//! votes as JSON, and the refusal of an owner value that does not hold the lock).

use fencelock::Votes;

use crate::exit::{self, Failure};
use crate::hold::lock_failure;
use crate::settings::Settings;

mod acquire;
mod extend;
mod owner;
mod release;

pub(crate) use acquire::acquire;
pub(crate) use extend::extend;
pub(crate) use release::release;

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

/// The votes of an `extend` or `release` of `resource` (`verb` names which), or the error
/// that says why the owner value did not do it.
///
/// # Errors
///
/// 76 when the owner value does not hold the lock on a quorum (wrong value or expired; the keys are
/// left untouched), the other lock errors with their codes (69 when too many nodes did not
/// answer).
async fn owner_votes(
    settings: &Settings,
    verb: &str,
    resource: &str,
    quorum: usize,
    result: fencelock::Result<Votes>,
) -> anyhow::Result<Votes> {
    match result {
        Ok(votes) => Ok(votes),
        Err(err) => {
            let code = exit::code_for(&err);
            let quoted = crate::shell::quote(resource);
            let message = match (&err, code) {
                (fencelock::Error::Lost { votes, .. }, exit::LOST) => format!(
                    "cannot {verb} {resource:?}: this owner value does not hold the lock on a quorum ({} of {} node(s) granted, {} needed): the owner value is wrong, or the lock expired; nothing was changed. Check the owner value, or run `fencelock inspect {quoted}`; acquire the lock again if it expired ({votes})",
                    votes.granted(),
                    votes.len(),
                    quorum,
                ),
                _ => return Err(lock_failure(settings, resource, err).await.into()),
            };
            Err(Failure::new(code, message).into())
        }
    }
}
