//! The command line, as clap derive structs.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::exit::{help_table, NOT_ACQUIRED};

/// Run a command under a distributed lock held on a set of Redis nodes (Redlock), inspect locks,
/// check a node set for the known mistakes, and start local development nodes.
#[derive(Debug, Parser)]
#[command(name = "fencelock", version, after_help = help_table(), after_long_help = help_table())]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// Node URLs, comma separated (redis://host:port/db, rediss://...). Else FENCELOCK_NODES,
    /// else the config file, else the dev set started by `fencelock up`.
    #[arg(long, global = true, value_name = "URL,URL,...", value_delimiter = ',')]
    pub(crate) nodes: Vec<String>,

    /// A TOML config file (keys: nodes, ttl, node_timeout, connect_timeout, drift_factor,
    /// fencing, quarantine, tls_ca, tls_cert, tls_key).
    /// Default: $FENCELOCK_CONFIG, else $XDG_CONFIG_HOME/fencelock/config.toml if it exists.
    /// Each setting comes from its flag, else its environment variable, else this file, else
    /// the default.
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Time to live of the lock keys (default 10s, or the config file's). At most a day unless
    /// --allow-long-ttl.
    #[arg(long, global = true, env = "FENCELOCK_TTL", value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) ttl: Option<Duration>,

    /// Accept a TTL above a day (up to etcd's largest lease, about 285 years). Without it such a
    /// TTL is refused: if the holder dies, nobody can take the lock for that long.
    #[arg(long, global = true, env = "FENCELOCK_ALLOW_LONG_TTL")]
    pub(crate) allow_long_ttl: bool,

    /// Per-node timeout of each request (default 50ms, or the config file's). Keep it far below
    /// the TTL so that a dead node cannot eat the validity.
    #[arg(long, global = true, env = "FENCELOCK_NODE_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) node_timeout: Option<Duration>,

    /// Time to establish a connection to a node, TLS handshake included (default 1s, or the
    /// config file's).
    #[arg(long, global = true, env = "FENCELOCK_CONNECT_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) connect_timeout: Option<Duration>,

    /// For rediss:// and etcds:// nodes: trust only the CA certificate(s) in this PEM file
    /// (default: the public roots, or the config file's tls_ca).
    #[arg(long, global = true, env = "FENCELOCK_TLS_CA", value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,

    /// For nodes that require a client certificate: the certificate (PEM file); needs --tls-key.
    #[arg(long, global = true, env = "FENCELOCK_TLS_CERT", value_name = "FILE")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// The client certificate's private key (PEM file). Its path is never printed.
    #[arg(long, global = true, env = "FENCELOCK_TLS_KEY", value_name = "FILE")]
    pub(crate) tls_key: Option<PathBuf>,

    /// Count nodes that restarted less than a TTL ago toward the quorum at once. By default
    /// (for several nodes) such a node is left out for a TTL, because it may have forgotten a
    /// lock it granted before the restart; nodes that were started fresh and never held a lock
    /// can safely skip that. Off by default for the dev set, whose nodes start together.
    #[arg(long, global = true)]
    pub(crate) no_quarantine: bool,

    /// A label of yours stored with every lock this command takes, beside this host's name and
    /// process id, so that `fencelock inspect` shows who holds it (e.g. --label "nightly report").
    #[arg(long, global = true, env = "FENCELOCK_LABEL", value_name = "TEXT")]
    pub(crate) label: Option<String>,

    /// Store no holder label (host, pid, --label) beside the locks.
    #[arg(long, global = true, conflicts_with = "label")]
    pub(crate) no_holder: bool,

    /// Print machine-readable JSON on stdout instead of the human form.
    #[arg(long, global = true)]
    pub(crate) json: bool,

    /// Log more on stderr: -v info, -vv debug, -vvv trace (warnings are always shown). Without
    /// -v, RUST_LOG sets the filter (e.g. RUST_LOG=fencelock=debug).
    #[arg(long, short = 'v', global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run COMMAND while holding the lock on RESOURCE; exit with the command's status.
    ///
    /// The lock is kept extended while the command runs and released when it exits (or, with
    /// --min-hold, no sooner than that long after the grant). While waiting for the lock,
    /// SIGINT, SIGTERM or SIGHUP ends the wait at once: the command is not run, the wait leaves
    /// the line, and fencelock exits with 128 + the signal's number. The command
    /// gets FENCELOCK_RESOURCE and, with --fencing, FENCELOCK_TOKEN (the fencing token) in its
    /// environment. It runs in its own process group; SIGINT, SIGTERM and SIGHUP sent to fencelock
    /// are forwarded to that group. If the lock is lost, or its validity would run out before an
    /// extension succeeds, the group gets SIGTERM, then SIGKILL after --grace, before the keys can
    /// expire on a majority; fencelock then exits with 76. The SIGKILL holds when fencelock itself
    /// is stopped or starved (a helper process keeps its time); it does not when the whole host
    /// is paused, nor when that helper (`fencelock-guard`) is itself stopped.
    ///
    /// On Linux every process the command starts is kept in the tree and killed with it, even
    /// one that moved to its own session or was orphaned. On other Unix systems (macOS, the
    /// BSDs) a process whose parent exits leaves the tree and is not killed, and a SIGKILL to
    /// the helper alone leaves the command running.
    Run(RunArgs),
    /// Run a command while leader of the election NAME (like `etcdctl elect`): campaign, run
    /// the command as leader (FENCELOCK_TOKEN holds the term), resign when it exits; stopped
    /// as `run` stops it if leadership is lost. With --observe, print each new leader instead,
    /// one line each (JSON with --json), until interrupted.
    Elect(ElectArgs),
    /// Acquire the lock and print its owner value (for scripts that cannot wrap a command).
    ///
    /// Human form: the owner value alone on stdout, details on stderr, so that
    /// `OWNER=$(fencelock acquire job)` works. The lock is NOT extended: extend it with
    /// `fencelock extend` before its validity runs out, and release it with `fencelock release`.
    Acquire(AcquireArgs),
    /// Extend a lock acquired with `fencelock acquire` by another TTL.
    ///
    /// The TTL is the one the lock was taken with, which the owner value `acquire` printed carries
    /// (`<owner>.ttl<ms>ms`); --ttl or FENCELOCK_TTL, when given, sets another. A bare owner
    /// value (another tool's, or the one `inspect` shows) carries none: without --ttl, a lock
    /// with more left than the default TTL is then not cut short (exit 2).
    Extend(OwnerArgs),
    /// Release a lock acquired with `fencelock acquire`. A wrong owner value leaves the keys untouched.
    Release(OwnerArgs),
    /// Show, per node, who holds RESOURCE (its owner value), the remaining TTL and the fence counter.
    Inspect(InspectArgs),
    /// Check the node set against the known Redlock mistakes (replicas, eviction, persistence,
    /// restarts, clock skew, slow nodes); exit 1 if a check fails.
    Doctor,
    /// Raise the fence counter of every node to at least TOKEN, so that the next fencing token
    /// is above it.
    ///
    /// Use it when every node lost its fence counter (all nodes redeployed or restarted without
    /// persistence) and the clocks cannot be trusted to start the new tokens above the old ones,
    /// or when fencelock told you to: a fenced write of a lock that is still valid was refused
    /// because its token is below the storage's last accepted token, and the error names that
    /// token (`fencelock reseed --above TOKEN`). It never lowers a counter and is safe to run
    /// again. It succeeds once a quorum of the nodes answered (exit 69 names the nodes that did
    /// not; run it again once they are back). Prints, per node, the counter it holds now.
    /// Redis only: on etcd the tokens are revisions, which etcd keeps and nothing can raise
    /// (exit 2).
    Reseed(ReseedArgs),
    /// Start a local set of redis-server nodes in the background: the dev set.
    Up(UpArgs),
    /// Stop the dev set started by `fencelock up`.
    Down,
    /// Print the node URLs the other commands use (--nodes, FENCELOCK_NODES, the config file,
    /// else the dev set), comma separated: for programs built on the library, whose
    /// `Config::from_env` reads FENCELOCK_NODES. `eval "$(fencelock nodes --export)"` sets it.
    Nodes(NodesArgs),
    /// Tell the article's story on 5 local nodes it starts and stops itself: contention, a node
    /// killed, concurrent inventory reservations, and a paused holder with and without fencing.
    Demo(DemoArgs),
    /// Measure acquire/release throughput and latency (seq, par, contended, held), with
    /// --raw beside a hand-written redis-rs baseline; --local N starts its own nodes.
    Bench(BenchArgs),
    /// Print a shell completion script, e.g. fencelock completions bash >
    /// /usr/share/bash-completion/completions/fencelock
    Completions(CompletionsArgs),
    /// Print the manual page (roff, generated from this command line): fencelock man | man -l -
    Man(ManArgs),
}

