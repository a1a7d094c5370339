//! `fencelock`: run a command under a distributed lock, inspect locks, check a node set, and
//! start local development nodes.
//!
//! # Layout
//!
//! Each layer uses only the ones below it; `tests/layout.rs` fails on an import cycle.
//!
//! - `main` (this file): parses, resolves the settings once, dispatches to one command.
//! - Commands, one file or folder each: `run` (the supervisor that keeps the lock and stops
//!   the command if it is lost; `run/guard.rs`: the process between it and the command, which
//!   keeps every process the command starts in its subtree and kills them all if the supervisor
//!   dies; `run/watchdog.rs`: the guard's own SIGKILL clock), `elect`, `lockcmds` (`acquire`,
//!   `extend`, `release`, a file each), `inspect`, `doctor`, `reseed` (the way back after every
//!   node lost its fence counter), `devset` (`up`, `down`), `nodes_cmd` (`nodes`), `demo`,
//!   `bench`, `manual` (`completions`, `man`).
//! - `hold`: what a command runs under, one `hold::Hold` taken by `Hold::take`: the exclusive
//!   lock, a shared lock, a permit, the leadership (one file each); `run` and `elect` name it,
//!   nothing in it calls a command.
//! - `probe`: reading nodes for `inspect` and `doctor`, one file per backend (`probe/redis.rs`
//!   with its doctor checks in `probe/redis/doctor.rs`, `probe/etcd.rs`) behind
//!   `probe::Backend`, and what their reports share (the doctor's checks and table, a holder in
//!   words).
//! - `cli`: the command line (clap derive), every argument struct, `human` and
//!   `parse_duration`; it imports no command. `settings`: where nodes and settings come from
//!   (`--nodes`, `FENCELOCK_NODES`, the config file, the dev set), and the wait mode.
//! - `node`: bounded connections to single nodes and their TLS files; `spinner`; `exit`: exit
//!   codes and `Failure`; `shell`: quoting of the commands suggested in messages; `logging`:
//!   the tracing subscriber behind `-v` and `RUST_LOG`; `metrics`.
//! - The print macros below shadow std's in every module, so that no write can panic.
//!
//! # Exit codes
//!
//! `exit.rs` holds the table, once: its constants name the codes, and `fencelock --help` prints
//! it (`exit::help_table`). In short: 0 success, 1 `doctor` failed a check, 2 usage, 69 nodes
//! unavailable, 70 internal, 75 not acquired, 76 lock lost, 78 configuration, 126/127 `run`
//! could not execute or find the command, 128+N killed by signal N.
//!
//! Errors are printed as one line on stderr, `fencelock: error: ...`, naming the node or
//! argument, what happened and what to try.

use std::process::ExitCode;

