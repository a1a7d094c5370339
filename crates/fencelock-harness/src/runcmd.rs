//! The `run` mode's workload: each client process drives the real `fencelock run` binary in a
//! loop, with a command that leaves processes behind, and the processes stamp their own lives.
//!
//! Each iteration runs
//!
//! ```text
//! fencelock --nodes ... --ttl T run --wait 5T harness:run -- sh -c '
//!     W worker --proc bg ... &             # a background job: outlives the shell
//!     W worker --proc setsid --setsid ... &  # leaves the process group and the session
//!     W worker --proc main ...             # the foreground work
//!     exit 0'
//! ```
//!
//! where `W` is this harness binary's hidden `worker` subcommand: it appends a `proc_start` line
//! to the client's log, a `proc_beat` line every [`BEAT`], and a `proc_end` line, each stamped on
//! the machine-wide monotonic clock. A process is certainly alive between its first and last
//! stamp, so two holders' processes with overlapping stamp spans ran at once (see
//! [`crate::checker::check_processes`]): `run` must keep the lock until the last of them exits,
//! and kill them all when its supervisor dies. The nemesis kills the supervisor with SIGKILL
//! at random instants (`kill-supervisor`).
//!
//! The foreground worker runs for up to 0.3 TTL (0.6 in a staged long hold), the background ones
//! for up to 0.4 TTL, and one in four for 0.5-1.5 TTLs (1.5-2.5 in a staged hold): `run` must
//! extend the lock while only they are left.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::client::{self, ClientArgs, Request};
use crate::history::{ClientEvent, EventKind};
use crate::mono;

/// The lock the `run` episodes take.
pub const RESOURCE: &str = "harness:run";

/// How often a worker stamps that it is alive.
pub const BEAT: Duration = Duration::from_millis(20);

/// The name of the worker that creates the holding file during a staged long hold.
pub const MAIN: &str = "main";

/// The `--holding` of a worker that keeps no holding file.
const NO_HOLDING: &str = "-";

/// What one worker process is told on its command line.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    /// The client's log (appended to).
    pub log: PathBuf,
    /// The client that ran the command.
    pub client: u32,
    /// The client's acquisition (one `fencelock run`).
    pub acq: u64,
    /// The run's epoch on `CLOCK_MONOTONIC`.
    pub epoch_ns: u64,
    /// The worker's name in the history (`main`, `bg`, `setsid`).
    pub proc: String,
    /// How long it works.
    pub work: Duration,
    /// Leave the process group and the session first (`setsid(2)`).
    pub setsid: bool,
    /// A file to create while working (the nemesis's "holding" sign for staged episodes).
    pub holding: Option<PathBuf>,
}

/// The file the client leaves the pid of its current `fencelock run` in, for the nemesis.
pub fn supervisor_file(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("supervisor-{id}"))
}

/// One worker's life: start, beats, end, each a line in the client's log.
///
/// # Errors
///
/// When the log cannot be opened or written.
pub fn worker(args: &WorkerArgs) -> io::Result<()> {
    if args.setsid {
        // SAFETY: setsid(2) has no memory-safety preconditions; it fails only for a group
        // leader, which a background job of a non-interactive shell is not.
        unsafe { libc::setsid() };
    }
    let mut log = OpenOptions::new().append(true).open(&args.log)?;
    let pid = std::process::id();
    let started = Instant::now();
    stamp(
        &mut log,
        args,
        EventKind::ProcStart {
            proc: args.proc.clone(),
            pid,
        },
    )?;
    let holding = args
        .holding
        .as_ref()
        .filter(|h| h.as_os_str() != NO_HOLDING);
    if let Some(h) = holding {
        File::create(h)?;
    }
    while started.elapsed() < args.work {
        thread::sleep(BEAT.min(args.work.saturating_sub(started.elapsed())));
        stamp(&mut log, args, EventKind::ProcBeat { pid })?;
    }
    if let Some(h) = holding {
        let _ = fs::remove_file(h);
    }
    stamp(&mut log, args, EventKind::ProcEnd { pid })
}

fn stamp(log: &mut File, args: &WorkerArgs, kind: EventKind) -> io::Result<()> {
    let e = ClientEvent {
        client: args.client,
        acq: args.acq,
        mono_ns: mono::now_ns().saturating_sub(args.epoch_ns),
        wall_ms: mono::wall_ms(),
        kind,
    };
    let mut line = serde_json::to_vec(&e)?;
    line.push(b'\n');
    // One write(2) per line on an O_APPEND file: the lines of the client and its workers do
    // not interleave.
    log.write_all(&line)
}