/// `man`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// A command's own page, with its options (e.g. fencelock man run): fencelock-run(1).
    pub(crate) command: Option<String>,
}

/// `completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

/// `run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Wait at most this long for the lock (default: $FENCELOCK_WAIT, else as long as another
    /// client holds it). --no-wait overrides FENCELOCK_WAIT.
    #[arg(long, short = 'w', value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    pub(crate) wait: Option<Duration>,
    /// Fail at once (exit 75, or -E's code) if another client holds the lock.
    #[arg(long, short = 'n')]
    pub(crate) no_wait: bool,
    /// The exit code when the lock is not acquired: held by another client with --no-wait, or
    /// --wait ran out (flock(1)'s -E). Pick one the command itself does not use.
    #[arg(long, short = 'E', value_name = "CODE", default_value_t = NOT_ACQUIRED)]
    pub(crate) conflict_exit_code: u8,
    /// Take a fencing token and pass it to the command as FENCELOCK_TOKEN.
    #[arg(long)]
    pub(crate) fencing: bool,
    /// Time between SIGTERM and SIGKILL when the lock is lost (default: the smaller of 5s and
    /// TTL/4). SIGKILL is sent before the validity runs out, so SIGTERM comes that much earlier.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) grace: Option<Duration>,
    /// Keep the lock at least this long from its grant, even if the command ends sooner (for
    /// a job run once per schedule slot by cron on several hosts, whose starts differ by
    /// seconds): `run` waits until then, holding the lock, and releases it. A signal in that
    /// time ends the wait and leaves the lock to expire by its TTL.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) min_hold: Option<Duration>,
    /// Run under one of N permits of the semaphore RESOURCE (at most N commands at once,
    /// across every client that uses the same N), instead of the exclusive lock. 1 to 256.
    #[arg(long, value_name = "N")]
    pub(crate) permits: Option<u32>,
    /// Hold a shared (read) lock of RESOURCE (flock(1)'s -s): shared holders run together and
    /// exclude the exclusive holders of `run RESOURCE` (and wait behind one that waits). With
    /// --fencing the command gets FENCELOCK_LAST_WRITER_TOKEN: the fencing token of the last
    /// exclusive fenced holder.
    #[arg(long, short = 's', conflicts_with = "permits")]
    pub(crate) shared: bool,
    /// When the run ends, write the library's metrics of it (acquisition, extensions, node
    /// votes, ...) to PATH in Prometheus text format, e.g. for node_exporter's textfile
    /// collector. Written to PATH.tmp, which is created at the start, and renamed.
    #[arg(long, value_name = "PATH")]
    pub(crate) metrics_file: Option<std::path::PathBuf>,
    /// The lock's name.
    pub(crate) resource: String,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub(crate) command: Vec<OsString>,
}

