//! What a command holds while its command runs: the exclusive lock, a shared (read) lock, a
//! permit of a semaphore, or the leadership of an election. Each is a library `Lock`, so
//! `run` keeps, extends and releases them alike; `run` and `elect` name what they want with a
//! [`Hold`] and take it here, and nothing here calls back into a command.

use std::time::{Duration, Instant};

use fencelock::{Client, ErrorKind, Lock, VoteOutcome};

use crate::exit::{self, Failure};
use crate::probe;
use crate::settings::{Settings, WaitMode};

pub(crate) mod exclusive;
pub(crate) mod leader;
pub(crate) mod permit;
pub(crate) mod shared;

/// What a command runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hold {
    /// The mutex (`fencelock run RESOURCE`).
    Exclusive,
    /// `--shared`: a read lock of the resource instead of the mutex (its write side).
    Shared,
    /// `--permits N`: one of N permits of a semaphore instead of the mutex.
    Permit(u32),
    /// `fencelock elect`: campaign with this leader value instead of taking the mutex.
    Leader(String),
}

impl Hold {
    /// `run --permits N` / `run --shared` / `run`: which of them the flags ask for.
    pub(crate) fn of_run(permits: Option<u32>, shared: bool) -> Hold {
        match permits {
            Some(n) => Hold::Permit(n),
            None if shared => Hold::Shared,
            None => Hold::Exclusive,
        }
    }

    /// Takes it on `resource` per the wait mode.
    ///
    /// # Errors
    ///
    /// The failure in the command's words: held by someone else (75), nodes unavailable (69),
    /// bad arguments (2).
    pub(crate) async fn take(
        &self,
        client: &Client,
        settings: &Settings,
        resource: &str,
        wait: WaitMode,
    ) -> Result<Lock, Failure> {
        match self {
            Hold::Leader(value) => leader::campaign(client, settings, resource, value, wait).await,
            Hold::Permit(n) => permit::wait_for_permit(client, settings, resource, *n, wait).await,
            Hold::Shared => shared::wait_for_read_lock(client, settings, resource, wait).await,
            Hold::Exclusive => {
                let lock = exclusive::wait_for_lock(client, settings, resource, wait).await?;
                // The exclusive lock is the read-write lock's write side: shared holders learn
                // its token.
                shared::record_for_readers(client, settings, resource, lock).await
            }
        }
    }
}

/// With no `--wait`: one wait without end (a century), not a wait in chunks, since each new
/// wait would join the end of the line again (on etcd it leaves its place when it times out).
pub(crate) const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// " after waiting 2.5s" for a wait that waited, nothing for `--no-wait`: the tail of the
/// messages of `run --permits` and `elect` when someone else holds.
pub(crate) fn waited(mode: WaitMode, started: Instant) -> String {
    match mode {
        WaitMode::NoWait => String::new(),
        _ => format!(" after waiting {:.1}s", started.elapsed().as_secs_f64()),
    }
}

/// The library's refusal of a primitive (`what`, as the command line asks for it: "an
/// election", "--permits 4") on `settings`' nodes, naming them and what to use instead: a
/// backend that does not offer it yet (ZooKeeper, PostgreSQL) says so before any I/O.
pub(crate) fn refused(settings: &Settings, what: &str, err: &fencelock::Error) -> Failure {
    if err.kind() != ErrorKind::InvalidConfig {
        return Failure::usage(format!("{what}: {err}"));
    }
    let named: Vec<String> = settings
        .nodes
        .iter()
        .map(|url| {
            fencelock::NodeAddr::parse(url).map_or_else(
                |_| "a node URL that does not parse".to_string(),
                |a| format!("{} ({})", a.redacted(), a.scheme().backend()),
            )
        })
        .collect();
    let message = err.to_string();
    let unoffered = message.contains("not supported");
    Failure::usage(if unoffered {
        format!(
            "{what} on {}: {message}. `fencelock run RESOURCE -- COMMAND` (one holder at a time, with a fencing token) works on these nodes",
            named.join(", ")
        )
    } else {
        format!("{what}: {message}")
    })
}

/// The failure for a lock error, with the explanation of a key of the wrong type when that is
/// why the lock looked taken.
pub(crate) async fn lock_failure(
    settings: &Settings,
    resource: &str,
    err: fencelock::Error,
) -> Failure {
    let code = exit::code_for(&err);
    // SET NX sees a list at the name as "held", and the scripts fail on it: both look like
    // contention or broken nodes unless we look at the key.
    if code == exit::NOT_ACQUIRED || err.kind() == ErrorKind::Unavailable {
        if let Some(why) = probe::redis::explain_wrong_type(settings, resource).await {
            return Failure::usage(why);
        }
    }
    let quarantined = err.votes().is_some_and(|votes| {
        votes
            .iter()
            .any(|v| matches!(v.outcome, VoteOutcome::Excluded(_)))
    });
    let mut message = err.to_string();
    if quarantined {
        // The library's hint names its setting; the CLI's is the flag.
        message = message.replace("with_quarantine(false)", "--no-quarantine");
    }
    Failure::new(code, message)
}
