//! One mode end to end: nodes, proxies, the storage, client processes, the nemesis, the check.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, IsTerminal, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::checker::{self, FaultClass, Findings, Liveness, Violation};
use crate::client;
use crate::history::{ClientEvent, FaultEvent, History};
use crate::mode::{FaultKind, Mode};
use crate::mono;
use crate::nemesis::{self, Nemesis, Plan};
use crate::nodes::Nodes;
use crate::proxy::Proxy;
use crate::storage;
use fencelock_testkit::ClockOffset;

/// When a mode's run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopAt {
    /// After this many grants over all clients.
    Acquisitions(u64),
    /// After this long.
    Duration(Duration),
}

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Client processes per mode.
    pub clients: u32,
    /// When each mode's run ends.
    pub stop: StopAt,
    /// Upper bound on one mode's run, whatever `stop` says.
    pub max_duration: Duration,
    /// The nemesis seed.
    pub seed: u64,
    /// Lock TTL.
    pub ttl: Duration,
    /// Per-client TTLs on the one node set, dealt to the clients in turn (empty: every client
    /// uses `ttl`).
    pub ttl_mix: Vec<Duration>,
    /// Per-node timeout.
    pub node_timeout: Duration,
    /// Per-client node timeouts, dealt to the clients in turn as `ttl_mix` is (empty: every
    /// client uses `node_timeout`).
    pub node_timeout_mix: Vec<Duration>,
    /// The race window between a client's reads and writes.
    pub window: Duration,
    /// Fault kinds to inject.
    pub faults: Vec<FaultKind>,
    /// Client `i`'s wall clock runs `i` times this behind (client 0 on time), under the test
    /// kit's clock shim: the clients behind propose fencing tokens below the counters the
    /// others raised, so their grants take the amnesia guard's derive path instead of the
    /// one-round one.
    pub client_clocks_behind: Option<Duration>,
    /// Clients record the library's metrics (`client-<id>.prom` in the mode's directory).
    pub metrics: bool,
    /// Where logs, databases and the history go (one directory per mode).
    pub out: PathBuf,
    /// The harness executable (clients are this program's `client` subcommand).
    pub exe: PathBuf,
    /// The `fencelock` binary the `run` mode drives (default: beside the harness executable).
    pub fencelock: Option<PathBuf>,
    /// Show progress on stderr.
    pub progress: bool,
}