/// `elect`.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// Print leader changes instead of campaigning.
    #[arg(long, conflicts_with_all = ["value", "wait", "no_wait"])]
    pub(crate) observe: bool,
    /// The leader value observers see (default: host name and process id).
    #[arg(long, value_name = "VALUE")]
    pub(crate) value: Option<String>,
    /// Wait at most this long to become leader (default: $FENCELOCK_WAIT, else as long as
    /// another leads). --no-wait overrides FENCELOCK_WAIT.
    #[arg(long, short = 'w', value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    pub(crate) wait: Option<Duration>,
    /// Fail at once (exit 75) if another candidate leads.
    #[arg(long, short = 'n')]
    pub(crate) no_wait: bool,
    /// Time between SIGTERM and SIGKILL when leadership is lost (as `run --grace`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) grace: Option<Duration>,
    /// The election's name.
    pub(crate) name: String,
    /// The command and its arguments (after `--`); not with --observe.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub(crate) command: Vec<OsString>,
}

/// `acquire`.
#[derive(Debug, Args)]
pub(crate) struct AcquireArgs {
    /// Wait at most this long for the lock (default: $FENCELOCK_WAIT, else fail at once if it
    /// is held). --no-wait overrides FENCELOCK_WAIT.
    #[arg(long, short = 'w', value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    pub(crate) wait: Option<Duration>,
    /// Fail at once (exit 75) if another client holds the lock, as `run -n` does.
    #[arg(long, short = 'n')]
    pub(crate) no_wait: bool,
    /// Also take a fencing token.
    #[arg(long)]
    pub(crate) fencing: bool,
    /// The lock's name.
    pub(crate) resource: String,
}

