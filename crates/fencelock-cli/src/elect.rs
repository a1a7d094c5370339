//! `fencelock elect`: run a command while leader of an election, or observe its leaders.

use crate::exit::Failure;
use crate::hold::Hold;
use crate::run::RunPlan;
use crate::settings::{Settings, WaitMode};

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
        min_hold: None,
        hold: Hold::Leader(value),
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

/// Prints each new leader, one line each, until interrupted.
async fn observe(settings: &Settings, name: &str, json: bool) -> anyhow::Result<u8> {
    let client = settings.client(true).await?;
    let election = client
        .election(name)
        .map_err(|e| crate::hold::refused(settings, &format!("election {name:?}"), &e))?;
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