/// What one mode's run produced.
#[derive(Debug, Clone)]
pub struct ModeRun {
    /// The mode.
    pub mode: Mode,
    /// Node count.
    pub nodes: usize,
    /// Client count.
    pub clients: u32,
    /// TTL (as the mode ran it: whole seconds for etcd); the shortest when the clients' TTLs
    /// differ (it paces the nemesis).
    pub ttl: Duration,
    /// Each client's TTL, as the mode ran it.
    pub client_ttls: Vec<Duration>,
    /// Fault kinds asked for that the mode cannot take, and why.
    pub skipped: Vec<(FaultKind, &'static str)>,
    /// Wall time the workload ran.
    pub elapsed: Duration,
    /// Faults injected.
    pub faults: Vec<FaultEvent>,
    /// The history.
    pub history: History,
    /// The checker's findings.
    pub findings: Findings,
    /// Fault classes the mode can take that never fired (a fenced run fails on any).
    pub uncovered: Vec<FaultClass>,
    /// Grants inside another client's validity with no clock jump in progress (a mode with
    /// restart quarantine fails on any).
    pub exclusion: Vec<Violation>,
    /// Semaphore modes: more than N holders at once with no clock jump in progress (fails the
    /// run).
    pub too_many: Vec<Violation>,
}

/// The per-mode summary (`--json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModeSummary {
    /// The mode.
    pub mode: Mode,
    /// Node count.
    pub nodes: usize,
    /// Client count.
    pub clients: u32,
    /// Whether fencing was on.
    pub fencing: bool,
    /// Whether quarantine was on.
    pub quarantine: bool,
    /// The lock TTL the mode ran with, ms (the shortest, when the clients' TTLs differ).
    pub ttl_ms: u64,
    /// Each client's TTL, ms.
    #[serde(default)]
    pub client_ttls_ms: Vec<u64>,
    /// Seconds the workload ran.
    pub seconds: f64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// Staged episodes (a node restarts or its clock jumps while a client holds the lock) whose
    /// holder never got the lock in time, by kind: those did not stage their case.
    #[serde(default)]
    pub staged_missed: BTreeMap<String, u64>,
    /// Fault kinds asked for that the mode cannot take, with the reason.
    pub skipped_faults: BTreeMap<String, String>,
    /// Grants, failures, latency and refused stale operations, as the checker counted them.
    #[serde(flatten)]
    pub liveness: Liveness,
    /// Fenced writes committed.
    pub fenced_writes: u64,
    /// Stale fenced rows accepted (must be 0 in fenced modes).
    pub stale_accepted: usize,
    /// Token order violations.
    pub token_order: usize,
    /// Duplicate tokens.
    pub duplicate_tokens: usize,
    /// Fenced record: interleaved critical sections.
    pub fenced_interleaved: usize,
    /// Fenced record: increments lost.
    pub fenced_lost_updates: i64,
    /// Counter writes committed.
    pub counter_writes: u64,
    /// Counter: writes based on a stale read.
    pub counter_stale_reads: usize,
    /// Counter: increments lost.
    pub counter_lost_updates: i64,
    /// Grants within another client's validity.
    pub overlapping_validity: usize,
    /// `run` mode: times two holders' processes ran at once.
    #[serde(default)]
    pub process_overlaps: usize,
    /// `run` mode: what the commands' processes did.
    #[serde(default)]
    pub commands: checker::CommandFindings,
    /// Of those, the ones with no clock jump in progress between the two grants: what restart
    /// quarantine must prevent (a mode with quarantine fails on any).
    #[serde(default)]
    pub exclusion_violations: usize,
    /// Grants whose token was not above the token of a grant that had ended before them.
    pub grant_order: usize,
    /// The fault kinds in progress around each grant-order violation, by kind.
    pub grant_order_faults: BTreeMap<String, u64>,
    /// Fenced writes accepted after a later holder's row was committed.
    pub superseded_writes: usize,
    /// Counter: critical sections another one committed inside of.
    pub counter_interleaved: usize,
    /// Violations on the fenced record (stale, superseded, token order, duplicates,
    /// interleavings, stale reads, lost updates).
    pub fenced_record_violations: usize,
    /// What fails a fenced run: fenced-record violations plus grant-order violations.
    pub fenced_failures: usize,
    /// Fault classes the mode can take that never fired (a fenced run fails on any).
    pub uncovered_faults: Vec<String>,
    /// Semaphore modes: the permits.
    #[serde(default)]
    pub permits: Option<u32>,
    /// Semaphore modes: the most holders at once.
    #[serde(default)]
    pub most_holders: usize,
    /// Semaphore modes: moments with more than N holders.
    #[serde(default)]
    pub too_many_holders: usize,
    /// Of those, the ones with no clock jump in progress (a run fails on any).
    #[serde(default)]
    pub too_many_holders_outside_clock_jumps: usize,
    /// Election modes: terms held twice or not increasing (a run fails on any).
    #[serde(default)]
    pub term_order: usize,
    /// Up to 10 violations, as examples.
    pub examples: Vec<Violation>,
}