/// `extend` and `release`.
#[derive(Debug, Args)]
pub(crate) struct OwnerArgs {
    /// The owner value printed by `fencelock acquire`.
    #[arg(
        long,
        short = 'o',
        value_name = "OWNER",
        env = "FENCELOCK_OWNER",
        hide_env_values = true
    )]
    pub(crate) owner: String,
    /// The lock's name.
    pub(crate) resource: String,
}

/// `inspect`.
#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// The lock's name.
    pub(crate) resource: String,
}

/// `reseed`.
#[derive(Debug, Args)]
pub(crate) struct ReseedArgs {
    /// Raise every node's fence counter to at least this token: the storage's last accepted
    /// token, as the fenced write's error names it (below 9223372036854775807, the largest
    /// token a fence table stores).
    #[arg(long, value_name = "TOKEN")]
    pub(crate) above: u64,
}

/// `up`.
#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    /// How many nodes to start, 1 to 64 (default 5). Use an odd number (3 or 5): an even count
    /// tolerates no more failed nodes than one node fewer; `up` warns about it.
    #[arg(long = "count", short = 'c', value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) count: Option<u16>,
    /// First port; the nodes take PORT, PORT+1, ... (default: free ports chosen by the system).
    #[arg(long, value_name = "PORT")]
    pub(crate) port_base: Option<u16>,
}

/// `nodes`.
#[derive(Debug, Args)]
pub(crate) struct NodesArgs {
    /// Print `export FENCELOCK_NODES=...`, for `eval` in a shell.
    #[arg(long, conflicts_with = "record")]
    pub(crate) export: bool,
    /// Record this list as the node set on every node, replacing the set they record. Clients
    /// of another list refuse the nodes with a configuration error; after changing the list on
    /// purpose (a node replaced by one at another address), stop every client of the old list,
    /// then run this once with the new list, then start the clients. Every node must answer.
    #[arg(long)]
    pub(crate) record: bool,
}

/// `demo`'s options.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Internal: run as client A of scene 4 (the demo starts this process itself).
    #[arg(long, hide = true, value_name = "SPEC")]
    pub(crate) worker: Option<String>,
}

/// `bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// What to measure.
    #[arg(long, value_enum)]
    pub(crate) workload: Workload,
    /// Cycles (critical sections for `contended`); default 2000 (seq, shared), 10000 (par),
    /// 200 (contended). Ignored by `held`.
    #[arg(long, value_name = "N")]
    pub(crate) cycles: Option<usize>,
    /// Concurrent tasks (par, default 64; shared, default 16), workers (contended, default 8)
    /// or locks held (held, default 10000).
    #[arg(long, value_name = "C")]
    pub(crate) concurrency: Option<usize>,
    /// Also run the raw redis-rs baseline and print the ratio.
    #[arg(long)]
    pub(crate) raw: bool,
    /// Take fencing tokens (the baseline stays plain, so the ratio is fencing's cost).
    #[arg(long)]
    pub(crate) fencing: bool,
    /// Write the latency distribution as an SVG plot to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) plot: Option<PathBuf>,
    /// Start N local redis-server nodes for this run (stopped at the end) instead of using
    /// --nodes or the usual node resolution.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=15))]
    pub(crate) local: Option<u16>,
    /// `held`: how long to hold (default: three extension intervals, i.e. one TTL); `permits`:
    /// how long each section holds its permit (default 5ms); `seq`, `par`: how long each cycle
    /// holds its lock before the release, the library and the baseline alike (default 0).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) hold: Option<Duration>,
    /// `permits`: the semaphore's permits (default 4).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) permits: Option<u32>,
    /// `contended`, raw baseline: how long a refused poller waits before it tries again
    /// (drawn from [D/2, 3D/2)).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "50ms")]
    pub(crate) poll_delay: Duration,
    /// Put K of the nodes (the last K) behind a proxy on 127.0.0.1 that delays them by
    /// --delay: nodes at different distances, for the library and the baselines alike.
    #[arg(long, value_name = "K", requires = "delay")]
    pub(crate) delay_nodes: Option<usize>,
    /// How long the proxy of --delay-nodes holds back each reply (see --delay-on).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "delay_nodes")]
    pub(crate) delay: Option<Duration>,
    /// What the proxy of --delay-nodes delays: the nodes' replies, the requests, or both.
    #[arg(long, value_enum, default_value = "replies", requires = "delay_nodes")]
    pub(crate) delay_on: DelayOn,
    /// Print the metrics the library recorded during the run (Prometheus text format, the
    /// `fencelock_*` series; see the table in docs/guide/operating.md).
    #[arg(long)]
    pub(crate) metrics: bool,
}