/// The shell script: two background workers (one in a new session), then the main one.
const SCRIPT: &str = r#"W="$1"; MAIN="$2"; BG="$3"; SETSID="$4"; HOLD="$5"; shift 5
"$W" worker --proc bg --ms "$BG" "$@" &
"$W" worker --proc setsid --setsid --ms "$SETSID" "$@" &
"$W" worker --proc main --ms "$MAIN" --holding "$HOLD" "$@"
exit 0"#;

/// Runs `fencelock run` commands until the control directory's `stop` file appears.
///
/// # Errors
///
/// When the log cannot be written or `fencelock` cannot be started.
pub fn run(args: &ClientArgs, fencelock: &Path) -> io::Result<()> {
    let exe = std::env::current_exe()?;
    let mut log = client::Log::create(args)?;
    let stop = args.dir.join("stop");
    let home = args.dir.join(format!("home-{}", args.id));
    fs::create_dir_all(&home)?;
    let stderr_path = args.log.with_extension("run.stderr");
    let mut rng = fastrand::Rng::with_seed(u64::from(args.id) ^ args.epoch_ns);
    let ms = |d: Duration| format!("{}ms", d.as_millis().max(1));
    let mut acq = 0u64;
    // A long hold asked for stays asked for until a command ran it (not one that never got the
    // lock).
    let mut long_pending = false;
    while !stop.exists() {
        acq += 1;
        log.event(acq, EventKind::AcquireStart)?;
        let long = long_pending || client::take(&args.dir, args.id, Request::LongHold);
        let main = args.ttl.mul_f64(if long { 0.6 } else { 0.3 * rng.f64() });
        // One command in four leaves a process that outlives the TTL: `run` must extend the
        // lock while only it is left. The others are short, so that a run makes progress.
        let mut leftover = || {
            if long {
                // A staged hold: the supervisor may be killed meanwhile, and these must die
                // with it, not run on past the lock.
                args.ttl.mul_f64(1.5 + rng.f64())
            } else if rng.u8(..4) == 0 {
                args.ttl.mul_f64(0.5 + rng.f64())
            } else {
                args.ttl.mul_f64(0.4 * rng.f64())
            }
        };
        let (bg, setsid) = (leftover(), leftover());
        let holding = if long {
            client::holding_path(&args.dir, args.id)
        } else {
            PathBuf::from(NO_HOLDING)
        };
        let mut cmd = Command::new(fencelock);
        cmd.arg("--nodes")
            .arg(args.nodes.join(","))
            .arg("--ttl")
            .arg(ms(args.ttl))
            .arg("--node-timeout")
            .arg(ms(args.node_timeout))
            .args(["run", "--wait"])
            .arg(ms(args.ttl * 5));
        if args.metrics {
            // One file per supervisor: `metrics::summary` sums every `.prom` of the mode.
            cmd.arg("--metrics-file")
                .arg(args.log.with_extension(format!("{acq}.prom")));
        }
        cmd.args([RESOURCE, "--", "sh", "-c", SCRIPT, "sh"])
            .arg(&exe)
            .arg(main.as_millis().to_string())
            .arg(bg.as_millis().to_string())
            .arg(setsid.as_millis().to_string())
            .arg(&holding)
            .arg("--log")
            .arg(&args.log)
            .args(["--client", &args.id.to_string()])
            .args(["--acq", &acq.to_string()])
            .args(["--epoch-ns", &args.epoch_ns.to_string()])
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&stderr_path)?,
            );
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("FENCELOCK_") {
                cmd.env_remove(name);
            }
        }
        let mut child = cmd.spawn()?;
        fs::write(supervisor_file(&args.dir, args.id), child.id().to_string())?;
        let status = child.wait()?;
        // 75: not acquired; 69: the nodes were unavailable. The command did not run.
        long_pending = long && matches!(status.code(), Some(75 | 69));
        let _ = fs::remove_file(supervisor_file(&args.dir, args.id));
        // A main worker killed with its supervisor left it behind.
        let _ = fs::remove_file(client::holding_path(&args.dir, args.id));
        log.event(
            acq,
            EventKind::RunExit {
                code: status.code(),
                signal: status.signal(),
            },
        )?;
    }
    Ok(())
}