impl ModeRun {
    /// The summary.
    pub fn summary(&self) -> ModeSummary {
        let f = &self.findings;
        let mut faults = BTreeMap::new();
        let mut staged_missed = BTreeMap::new();
        for e in &self.faults {
            *faults.entry(e.kind.name().to_owned()).or_insert(0) += 1;
            if e.detail.contains(nemesis::NEVER_HELD) {
                *staged_missed.entry(e.kind.name().to_owned()).or_insert(0) += 1;
            }
        }
        ModeSummary {
            mode: self.mode,
            nodes: self.nodes,
            clients: self.clients,
            fencing: self.mode.fencing(),
            quarantine: self.mode.quarantine(),
            ttl_ms: self.ttl.as_millis() as u64,
            client_ttls_ms: self
                .client_ttls
                .iter()
                .map(|t| t.as_millis() as u64)
                .collect(),
            seconds: self.elapsed.as_secs_f64(),
            faults,
            staged_missed,
            skipped_faults: self
                .skipped
                .iter()
                .map(|(k, why)| (k.name().to_owned(), (*why).to_owned()))
                .collect(),
            liveness: f.liveness.clone(),
            fenced_writes: f.fenced.writes,
            stale_accepted: f.stale_accepted.len(),
            token_order: f.token_order.len(),
            duplicate_tokens: f.duplicate_tokens.len(),
            fenced_interleaved: f.fenced.interleaved.len(),
            fenced_lost_updates: f.fenced.lost_updates,
            counter_writes: f.counter.writes,
            counter_stale_reads: f.counter.stale_reads.len(),
            counter_lost_updates: f.counter.lost_updates,
            overlapping_validity: f.overlapping_validity.len(),
            process_overlaps: f.process_overlaps.len(),
            commands: f.commands.clone(),
            exclusion_violations: self.exclusion.len(),
            grant_order: f.grant_order.len(),
            grant_order_faults: checker::inversion_suspects(&f.grant_order, &self.faults),
            superseded_writes: f.superseded_writes.len(),
            counter_interleaved: f.counter.interleaved.len(),
            fenced_record_violations: f.fenced_record_violations(),
            fenced_failures: f.fenced_failures(),
            uncovered_faults: self.uncovered.iter().map(|c| c.name().to_owned()).collect(),
            permits: self.mode.permits(),
            most_holders: f.most_holders,
            too_many_holders: f.too_many_holders.len(),
            too_many_holders_outside_clock_jumps: self.too_many.len(),
            term_order: f.term_order.len(),
            examples: f.all().take(10).cloned().collect(),
        }
    }

    /// Whether the run fails: a fenced mode whose fenced record was harmed, whose tokens broke
    /// the order of the grants or repeated, or whose faults did not include every class the
    /// mode can take (then a clean history proves little); a mode with restart quarantine whose
    /// lock was granted inside another client's validity with no clock jump to explain it.
    pub fn failed(&self) -> bool {
        let fenced = self.mode.fencing()
            && (self.findings.fenced_failures() > 0 || !self.uncovered.is_empty());
        let exclusion = self.mode.quarantine() && !self.exclusion.is_empty();
        let run = self.mode == Mode::Run
            && (!self.findings.process_overlaps.is_empty() || !self.uncovered.is_empty());
        // The semaphore's and the election's own rules.
        let family = !self.too_many.is_empty() || !self.findings.term_order.is_empty();
        fenced || exclusion || run || family
    }
}

/// Reads a growing JSON-lines file incrementally.
#[derive(Debug)]
struct Tail {
    file: File,
    pending: String,
}

impl Tail {
    fn open(path: &Path) -> io::Result<Tail> {
        Ok(Tail {
            file: File::open(path)?,
            pending: String::new(),
        })
    }

    /// Complete new lines.
    fn lines(&mut self) -> Vec<String> {
        let mut buf = String::new();
        let _ = self.file.read_to_string(&mut buf);
        self.pending.push_str(&buf);
        let Some(cut) = self.pending.rfind('\n') else {
            return vec![];
        };
        let rest = self.pending.split_off(cut + 1);
        let done = std::mem::replace(&mut self.pending, rest);
        done.lines().map(str::to_owned).collect()
    }
}

/// Progress on stderr: a redrawn bar on a terminal, a plain line every 5 s otherwise.
#[derive(Debug)]
struct Progress {
    enabled: bool,
    tty: bool,
    last: Instant,
}

impl Progress {
    fn new(enabled: bool) -> Progress {
        Progress {
            enabled,
            tty: io::stderr().is_terminal(),
            last: Instant::now(),
        }
    }

    fn show(&mut self, mode: Mode, done: f64, text: &str) {
        if !self.enabled {
            return;
        }
        let done = done.clamp(0.0, 1.0);
        if self.tty {
            let width = 30;
            let filled = (done * width as f64) as usize;
            eprint!(
                "\r{mode:>18} [{}{}] {:>3.0}% {text}\x1b[K",
                "#".repeat(filled),
                " ".repeat(width - filled),
                done * 100.0
            );
        } else if self.last.elapsed() >= Duration::from_secs(5) {
            self.last = Instant::now();
            eprintln!("{mode}: {:.0}% {text}", done * 100.0);
        }
    }

