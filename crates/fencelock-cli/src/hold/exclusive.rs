//! The exclusive lock (`fencelock run RESOURCE`), the read-write lock's write side: taken per
//! the wait mode, with a spinner on a terminal while waiting, and its token recorded for the
//! shared holders that come after it.

use std::time::{Duration, Instant};

use fencelock::{Client, ErrorKind, Lock, RetryPolicy};

use super::lock_failure;
use crate::exit::{self, Failure};
use crate::settings::{Settings, WaitMode};
use crate::spinner::Spinner;

/// With no `--wait`, how long the nodes may stay unavailable before `run` gives up: waiting is
/// for a lock held by someone else, not for a broken node set.
const UNAVAILABLE_PATIENCE: Duration = Duration::from_secs(10);
/// With no `--wait`, how long each library `acquire` call may retry before we look again.
const WAIT_CHUNK: Duration = Duration::from_secs(2);

fn not_acquired(
    resource: &str,
    err: &fencelock::Error,
    waited: Option<Duration>,
) -> Option<String> {
    let votes = err.votes()?;
    let quoted = crate::shell::quote(resource);
    match (err.kind(), waited) {
        (ErrorKind::Contention, None) => Some(format!(
            "lock {resource:?} is held by another client (on {} of {} node(s)); the command was not run. Wait for it with --wait 1m, or see who holds it with `fencelock inspect {quoted}`",
            votes.held_by_other(),
            votes.len()
        )),
        (ErrorKind::Timeout | ErrorKind::Contention, Some(waited))
            if exit::code_for(err) == exit::NOT_ACQUIRED =>
        {
            Some(format!(
            "lock {resource:?} was still held by another client after waiting {}; the command was not run. Wait longer with --wait, or see who holds it with `fencelock inspect {quoted}`",
            humantime::format_duration(Duration::from_millis(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX)))
        ))
        }
        _ => None,
    }
}

/// The failure for a lock that was not taken, in `run`'s words when someone else holds it.
async fn acquire_failure(
    settings: &Settings,
    resource: &str,
    err: fencelock::Error,
    waited: Option<Duration>,
) -> Failure {
    let msg = not_acquired(resource, &err, waited);
    let mut failure = lock_failure(settings, resource, err).await;
    if let (Some(msg), exit::NOT_ACQUIRED) = (msg, failure.code) {
        failure.message = msg;
    }
    failure
}

/// Takes the lock per the wait mode, with a spinner on a terminal while waiting.
pub(crate) async fn wait_for_lock(
    client: &Client,
    settings: &Settings,
    resource: &str,
    mode: WaitMode,
) -> Result<Lock, Failure> {
    let started = Instant::now();
    let first = match client.try_acquire(resource).await {
        Ok(lock) => return Ok(lock),
        Err(err) => err,
    };
    if mode == WaitMode::NoWait || !first.is_retryable() {
        return Err(acquire_failure(settings, resource, first, None).await);
    }
    // A key that is no lock never frees: say so now instead of waiting for it. Another type
    // fails the scripts (WRONGTYPE: the node looks unavailable); a plain value without a TTL
    // looks held.
    if matches!(first.kind(), ErrorKind::Contention | ErrorKind::Unavailable) {
        if let Some(why) = crate::probe::redis::explain_wrong_type(settings, resource).await {
            return Err(Failure::usage(why));
        }
    }

    let reason = |err: &fencelock::Error| match err.kind() {
        ErrorKind::Contention => "held by another client".to_owned(),
        ErrorKind::Timeout => "held by another client".to_owned(),
        _ => format!(
            "nodes unavailable: {} failed",
            err.votes().map_or(0, |v| v.failed())
        ),
    };
    // The wait's place in line dates from the first refusal; every chunk takes it back.
    let mut waiter = match client.waiter(&[resource]) {
        Ok(waiter) => waiter,
        Err(err) => return Err(acquire_failure(settings, resource, err, None).await),
    };
    let spinner = Spinner::start(format!("waiting for lock {resource:?}: {}", reason(&first)));
    let mut unavailable_since = (!matches!(first.kind(), ErrorKind::Contention)).then_some(started);
    let result = loop {
        let chunk = match mode {
            WaitMode::Wait(total) => {
                let left = total.saturating_sub(started.elapsed());
                if left.is_zero() {
                    // The first attempt alone took the whole wait: its answer is the reason.
                    break Err(first);
                }
                left
            }
            _ => WAIT_CHUNK,
        };
        match waiter.acquire(&RetryPolicy::new().with_wait(chunk)).await {
            Ok(lock) => break Ok(lock),
            Err(err) if mode != WaitMode::Forever => break Err(err),
            Err(err) => {
                let unavailable = exit::code_for(&err) == exit::UNAVAILABLE;
                if !unavailable {
                    unavailable_since = None;
                } else if unavailable_since.get_or_insert_with(Instant::now).elapsed()
                    >= UNAVAILABLE_PATIENCE
                {
                    break Err(err);
                }
                if !err.is_retryable() && err.kind() != ErrorKind::Timeout {
                    break Err(err);
                }
                spinner.set(format!("waiting for lock {resource:?}: {}", reason(&err)));
            }
        }
    };
    spinner.stop().await;
    match result {
        Ok(lock) => Ok(lock),
        Err(err) => Err(acquire_failure(settings, resource, err, Some(started.elapsed())).await),
    }
}
