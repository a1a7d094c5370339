//! `fencelock run --permits N`: the command runs under one of N permits of a semaphore
//! (`fencelock::Semaphore`) instead of the mutex. The permit is a lock on its slot, so `run`
//! keeps, extends and releases it as it does the mutex.

use std::time::{Duration, Instant};

use fencelock::{Client, Lock, RetryPolicy};

use crate::exit::{self, Failure};
use crate::lockcmds::lock_failure;
use crate::run::WaitMode;
use crate::settings::Settings;

/// With no `--wait`: one wait without end (a century), not a wait in chunks, since each new
/// wait would join the end of the line again (on etcd it leaves its place when it times out).
pub(crate) const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

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
        .map_err(|e| Failure::usage(format!("--permits {permits}: {e}")))?;
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

/// " after waiting 2.5s" for a wait that waited, nothing for `--no-wait`: the tail of the
/// messages of `run --permits` and `elect` when someone else holds.
pub(crate) fn waited(mode: WaitMode, started: Instant) -> String {
    match mode {
        WaitMode::NoWait => String::new(),
        _ => format!(" after waiting {:.1}s", started.elapsed().as_secs_f64()),
    }
}