    fn finish(&mut self) {
        if self.enabled && self.tty {
            eprintln!();
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn spawn_client(
    opts: &RunOptions,
    mode: Mode,
    ttl: Duration,
    id: u32,
    urls: &str,
    db: &Path,
    dir: &Path,
    epoch: u64,
    clock: Option<&ClockOffset>,
) -> io::Result<Child> {
    let log = dir.join(format!("client-{id}.jsonl"));
    let stderr = File::create(dir.join(format!("client-{id}.stderr")))?;
    let mut cmd = Command::new(&opts.exe);
    cmd.arg("client");
    if mode == Mode::Run {
        cmd.arg("--fencelock").arg(fencelock_path(opts)?);
    }
    cmd.args([
        "--id",
        &id.to_string(),
        "--mode",
        mode.name(),
        "--nodes",
        urls,
    ])
    .arg("--db")
    .arg(db)
    .arg("--dir")
    .arg(nemesis::control_dir(dir))
    .arg("--log")
    .arg(&log)
    .args([
        "--ttl-ms",
        &ttl.as_millis().to_string(),
        "--node-timeout-ms",
        &client_node_timeout(opts, id).as_millis().to_string(),
        "--window-ms",
        &opts.window.as_millis().to_string(),
        "--epoch-ns",
        &epoch.to_string(),
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(stderr);
    if opts.metrics {
        cmd.arg("--metrics");
    }
    if let Some(clock) = clock {
        clock.apply(&mut cmd);
    }
    cmd.spawn()
}

/// The `fencelock` binary for the `run` mode: `opts.fencelock`, else the one beside the harness
/// executable (where cargo puts both, built with `cargo build -p fencelock-cli`).
///
/// # Errors
///
/// When it is not there.
pub fn fencelock_path(opts: &RunOptions) -> io::Result<PathBuf> {
    let path = match &opts.fencelock {
        Some(p) => p.clone(),
        None => opts.exe.with_file_name("fencelock"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(io::Error::other(format!(
            "the run mode drives the fencelock binary, and {} is not there: build it with `cargo build -p fencelock-cli` (in the harness's profile, e.g. --release) or pass --fencelock PATH",
            path.display()
        )))
    }
}

/// Runs `mode` under `opts` and checks its history.
///
/// # Errors
///
/// When nodes, proxies, the storage or the clients cannot be started, or the history cannot be
/// read back.
pub fn run_mode(mode: Mode, opts: &RunOptions) -> io::Result<ModeRun> {
    let files = ModeFiles::create(mode, opts)?;
    let ttls = Ttls::of(mode, opts);
    let skipped = skipped_faults(mode, opts);
    let rig = Rig::start(mode, &files.db)?;
    if mode.quarantine() {
        rig.nodes.mark_new()?;
    }
    let epoch = mono::now_ns();
    let started = Instant::now();
    let (mut children, _client_clocks) = spawn_clients(
        opts,
        mode,
        &ttls,
        &rig.nodes.client_nodes(&rig.urls),
        &files,
        epoch,
    )?;
    let nemesis = NemesisThread::start(mode, opts, &rig, &children, &files.control, &ttls, epoch);
    let outcome = watch_workload(mode, opts, &files, &mut children, &nemesis.faults, started);
    let elapsed = started.elapsed();
    let faults = nemesis.stop();
    stop_clients(&files.control, &mut children, ttls.longest);
    outcome?;
    drop(rig);

    let history = collect_history(&files)?;
    fs::write(
        files.dir.join("faults.json"),
        serde_json::to_vec_pretty(&faults).map_err(io::Error::other)?,
    )?;
    Ok(judge(mode, opts, ttls, skipped, elapsed, faults, history))
}

/// Where one mode's run keeps its files: the mode's directory (emptied), the clients' control
/// directory, the storage database and each client's log.
#[derive(Debug)]
struct ModeFiles {
    dir: PathBuf,
    control: PathBuf,
    db: PathBuf,
    logs: Vec<PathBuf>,
}

impl ModeFiles {
    fn create(mode: Mode, opts: &RunOptions) -> io::Result<ModeFiles> {
        let dir = opts.out.join(mode.name());
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        let control = nemesis::control_dir(&dir);
        fs::create_dir_all(&control)?;
        let logs = (0..opts.clients)
            .map(|id| dir.join(format!("client-{id}.jsonl")))
            .collect();
        Ok(ModeFiles {
            db: dir.join("storage.db"),
            dir,
            control,
            logs,
        })
    }
}

/// The clients' TTLs as the mode runs them.
#[derive(Debug)]
struct Ttls {
    each: Vec<Duration>,
    /// Paces the nemesis.
    shortest: Duration,
    /// Bounds every wait on a client.
    longest: Duration,
}

impl Ttls {
    fn of(mode: Mode, opts: &RunOptions) -> Ttls {
        let each = client_ttls(mode, opts);
        let shortest = each.iter().copied().min().unwrap_or(mode.ttl(opts.ttl));
        let longest = each.iter().copied().max().unwrap_or(shortest);
        Ttls {
            each,
            shortest,
            longest,
        }
    }
}

/// The fault kinds asked for that `mode` cannot take, and why.
fn skipped_faults(mode: Mode, opts: &RunOptions) -> Vec<(FaultKind, &'static str)> {
    opts.faults
        .iter()
        .filter_map(|k| mode.skips(*k).map(|why| (*k, why)))
        .collect()
}

/// The nodes, a proxy in front of each (on their own runtime), and a fresh storage.
#[derive(Debug)]
struct Rig {
    // Dropped in this order: the proxies, their runtime, then the nodes.
    proxies: Vec<Proxy>,
    /// Kept only to run the proxies.
    _runtime: tokio::runtime::Runtime,
    nodes: Arc<Nodes>,
    /// The proxies' URLs, the ones the clients dial.
    urls: Vec<String>,
}

impl Rig {
    fn start(mode: Mode, db: &Path) -> io::Result<Rig> {
        let nodes = Arc::new(Nodes::start(mode)?);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let proxies = (0..nodes.len())
            .map(|i| runtime.block_on(Proxy::start(nodes.port(i))))
            .collect::<io::Result<Vec<_>>>()?;
        let urls = proxies.iter().map(|p| nodes.url(p.port())).collect();
        storage::setup(db).map_err(io::Error::other)?;
        Ok(Rig {
            proxies,
            _runtime: runtime,
            nodes,
            urls,
        })
    }
}

fn spawn_clients(
    opts: &RunOptions,
    mode: Mode,
    ttls: &Ttls,
    nodes: &str,
    files: &ModeFiles,
    epoch: u64,
) -> io::Result<(Vec<Child>, Vec<ClockOffset>)> {
    let mut children = Vec::new();
    let mut clocks = Vec::new();
    for id in 0..opts.clients {
        let clock = match opts.client_clocks_behind {
            Some(behind) if id > 0 => {
                let clock = ClockOffset::new()?;
                let ms = i64::try_from(behind.as_millis()).unwrap_or(i64::MAX / 2);
                clock.set(-ms.saturating_mul(i64::from(id)))?;
                Some(clock)
            }
            _ => None,
        };
        children.push(spawn_client(
            opts,
            mode,
            ttls.each[id as usize],
            id,
            nodes,
            &files.db,
            &files.dir,
            epoch,
            clock.as_ref(),
        )?);
        clocks.extend(clock);
    }
    Ok((children, clocks))
}

/// The nemesis on its own thread, and the faults it has injected so far.
#[derive(Debug)]
struct NemesisThread {
    stop: Arc<AtomicBool>,
    faults: Arc<Mutex<Vec<FaultEvent>>>,
    thread: thread::JoinHandle<()>,
}

impl NemesisThread {
    fn start(
        mode: Mode,
        opts: &RunOptions,
        rig: &Rig,
        children: &[Child],
        control: &Path,
        ttls: &Ttls,
        epoch: u64,
    ) -> NemesisThread {
        let mut nemesis = Nemesis {
            nodes: rig.nodes.clone(),
            proxies: rig.proxies.iter().map(Proxy::control).collect(),
            clients: children.iter().map(Child::id).collect(),
            dir: control.to_path_buf(),
            ttl: ttls.shortest,
            client_ttls: ttls.each.clone(),
            epoch_ns: epoch,
            offsets: vec![0; rig.nodes.len()],
            quarantine: mode.quarantine(),
            fencing: mode.fencing(),
        };
        let plan = Plan::new(
            opts.seed ^ (mode as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            &opts.faults,
            mode,
            opts.clients,
            ttls.shortest,
        )
        .with_client_ttls(ttls.each.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let faults = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, faults) = (stop.clone(), faults.clone());
            thread::spawn(move || {
                nemesis.run(plan, &stop, |e| {
                    faults.lock().unwrap_or_else(|p| p.into_inner()).push(e)
                });
            })
        };
        NemesisThread {
            stop,
            faults,
            thread,
        }
    }

    /// Stops the nemesis, waits for it, and returns the faults it injected.
    fn stop(self) -> Vec<FaultEvent> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
        std::mem::take(&mut *self.faults.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Follows the clients' logs, showing progress, until the run's stop condition or
/// `max_duration`; an error when a client exits first.
fn watch_workload(
    mode: Mode,
    opts: &RunOptions,
    files: &ModeFiles,
    children: &mut [Child],
    faults: &Mutex<Vec<FaultEvent>>,
    started: Instant,
) -> io::Result<()> {
    let mut progress = Progress::new(opts.progress);
    let mut tails: Vec<Option<Tail>> = files.logs.iter().map(|_| None).collect();
    let mut grants = 0u64;
    let outcome = loop {
        thread::sleep(Duration::from_millis(200));
        grants += count_new_grants(&mut tails, &files.logs);
        let elapsed = started.elapsed();
        let nfaults = faults.lock().map(|f| f.len()).unwrap_or(0);
        let (done, finished) = match opts.stop {
            StopAt::Acquisitions(n) => (grants as f64 / n as f64, grants >= n),
            StopAt::Duration(d) => (elapsed.as_secs_f64() / d.as_secs_f64(), elapsed >= d),
        };
        progress.show(
            mode,
            done,
            &format!(
                "{grants} grants, {nfaults} faults, {:.0}s",
                elapsed.as_secs_f64()
            ),
        );
        if finished || elapsed >= opts.max_duration {
            break Ok(());
        }
        if let Some(code) = children
            .iter_mut()
            .find_map(|c| c.try_wait().ok().flatten())
        {
            break Err(io::Error::other(format!(
                "a client exited early ({code}); see {}",
                files.dir.display()
            )));
        }
    };
    progress.finish();
    outcome
}

/// Grants in the lines the clients logged since the last call (opening each log once it exists).
fn count_new_grants(tails: &mut [Option<Tail>], logs: &[PathBuf]) -> u64 {
    let mut grants = 0;
    for (tail, path) in tails.iter_mut().zip(logs) {
        if tail.is_none() {
            *tail = Tail::open(path).ok();
        }
        if let Some(t) = tail {
            grants += t.lines().iter().filter(|l| is_grant(l)).count() as u64;
        }
    }
    grants
}

/// The history from the storage and the clients' logs, also written to `history.json`.
fn collect_history(files: &ModeFiles) -> io::Result<History> {
    let loaded = storage::load(&files.db).map_err(io::Error::other)?;
    let mut events = Vec::new();
    for path in &files.logs {
        events.extend(read_events(path)?);
    }
    let history = History {
        rows: loaded.rows,
        events,
        final_fenced: loaded.fenced,
        final_counter: loaded.counter,
        final_slots: loaded.slots,
    };
    fs::write(
        files.dir.join("history.json"),
        serde_json::to_vec(&history).map_err(io::Error::other)?,
    )?;
    Ok(history)
}

/// Checks the history against the faults injected.
fn judge(
    mode: Mode,
    opts: &RunOptions,
    ttls: Ttls,
    skipped: Vec<(FaultKind, &'static str)>,
    elapsed: Duration,
    faults: Vec<FaultEvent>,
    history: History,
) -> ModeRun {
    let mut findings = checker::check(&history);
    check_family(mode, &history, &mut findings);
    let can_take: Vec<FaultKind> = FaultKind::ALL
        .into_iter()
        .filter(|k| mode.skips(*k).is_none())
        .collect();
    let uncovered = checker::uncovered(&can_take, &faults);
    let exclusion = checker::exclusion_violations(&findings.overlapping_validity, &faults);
    let too_many = checker::exclusion_violations(&findings.too_many_holders, &faults);
    ModeRun {
        mode,
        nodes: mode.nodes(),
        clients: opts.clients,
        ttl: ttls.shortest,
        client_ttls: ttls.each,
        exclusion,
        too_many,
        skipped,
        elapsed,
        faults,
        history,
        findings,
        uncovered,
    }
}

/// The semaphore's and the election's own rules, for their modes: at most N permit holders at
/// once; one leader per term, terms increasing.
fn check_family(mode: Mode, history: &History, findings: &mut Findings) {
    if let Some(permits) = mode.permits() {
        let slots = checker::slots(&history.events);
        findings.too_many_holders = checker::check_permit_holders(&history.events, &slots, permits);
        findings.most_holders = checker::most_permit_holders(&history.events, &slots);
    }
    if mode.election() {
        findings.term_order = checker::check_terms(&checker::grants(&history.events));
    }
}

/// Client `id`'s node timeout: `node_timeout_mix` dealt in turn, or `node_timeout` for all.
fn client_node_timeout(opts: &RunOptions, id: u32) -> Duration {
    match opts.node_timeout_mix.as_slice() {
        [] => opts.node_timeout,
        mix => mix[id as usize % mix.len()],
    }
}

/// Each client's TTL as `mode` runs it: `ttl_mix` dealt in turn, or `ttl` for all.
fn client_ttls(mode: Mode, opts: &RunOptions) -> Vec<Duration> {
    (0..opts.clients as usize)
        .map(|id| match opts.ttl_mix.as_slice() {
            [] => mode.ttl(opts.ttl),
            mix => mode.ttl(mix[id % mix.len()]),
        })
        .collect()
}

/// Whether a client log line shows a grant: `acquire_ok`, or in the `run` mode the start of a
/// command's main process.
fn is_grant(line: &str) -> bool {
    line.contains("\"ev\":\"acquire_ok\"")
        || line.contains(&format!(
            "\"ev\":\"proc_start\",\"proc\":\"{}\"",
            crate::runcmd::MAIN
        ))
}

/// Asks the clients to stop, wakes any that is stopped, waits, and kills the stragglers.
fn stop_clients(control: &Path, children: &mut [Child], ttl: Duration) {
    let _ = client::stop_all(control);
    let until = Instant::now() + ttl * 6 + Duration::from_secs(5);
    loop {
        let mut running = 0;
        for c in children.iter_mut() {
            if c.try_wait().ok().flatten().is_none() {
                running += 1;
                // SAFETY: kill(2) has no memory-safety preconditions.
                unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGCONT) };
            }
        }
        if running == 0 || Instant::now() >= until {
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    for (id, c) in children.iter_mut().enumerate() {
        // A `run` mode straggler's supervisor first: its guard then takes its command down.
        if let Some(pid) = u32::try_from(id)
            .ok()
            .and_then(|id| fs::read_to_string(crate::runcmd::supervisor_file(control, id)).ok())
            .and_then(|t| t.trim().parse::<libc::pid_t>().ok())
        {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn read_events(path: &Path) -> io::Result<Vec<ClientEvent>> {
    let mut text = String::new();
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(0))?;
    f.read_to_string(&mut text)?;
    // A client killed mid-line leaves a partial last line: skip what does not parse.
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// Writes `text` to `path` (creating parent directories).
///
/// # Errors
///
/// I/O errors.
pub fn write_file(path: &Path, text: &str) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    File::create(path)?.write_all(text.as_bytes())
}
