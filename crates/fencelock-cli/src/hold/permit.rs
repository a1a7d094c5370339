//! `fencelock run --permits N`: the command runs under one of N permits of a semaphore
//! (`fencelock::Semaphore`) instead of the mutex. The permit is a lock on its slot, so `run`
//! keeps, extends and releases it as it does the mutex.

use std::time::Instant;

use fencelock::{Client, Lock, RetryPolicy};

use super::{lock_failure, waited, FOREVER};
use crate::exit::{self, Failure};
use crate::settings::{Settings, WaitMode};

/// Takes a permit of the semaphore `resource` of `permits` permits, per the wait mode.
pub(crate) async fn wait_for_permit(
    client: &Client,
    settings: &Settings,
    resource: &str,
    permits: u32,
    mode: WaitMode,
) -> Result<Lock, Failure> {
    let sem = client
        .semaphore(resource, permits)
        .map_err(|e| super::refused(settings, &format!("--permits {permits}"), &e))?;
    let started = Instant::now();
    let result = match mode {
        WaitMode::NoWait => sem.try_acquire().await,
        WaitMode::Wait(total) => sem.acquire_with(&RetryPolicy::new().with_wait(total)).await,
        WaitMode::Forever => {
            sem.acquire_with(&RetryPolicy::new().with_wait(FOREVER))
                .await
        }
    };
    match result {
        Ok(lock) => Ok(lock),
        Err(err) => {
            let held = exit::code_for(&err) == exit::NOT_ACQUIRED;
            let mut failure = lock_failure(settings, resource, err).await;
            if held {
                failure.message = format!(
                    "all {permits} permits of {resource:?} are held by other clients{}; the command was not run. Wait with --wait 1m",
                    waited(mode, started)
                );
            }
            Err(failure)
        }
    }
}
