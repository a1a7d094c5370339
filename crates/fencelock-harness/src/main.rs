//! `fencelock-harness`: runs the fault harness and prints what each mode survived.
//!
//! Exit codes: 0 the run finished and every fenced mode passed; 1 a fenced mode failed: its
//! fenced record shows a stale or superseded write accepted, tokens out of order, a duplicate
//! token, an interleaving or a lost update; or a grant got a token not above the token of a grant
//! that had ended before it; or a fault class the mode can take (client pause, clock jump,
//! restart) never fired; 2 the harness itself failed. Violations in unfenced modes are expected
//! and do not change the exit code.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use fencelock_harness::client::{self, ClientArgs};
use fencelock_harness::mode::{FaultKind, Mode};
use fencelock_harness::report;
use fencelock_harness::run::{self, ModeRun, RunOptions, StopAt};
use fencelock_harness::runcmd::{self, WorkerArgs};

#[derive(Debug, Parser)]
#[command(
    name = "fencelock-harness",
    version,
    about = "Fault harness and safety checker for fencelock"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the workload under faults for each mode, check the history, report.
    Run(RunArgs),
    /// One client process (started by `run`).
    #[command(hide = true)]
    Client(ClientCli),
    /// One process of a `run` mode command, stamping its life (started by the command).
    #[command(hide = true)]
    Worker(WorkerCli),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Modes to run, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "single,redlock,redlock-fenced,redlock-quarantine,etcd"
    )]
    modes: Vec<Mode>,
    /// Client processes per mode.
    #[arg(long, default_value_t = 3)]
    clients: u32,
    /// Stop each mode after this many grants (over all clients).
    #[arg(long, conflicts_with = "duration")]
    acquisitions: Option<u64>,
    /// Stop each mode after this long (default 60s).
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Upper bound on one mode's run.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30m")]
    max_duration: Duration,
    /// Nemesis seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Lock TTL (etcd rounds it up to whole seconds).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    ttl: Duration,
    /// Clients with different TTLs on one node set: the TTLs, dealt to the clients in turn
    /// (`500ms,3s`: clients 0 and 2 get 500ms, client 1 3s). Staged restarts and clock jumps then
    /// happen while the client with the longest TTL (the job) holds the lock. Default: every
    /// client uses --ttl.
    #[arg(long, value_delimiter = ',', value_parser = humantime::parse_duration)]
    ttl_mix: Vec<Duration>,
    /// Per-node timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "50ms")]
    node_timeout: Duration,
    /// Clients with different node timeouts: dealt to the clients in turn, as --ttl-mix is
    /// (`400ms,50ms` with `--ttl-mix 500ms,2s`: the 500 ms clients wait 400 ms for a node, the
    /// 2 s job 50 ms). A client's margin for its announcements grows with its node timeout
    /// (issue 27, item 1). Default: every client uses --node-timeout.
    #[arg(long, value_delimiter = ',', value_parser = humantime::parse_duration)]
    node_timeout_mix: Vec<Duration>,
    /// The race window between a client's reads and its writes.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10ms")]
    window: Duration,
    /// Fault kinds (default: all). A mode skips the kinds it cannot take and says so.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill,kill-leader,restart-nopersist,restart-persist,pause-node,pause-leader,pause-client,clock-forward,clock-backward,latency,kill-supervisor,restart-two-nopersist,flushall,terminate-backend,failover"
    )]
    faults: Vec<FaultKind>,
    /// Client i's wall clock runs i times this behind (client 0 on time; the test kit's clock
    /// shim): the clients behind propose fencing tokens below the counters, so their grants
    /// take the amnesia guard's derive path, not the one-round one. Default: every client on
    /// time.
    #[arg(long, value_parser = humantime::parse_duration)]
    client_clocks_behind: Option<Duration>,
    /// Write the HTML timeline here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the per-mode summaries as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// Directory for logs, databases and histories (one subdirectory per mode).
    #[arg(long, default_value = "fencelock-harness-out")]
    out: PathBuf,
    /// No progress on stderr.
    #[arg(long)]
    quiet: bool,
    /// After each mode, print the library metrics its clients recorded (summed over the
    /// client processes; each one's Prometheus text is `client-<id>.prom` in the mode's
    /// directory, and in the `run` mode each `fencelock run`'s `client-<id>.<n>.prom`).
    #[arg(long)]
    metrics: bool,
    /// The fencelock binary the `run` mode drives (default: beside this executable, where
    /// `cargo build -p fencelock-cli` puts it).
    #[arg(long)]
    fencelock: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct ClientCli {
    #[arg(long)]
    id: u32,
    #[arg(long)]
    mode: Mode,
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<String>,
    #[arg(long)]
    db: PathBuf,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    log: PathBuf,
    #[arg(long)]
    ttl_ms: u64,
    #[arg(long)]
    node_timeout_ms: u64,
    #[arg(long)]
    window_ms: u64,
    #[arg(long)]
    epoch_ns: u64,
    #[arg(long)]
    fencelock: Option<PathBuf>,
    #[arg(long)]
    metrics: bool,
}