/// The workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Workload {
    Seq,
    Par,
    Contended,
    Held,
    Permits,
    Shared,
}

/// Which direction of a proxied connection is delayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DelayOn {
    /// The node's replies (the default: a request reaches the node at once, its answer comes
    /// back D later).
    Replies,
    /// The client's requests.
    Requests,
    /// Both: a round trip costs 2 D.
    Both,
}

/// A duration in the unit a reader takes in at a glance, the one way every command writes one: `0.4 ms`, `12 ms`, `1.02 s`.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// Parses `30s`, `500ms`, `1m 30s`; a bare number is refused because its unit would be a guess.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{text:?} has no unit; write e.g. {text}s or {text}ms"
        ));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{e}; write a duration such as 30s, 500ms or 1m30s"))
}

/// The global flags (by clap id) that mean nothing to `command`: `up` starts nodes with their
/// own settings, `inspect` only reads. Empty for the commands that take them all.
fn flags_meaningless_to(command: &str) -> &'static [&'static str] {
    match command {
        "up" => &[
            "config",
            "ttl",
            "allow_long_ttl",
            "node_timeout",
            "connect_timeout",
            "tls_ca",
            "tls_cert",
            "tls_key",
            "no_quarantine",
            "label",
            "no_holder",
        ],
        // --no-quarantine is let through: scripts pass one set of node flags to every command.
        "inspect" => &[
            "ttl",
            "allow_long_ttl",
            "connect_timeout",
            "label",
            "no_holder",
        ],
        _ => &[],
    }
}

/// The command line as parsed, helped and paged (`--help`, `man`, completions): the global
/// flags that mean nothing to a command are hidden from its help. They stay accepted by the
/// parser, so that [`meaningless_flags`] can refuse them with a message that says why instead
/// of clap's "unexpected argument".
pub(crate) fn command() -> clap::Command {
    let mut cli = <Cli as clap::CommandFactory>::command();
    let globals: Vec<clap::Arg> = cli.get_arguments().cloned().collect();
    for sub in cli.get_subcommands_mut() {
        let hidden = flags_meaningless_to(sub.get_name());
        // A hidden copy in the subcommand: clap hands a global flag to a subcommand only
        // where the subcommand has no flag of that id. In place, to keep the commands' order.
        for arg in globals
            .iter()
            .filter(|a| hidden.contains(&a.get_id().as_str()))
        {
            *sub = std::mem::take(sub).arg(arg.clone().hide(true));
        }
    }
    cli.build();
    cli
}

/// The global flags that mean nothing to `command` (`up`, `inspect`), given on its command line
/// (an environment variable such as FENCELOCK_TTL, set for the lock commands, is no mistake).
/// `None` for the other commands.
pub(crate) fn meaningless_flags(matches: &clap::ArgMatches) -> Option<(&'static str, Vec<String>)> {
    let (name, sub) = matches.subcommand()?;
    let name = match name {
        "up" => "up",
        "inspect" => "inspect",
        _ => return None,
    };
    let given: Vec<String> = flags_meaningless_to(name)
        .iter()
        .filter(|id| sub.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| format!("--{}", id.replace('_', "-")))
        .collect();
    Some((name, given))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn run_takes_the_command_after_the_resource() {
        let cli = Cli::try_parse_from([
            "fencelock",
            "run",
            "--no-wait",
            "job",
            "--",
            "sh",
            "-c",
            "echo hi",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.resource, "job");
        assert_eq!(args.command, ["sh", "-c", "echo hi"]);
        assert!(args.no_wait);
        assert_eq!(args.conflict_exit_code, NOT_ACQUIRED);
    }

    #[test]
    fn run_takes_flocks_conflict_exit_code() {
        let cli =
            Cli::try_parse_from(["fencelock", "run", "-n", "-E", "3", "job", "true"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.conflict_exit_code, 3);
        assert!(Cli::try_parse_from(["fencelock", "run", "-E", "256", "job", "true"]).is_err());
    }

    #[test]
    fn verbose_counts() {
        let cli = Cli::try_parse_from(["fencelock", "-vv", "doctor"]).unwrap();
        assert_eq!(cli.global.verbose, 2);
    }
}