// Every line fencelock prints goes through these, which shadow std's macros in every module
// declared below them (macro_rules! scope is textual): a write to a closed stdout or stderr
// (`fencelock ... 2>&1 | head -c 100`) is dropped instead of panicking as std's do (exit 101).
// Dying of the write (SIGPIPE) is no option either: `run` must go on supervising its command
// when nobody reads what it says.
macro_rules! println {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
macro_rules! print {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod bench;
mod cli;
mod demo;
mod devset;
mod doctor;
mod elect;
mod exit;
mod hold;
mod inspect;
mod lockcmds;
mod logging;
mod manual;
mod metrics;
mod node;
mod nodes_cmd;
mod probe;
mod reseed;
mod run;
mod settings;
mod shell;
mod spinner;

use crate::cli::{Cli, Command};
use crate::exit::Failure;

fn main() -> ExitCode {
    // `fencelock run` starts this binary again as the guard of its command.
    if let Some(code) = run::guard::main_if_guard() {
        return code;
    }
    // clap prints its own usage errors and exits with 2, and 0 for --help and --version.
    let matches = cli::command().get_matches();
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let Some((command, given)) = cli::meaningless_flags(&matches) {
        if !given.is_empty() {
            eprintln!(
                "fencelock: error: `{command}` takes no {}: {}; give them to the commands that take locks",
                given.join(", "),
                if command == "up" {
                    "it starts local nodes with their own settings"
                } else {
                    "it only reads what the nodes hold"
                }
            );
            return ExitCode::from(exit::USAGE);
        }
    }
    let json = cli.global.json;
    logging::install(cli.global.verbose);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("fencelock: error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::INTERNAL);
        }
    };
    exit::finish(runtime.block_on(run(cli)), json)
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let global = &cli.global;
    match cli.command {
        Command::Up(args) => {
            let asked =
                args.count.is_some() || !global.nodes.is_empty() || args.port_base.is_some();
            devset::up(up_count(global, &args)?, asked, args.port_base, global.json).await
        }
        Command::Down => devset::down(global.json).await,
        Command::Completions(args) => Ok(manual::completions(args.shell)),
        Command::Man(args) => manual::man(args.command.as_deref()),
        Command::Nodes(args) if args.record => nodes_cmd::record(global).await,
        Command::Nodes(args) => nodes_cmd::nodes(global, args.export),
        Command::Demo(args) => demo::demo(global, args).await,
        Command::Bench(args) => bench::bench(global, args).await,
        Command::Doctor => {
            let settings = settings::resolve(global)?;
            doctor::doctor(&settings, global.json).await
        }
        Command::Inspect(args) => {
            let settings = settings::resolve(global)?;
            inspect::inspect(&settings, &args.resource, global.json).await
        }
        Command::Reseed(args) => {
            let settings = settings::resolve(global)?;
            reseed::reseed(&settings, args.above, global.json).await
        }
        Command::Acquire(args) => {
            let settings = settings::resolve(global)?;
            let wait = settings::wait_mode(args.no_wait, args.wait, settings::WaitMode::NoWait)?;
            lockcmds::acquire(&settings, &args.resource, wait, args.fencing, global.json).await
        }
        Command::Extend(args) => {
            let settings = settings::resolve(global)?;
            let ttl_given = global.ttl.is_some();
            lockcmds::extend(
                &settings,
                &args.resource,
                &args.owner,
                ttl_given,
                global.json,
            )
            .await
        }
        Command::Release(args) => {
            let settings = settings::resolve(global)?;
            lockcmds::release(&settings, &args.resource, &args.owner, global.json).await
        }
        Command::Elect(args) => {
            let settings = settings::resolve(global)?;
            elect::elect(&settings, args, global.json).await
        }
        Command::Run(args) => run_command(global, args).await,
    }
}

/// How many nodes `up` starts: `up --nodes 5` (the count) is accepted as well as
/// `up --count 5`.
fn up_count(global: &cli::Global, args: &cli::UpArgs) -> Result<u16, Failure> {
    match global.nodes.as_slice() {
        [] => Ok(args.count.unwrap_or(devset::DEFAULT_COUNT)),
        [n] => n.parse::<u16>().ok().filter(|n| (1..=64).contains(n)).ok_or_else(|| {
            Failure::usage(format!(
                "`up --nodes {n}`: with up, --nodes is the number of nodes to start (1 to 64), e.g. fencelock up --nodes 5"
            ))
        }),
        _ => Err(Failure::usage(
            "`up` starts local nodes and takes no URLs; use --nodes N (or --count N) for how many",
        )),
    }
}

/// `fencelock run`: the plan from its arguments.
async fn run_command(global: &cli::Global, args: cli::RunArgs) -> anyhow::Result<u8> {
    let settings = settings::resolve(global)?;
    let wait = settings::wait_mode(args.no_wait, args.wait, settings::WaitMode::Forever)?;
    let plan = run::RunPlan {
        resource: args.resource,
        command: args.command,
        wait,
        fencing: args.fencing,
        grace: args.grace,
        min_hold: args.min_hold,
        hold: hold::Hold::of_run(args.permits, args.shared),
    };
    let metrics = args
        .metrics_file
        .as_deref()
        .map(metrics::MetricsFile::create)
        .transpose()?;
    let status = run::run(&settings, plan)
        .await
        .map_err(|err| exit::on_not_acquired(err, args.conflict_exit_code));
    if let Some(metrics) = metrics {
        // The command's status is the news; metrics that could not be written are not.
        if let Err(e) = metrics.finish() {
            eprintln!("fencelock: warning: {e:#}");
        }
    }
    status
}