#[derive(Debug, clap::Args)]
struct WorkerCli {
    #[arg(long)]
    log: PathBuf,
    #[arg(long)]
    client: u32,
    #[arg(long)]
    acq: u64,
    #[arg(long)]
    epoch_ns: u64,
    #[arg(long)]
    proc: String,
    #[arg(long)]
    ms: u64,
    #[arg(long)]
    setsid: bool,
    #[arg(long)]
    holding: Option<PathBuf>,
}

fn main() -> ExitCode {
    match run_cli() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fencelock-harness: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run_cli() -> anyhow::Result<ExitCode> {
    match Cli::parse().cmd {
        Cmd::Client(c) => {
            client::run(&ClientArgs {
                id: c.id,
                mode: c.mode,
                nodes: c.nodes,
                db: c.db,
                dir: c.dir,
                log: c.log,
                ttl: Duration::from_millis(c.ttl_ms),
                node_timeout: Duration::from_millis(c.node_timeout_ms),
                window: Duration::from_millis(c.window_ms),
                epoch_ns: c.epoch_ns,
                fencelock: c.fencelock,
                metrics: c.metrics,
            })
            .context("client failed")?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Worker(w) => {
            runcmd::worker(&WorkerArgs {
                log: w.log,
                client: w.client,
                acq: w.acq,
                epoch_ns: w.epoch_ns,
                proc: w.proc,
                work: Duration::from_millis(w.ms),
                setsid: w.setsid,
                holding: w.holding,
            })
            .context("worker failed")?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run(args) => run_modes(args),
    }
}

fn run_modes(args: RunArgs) -> anyhow::Result<ExitCode> {
    if args.clients < 2 {
        bail!("--clients must be at least 2: a violation needs two holders");
    }
    if args.ttl_mix.iter().any(Duration::is_zero) || args.ttl.is_zero() {
        bail!("--ttl and --ttl-mix take TTLs above zero, e.g. --ttl-mix 500ms,3s");
    }
    let stop = match (args.acquisitions, args.duration) {
        (Some(n), _) => StopAt::Acquisitions(n),
        (None, Some(d)) => StopAt::Duration(d),
        (None, None) => StopAt::Duration(Duration::from_secs(60)),
    };
    let opts = RunOptions {
        clients: args.clients,
        stop,
        max_duration: args.max_duration,
        seed: args.seed,
        ttl: args.ttl,
        ttl_mix: args.ttl_mix.clone(),
        node_timeout: args.node_timeout,
        node_timeout_mix: args.node_timeout_mix.clone(),
        window: args.window,
        faults: args.faults.clone(),
        client_clocks_behind: args.client_clocks_behind,
        out: args.out.clone(),
        exe: std::env::current_exe().context("locating the harness executable")?,
        fencelock: args.fencelock.clone(),
        progress: !args.quiet,
        metrics: args.metrics,
    };
    if args.modes.contains(&Mode::Run) {
        run::fencelock_path(&opts)?;
    }
    let command: Vec<String> = std::env::args().collect();
    let mut runs = Vec::new();
    for mode in &args.modes {
        let run = run::run_mode(*mode, &opts).with_context(|| format!("mode {mode}"))?;
        if !args.json {
            print!("{}", report::text(&run));
            if args.metrics {
                let dir = opts.out.join(mode.name());
                print!("{}", fencelock_harness::metrics::summary(&dir)?);
            }
        }
        runs.push(run);
    }
    if args.json {
        let summaries: Vec<_> = runs.iter().map(|r| r.summary()).collect();
        println!("{}", serde_json::to_string_pretty(&summaries)?);
    }
    if let Some(path) = &args.report {
        run::write_file(path, &report::html(&runs, &command.join(" ")))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("report: {}", path.display());
    }
    let broken = runs.iter().any(ModeRun::failed);
    Ok(if broken {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
