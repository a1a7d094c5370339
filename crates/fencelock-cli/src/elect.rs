//! `fencelock elect`: run a command while leader of an election, or observe its leaders.

use std::time::Instant;

use fencelock::{Client, Lock, RetryPolicy};

use crate::exit::{self, Failure};
use crate::lockcmds::lock_failure;
use crate::run::{RunPlan, WaitMode};
use crate::settings::Settings;

/// `fencelock elect`.
pub(crate) async fn elect(
    settings: &Settings,
    args: crate::cli::ElectArgs,
    json: bool,
) -> anyhow::Result<u8> {
    if args.observe {
        if !args.command.is_empty() {
            return Err(Failure::usage(
                "`elect --observe` prints leader changes and runs no command; drop the command or --observe",
            )
            .into());
        }
        return observe(settings, &args.name, json).await;
    }
    let wait = crate::settings::wait_mode(args.no_wait, args.wait, WaitMode::Forever)?;
    let value = args.value.unwrap_or_else(default_value);
    let plan = RunPlan {
        resource: args.name,
        command: args.command,
        wait,
        // The term is the fencing token.
        fencing: true,
        grace: args.grace,
        permits: None,
        shared: false,
        elect: Some(value),
    };
    crate::run::run(settings, plan).await
}

/// The host name and the process id.
fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".to_string());
    format!("{host}:{}", std::process::id())
}

/// Campaigns per the wait mode; the lock is the leadership, its fencing token the term.
pub(crate) async fn campaign(
    client: &Client,
    settings: &Settings,
    name: &str,
    value: &str,
    mode: WaitMode,
) -> Result<Lock, Failure> {
    let usage = |e: fencelock::Error| Failure::usage(format!("election {name:?}: {e}"));
    let started = Instant::now();
    let policy = match mode {
        WaitMode::NoWait => RetryPolicy::once(),
        WaitMode::Wait(total) => RetryPolicy::new().with_wait(total),
        // One wait, not chunks: a new wait would join the end of the line again.
        WaitMode::Forever => RetryPolicy::new().with_wait(crate::hold::permit::FOREVER),
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
                    crate::hold::permit::waited(mode, started),
                    crate::shell::quote(name)
                );
            }
            Err(failure)
        }
    }
}

/// Prints each new leader, one line each, until interrupted.
async fn observe(settings: &Settings, name: &str, json: bool) -> anyhow::Result<u8> {
    let client = settings.client(true).await?;
    let election = client
        .election(name)
        .map_err(|e| Failure::usage(format!("election {name:?}: {e}")))?;
    let mut observer = election.observe();
    loop {
        let leader = observer.next().await;
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "election": name,
                    "term": leader.term(),
                    "value": leader.value(),
                })
            );
        } else {
            println!("{name}: term {} led by {}", leader.term(), leader.value());
        }
    }
}
