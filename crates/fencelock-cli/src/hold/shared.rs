//! `fencelock run --shared`: the command runs under a read lock of the resource
//! (`fencelock::RwLock`), flock(1)'s `-s`. Shared holders run together; `fencelock run RESOURCE`
//! (exclusive) is the same resource's write side, so the two exclude each other, and a waiting
//! exclusive run keeps new shared runs out until it had its turn. A read lock is a `Lock`, so
//! `run` keeps, extends and releases it as it does the mutex.

use std::time::{Duration, Instant};

use fencelock::{Client, ErrorKind, Lock, RetryPolicy};

use super::{lock_failure, waited};
use crate::exit::{self, Failure};
use crate::settings::{Settings, WaitMode};

/// With no `--wait`, how long each library call may wait before we look again.
const WAIT_CHUNK: Duration = Duration::from_secs(60);

/// Takes a read lock of `resource` per the wait mode.
pub(crate) async fn wait_for_read_lock(
    client: &Client,
    settings: &Settings,
    resource: &str,
    mode: WaitMode,
) -> Result<Lock, Failure> {
    let rw = client
        .rwlock(resource)
        .map_err(|e| super::refused(settings, "--shared", &e))?;
    let started = Instant::now();
    if mode != WaitMode::NoWait {
        // A key that is no lock never frees (as for the exclusive lock, `exclusive.rs`): one
        // try, and on a refusal or a failure a look at the key before waiting.
        match rw.try_read().await {
            Ok(lock) => return Ok(lock),
            Err(e) if matches!(e.kind(), ErrorKind::Contention | ErrorKind::Unavailable) => {
                if let Some(why) = crate::probe::redis::explain_wrong_type(settings, resource).await
                {
                    return Err(Failure::usage(why));
                }
            }
            Err(_) => {}
        }
    }
    let result = match mode {
        WaitMode::NoWait => rw.try_read().await,
        WaitMode::Wait(total) => rw.read_with(&RetryPolicy::new().with_wait(total)).await,
        WaitMode::Forever => loop {
            match rw
                .read_with(&RetryPolicy::new().with_wait(WAIT_CHUNK))
                .await
            {
                Err(e)
                    if e.kind() == ErrorKind::Timeout
                        && exit::code_for(&e) == exit::NOT_ACQUIRED => {}
                other => break other,
            }
        },
    };
    match result {
        Ok(lock) => Ok(lock),
        Err(err) => {
            let held = exit::code_for(&err) == exit::NOT_ACQUIRED;
            let mut failure = lock_failure(settings, resource, err).await;
            if held {
                failure.message = format!(
                    "lock {resource:?} is held exclusively by another client, or one waits for it{}; the shared command was not run. Wait with --wait 1m, or see who holds it with `fencelock inspect {}`",
                    waited(mode, started),
                    crate::shell::quote(resource)
                );
            }
            Err(failure)
        }
    }
}

/// In fencing mode, records the token of an exclusive `run`'s lock for the shared holders that
/// come after it (their FENCELOCK_LAST_WRITER_TOKEN). A lock that could not be recorded is
/// released: the command does not run.
pub(crate) async fn record_for_readers(
    client: &Client,
    settings: &Settings,
    resource: &str,
    lock: Lock,
) -> Result<Lock, Failure> {
    // A backend without read-write locks (ZooKeeper and PostgreSQL so far) has no shared
    // holders to tell; the resource name itself was checked when the lock was taken.
    let Ok(rw) = client.rwlock(resource) else {
        return Ok(lock);
    };
    match rw.record_write(&lock).await {
        Ok(()) => Ok(lock),
        Err(err) => {
            let _ = lock.release().await;
            Err(lock_failure(settings, resource, err).await)
        }
    }
}
