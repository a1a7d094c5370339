//! `fencelock elect`'s hold: the leadership of an election, taken by campaigning. The lock is
//! the leadership, its fencing token the term, so `run` keeps it as it does the mutex.

use std::time::Instant;

use fencelock::{Client, Lock, RetryPolicy};

use super::{lock_failure, waited, FOREVER};
use crate::exit::{self, Failure};
use crate::settings::{Settings, WaitMode};

/// Campaigns per the wait mode; the lock is the leadership, its fencing token the term.
pub(crate) async fn campaign(
    client: &Client,
    settings: &Settings,
    name: &str,
    value: &str,
    mode: WaitMode,
) -> Result<Lock, Failure> {
    let usage = |e: fencelock::Error| super::refused(settings, &format!("election {name:?}"), &e);
    let started = Instant::now();
    let policy = match mode {
        WaitMode::NoWait => RetryPolicy::once(),
        WaitMode::Wait(total) => RetryPolicy::new().with_wait(total),
        // One wait, not chunks: a new wait would join the end of the line again.
        WaitMode::Forever => RetryPolicy::new().with_wait(FOREVER),
    };
    let client = Client::new(client.config().clone().with_retry(policy)).map_err(usage)?;
    let election = client.election(name).map_err(usage)?;
    let result = election.campaign_lock(value).await;
    match result {
        Ok(lock) => Ok(lock),
        Err(err) => {
            let held = exit::code_for(&err) == exit::NOT_ACQUIRED;
            let mut failure = lock_failure(settings, name, err).await;
            if held {
                failure.message = format!(
                    "election {name:?} has another leader{}; the command was not run. Wait with --wait 1m, or watch it with `fencelock elect --observe {}`",
                    waited(mode, started),
                    crate::shell::quote(name)
                );
            }
            Err(failure)
        }
    }
}
