//! `fencelock bench`: measures the library against a raw redis-rs baseline in the same run.
//!
//! Workloads (see `docs/performance.md` for the figures and how to read them):
//! - `seq`: one client, N sequential acquire+release cycles on distinct keys.
//! - `par`: C concurrent tasks sharing one client, N cycles in total on distinct keys.
//! - `contended`: C workers, each its own client on a thread and runtime of its own (as separate
//!   processes would be), on one key; N critical sections in total, each a read-modify-write
//!   (GET, then SET one more) of a counter on the first node inside a cross-thread overlap check. Reports overlaps, the counter,
//!   sections per worker and the hand-over time (end of a section, when its release is sent ->
//!   next grant; and release returned -> next grant).
//! - `held`: one client holds C locks under auto-extension for a fixed time; reports the
//!   process's CPU time and, per node, the commands and read events (round trips) it served.
//! - `permits`: C workers share a semaphore of `--permits` permits, N sections of `--hold`
//!   each, then the same on the mutex; the ratio is the permits' throughput over the mutex's
//!   (`bench/permits.rs`).
//! - `shared`: C tasks sharing one client, N cycles on one key: read locks with a write lock in
//!   every tenth cycle (`RwLock`), against the same cycles through the mutex of one key, in
//!   alternating blocks (`bench/shared.rs`); reports the ratio of the two.
//!
//! With `--raw`, each workload runs a second time through [`raw::Raw`], hand-written redis-rs
//! calls with no library around them, and the ratio of the two is printed. Everything but the
//! contended workers runs on the CLI's single-threaded runtime, the library and the baseline
//! alike.

mod baseline;
mod local;
mod permits;
mod plot;
mod proxy;
mod raw;
mod raw_etcd;
mod raw_pg;
mod raw_zk;
mod shared;
mod stats;

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::future::join_all;
use serde_json::{json, Map, Value};

use self::baseline::{Baseline, Counter};
use self::raw::Raw;
use self::stats::{human, micros, round2, Summary};
use crate::cli::{BenchArgs, Global, Workload};
use crate::exit::{self, Failure};
use crate::settings::{self, Settings};

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Seq => "seq",
            Workload::Par => "par",
            Workload::Contended => "contended",
            Workload::Held => "held",
            Workload::Permits => "permits",
            Workload::Shared => "shared",
        }
    }
}

/// Parallel acquisitions while taking the locks of `held`.
const HELD_ACQUIRE_CONCURRENCY: usize = 64;
/// How long a contended worker may wait for one grant before it counts an error.
const CONTENDED_WAIT: Duration = Duration::from_secs(60);

/// One measured series: the library's or the baseline's.
#[derive(Debug)]
struct Series {
    name: &'static str,
    summary: Summary,
    /// Sorted latencies, for the plot.
    samples: Vec<Duration>,
    /// Workload-specific figures.
    extra: Map<String, Value>,
    /// Extra curves for the plot (the hand-over times of `contended`).
    extra_curves: Vec<(String, Vec<Duration>)>,
}

/// `fencelock bench`.
///
/// # Errors
///
/// A usage failure for conflicting options or no nodes; an internal failure when the nodes
/// cannot be reached or the plot cannot be written.
pub(crate) async fn bench(global: &Global, args: BenchArgs) -> anyhow::Result<u8> {
    let metrics = if args.metrics {
        Some(crate::metrics::install()?)
    } else {
        None
    };
    // Both live until the end of the run: the local nodes and the delaying proxies.
    let (_local, settings) = node_settings(global, &args).await?;
    let (settings, _proxies) = delayed(settings, &args).await?;
    let plan = Plan::new(&args, &settings);
    let baseline = Baseline::connect(&settings.nodes, settings.ttl).await?;
    if !global.json {
        plan.announce(&settings, &args);
    }
    let series = match plan.workload {
        Workload::Seq | Workload::Par => run_cycles(&plan, &settings, &baseline, &args).await?,
        Workload::Contended => run_contended(&plan, &settings, &baseline, &args).await?,
        Workload::Held => run_held(&plan, &settings, &baseline, &args).await?,
        Workload::Permits => {
            let hold = args.hold.unwrap_or(permits::DEFAULT_HOLD);
            permits::run_permits(&plan, &settings, args.permits.unwrap_or(4), hold).await?
        }
        Workload::Shared => {
            let client = client(&settings, plan.fencing).await?;
            shared::run(&client, plan.cycles, plan.concurrency, &plan.prefix).await?
        }
    };
    let report = Report {
        workload: plan.workload,
        nodes: settings.nodes.len(),
        ttl: settings.ttl,
        concurrency: plan.concurrency,
        fencing: plan.fencing,
        series,
    };
    if let Some(path) = &args.plot {
        report.plot(path)?;
    }
    if global.json {
        let mut value = report.json();
        if let Some(handle) = &metrics {
            value["metrics"] = crate::metrics::render(handle).into();
        }
        println!("{value}");
    } else {
        report.print();
        if let Some(handle) = &metrics {
            println!("\nmetrics recorded by the library:");
            print!("{}", crate::metrics::render(handle));
        }
    }
    Ok(if report.safety_violated() {
        exit::CHECK_FAILED
    } else {
        exit::OK
    })
}

/// The nodes of the run: started here with `--local`, else resolved as for every command.
async fn node_settings(
    global: &Global,
    args: &BenchArgs,
) -> anyhow::Result<(Option<local::LocalNodes>, Settings)> {
    let local = match args.local {
        Some(_) if !global.nodes.is_empty() => {
            return Err(Failure::usage(
                "--local starts its own nodes; give either --local N or --nodes, not both",
            )
            .into())
        }
        Some(n) => Some(local::LocalNodes::start(n).await?),
        None => None,
    };
    let settings = match &local {
        Some(nodes) => Settings::for_local_nodes(global, nodes.urls()),
        None => settings::resolve(global)?,
    };
    Ok((local, settings))
}

/// With `--delay-nodes K --delay D`: the same settings with the last K nodes behind a
/// delaying proxy of our own.
async fn delayed(
    mut settings: Settings,
    args: &BenchArgs,
) -> anyhow::Result<(Settings, Option<proxy::Proxies>)> {
    let (Some(count), Some(delay)) = (args.delay_nodes, args.delay) else {
        return Ok((settings, None));
    };
    let (urls, proxies) = proxy::delay_nodes(&settings.nodes, count, delay, args.delay_on)
        .await
        .map_err(|e| Failure::usage(format!("{e:#}")))?;
    settings.nodes = urls;
    Ok((settings, Some(proxies)))
}

/// What one run does: the workload and its sizes.
#[derive(Debug)]
struct Plan {
    workload: Workload,
    cycles: usize,
    concurrency: usize,
    fencing: bool,
    /// Not "fencelock:...": names in that key space are refused as lock names.
    prefix: String,
}

impl Plan {
    fn new(args: &BenchArgs, settings: &Settings) -> Plan {
        let w = args.workload;
        let cycles = args.cycles.unwrap_or(match w {
            Workload::Seq => 2_000,
            Workload::Par => 10_000,
            Workload::Contended => 200,
            Workload::Held => 0,
            Workload::Permits => 400,
            Workload::Shared => 2_000,
        });
        let concurrency = args
            .concurrency
            .unwrap_or(match w {
                Workload::Seq => 1,
                Workload::Par => 64,
                Workload::Contended => 8,
                Workload::Held => 10_000,
                Workload::Permits => 16,
                Workload::Shared => 16,
            })
            .max(1);
        Plan {
            workload: w,
            cycles,
            concurrency,
            fencing: args.fencing || settings.fencing,
            prefix: format!("fencelock-bench:{:08x}", fastrand::u32(..)),
        }
    }

    fn announce(&self, settings: &Settings, args: &BenchArgs) {
        let delay = match (args.delay_nodes, args.delay) {
            (Some(k), Some(d)) => format!(
                ", {k} node(s) delayed by {d:?} ({})",
                match args.delay_on {
                    proxy::DelayOn::Replies => "replies",
                    proxy::DelayOn::Requests => "requests",
                    proxy::DelayOn::Both => "both ways",
                }
            ),
            _ => String::new(),
        };
        eprintln!(
            "fencelock bench: workload {}, {} node(s){}, ttl {:?}, node timeout {:?}{delay}{}",
            self.workload.name(),
            settings.nodes.len(),
            baseline::Kind::of(&settings.nodes).label(),
            settings.ttl,
            settings.node_timeout,
            if self.fencing { ", fencing" } else { "" }
        );
    }
}

/// `seq` and `par`: the library and (with `--raw`) the baseline, in alternating blocks.
async fn run_cycles(
    plan: &Plan,
    settings: &Settings,
    baseline: &Baseline,
    args: &BenchArgs,
) -> anyhow::Result<Vec<Series>> {
    let c = if plan.workload == Workload::Seq {
        1
    } else {
        plan.concurrency
    };
    let client = client(settings, plan.fencing).await?;
    let base = args.raw.then_some(baseline);
    let hold = args.hold.unwrap_or(Duration::ZERO);
    Ok(cycles_both(&client, base, plan.cycles, c, hold, &plan.prefix).await)
}

/// `contended`: the library's workers, then (with `--raw`) the polling and the barging
/// baselines' workers.
async fn run_contended(
    plan: &Plan,
    settings: &Settings,
    baseline: &Baseline,
    args: &BenchArgs,
) -> anyhow::Result<Vec<Series>> {
    let rtt = round_trip(baseline).await;
    let both = (plan.cycles, plan.concurrency);
    let fencing = plan.fencing;
    let lib_settings = settings.clone();
    let mut out = vec![
        contended(
            "fencelock",
            settings,
            baseline,
            both,
            &plan.prefix,
            move || {
                let settings = lib_settings.clone();
                async move { Ok(LibContender(client(&settings, fencing).await?)) }
            },
        )
        .await?,
    ];
    if args.raw {
        for (name, poll_delay) in [("raw", args.poll_delay), ("raw-barging", Duration::ZERO)] {
            let (nodes, ttl) = (settings.nodes.clone(), settings.ttl);
            out.push(
                contended(name, settings, baseline, both, &plan.prefix, move || {
                    let nodes = nodes.clone();
                    async move {
                        let raw = Baseline::for_worker(&nodes, ttl).await?;
                        Ok(RawContender { raw, poll_delay })
                    }
                })
                .await?,
            );
        }
    }
    for s in &mut out {
        s.extra.insert("round_trip_us".into(), micros(rtt).into());
    }
    Ok(out)
}

/// `held`: the library's locks under auto-extension, then (with `--raw`) the baseline's.
async fn run_held(
    plan: &Plan,
    settings: &Settings,
    baseline: &Baseline,
    args: &BenchArgs,
) -> anyhow::Result<Vec<Series>> {
    let hold = args.hold.unwrap_or(settings.ttl);
    let client = client(settings, plan.fencing).await?;
    let (n, prefix) = (plan.concurrency, &plan.prefix);
    let mut out = vec![held_lib(&client, baseline, n, hold, prefix).await];
    if args.raw {
        out.push(match baseline {
            Baseline::Redis(raw) => held_raw(raw, n, hold, settings.ttl, prefix).await,
            Baseline::Etcd(raw) => held_raw_etcd(raw, n, hold, settings.ttl, prefix).await?,
            Baseline::ZooKeeper(_) | Baseline::Postgres(_) => {
                return Err(Failure::usage(
                    "`bench held --raw` has no baseline on ZooKeeper or PostgreSQL yet (a lock there is kept by the session or by extensions the library sends); run it without --raw",
                )
                .into())
            }
        });
    }
    Ok(out)
}

async fn client(settings: &Settings, fencing: bool) -> Result<fencelock::Client, Failure> {
    let config = settings
        .lock_config(fencing)
        .with_retry(fencelock::RetryPolicy::new().with_wait(CONTENDED_WAIT));
    let client = fencelock::Client::new(config)
        .map_err(|err| Failure::usage(format!("{err} (nodes from {})", settings.source)))?;
    // Connection set-up is not what is measured.
    let votes = client.connect().await;
    if votes.iter().any(|v| !v.outcome.is_granted()) {
        return Err(Failure::new(
            exit::UNAVAILABLE,
            format!("not every node answered: {votes}"),
        ));
    }
    Ok(client)
}

/// The median of a few parallel PINGs to every node: one round trip of the node set.
async fn round_trip(raw: &Baseline) -> Duration {
    let mut samples = Vec::new();
    for _ in 0..21 {
        samples.push(raw.ping().await);
    }
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// What `drive` measured: latencies of the successes, failures, wall time, CPU time (and,
/// where the nodes report it, their CPU time over the run, summed over the nodes).
#[derive(Debug, Default)]
struct Run {
    samples: Vec<Duration>,
    errors: usize,
    elapsed: Duration,
    cpu: Duration,
    node_cpu: Option<NodeCpu>,
}

/// The nodes' CPU time (user + system, as `INFO cpu` reports it) over a run, summed over the
/// `nodes` nodes that reported it.
#[derive(Debug, Default, Clone, Copy)]
struct NodeCpu {
    total: Duration,
    nodes: usize,
}

impl Run {
    fn add(&mut self, other: Run) {
        self.samples.extend(other.samples);
        self.errors += other.errors;
        self.elapsed += other.elapsed;
        self.cpu += other.cpu;
        self.node_cpu = match (self.node_cpu, other.node_cpu) {
            (Some(a), Some(b)) => Some(NodeCpu {
                total: a.total + b.total,
                nodes: a.nodes.min(b.nodes),
            }),
            (a, b) => a.or(b),
        };
    }
}

/// Runs cycles `from..to` on `c` concurrent tasks, each spawned as an application's request
/// handlers would be (one task per worker, so each has tokio's own scheduling budget); each
/// cycle says whether it succeeded.
async fn drive<F, Fut>(from: usize, to: usize, c: usize, cycle: F) -> Run
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    let next = Arc::new(AtomicUsize::new(from));
    let cpu0 = cpu_time();
    let started = Instant::now();
    let workers: Vec<_> = (0..c.max(1))
        .map(|_| {
            let (next, cycle) = (next.clone(), cycle.clone());
            tokio::spawn(async move {
                let (mut samples, mut errors) = (Vec::new(), 0usize);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= to {
                        break;
                    }
                    let t = Instant::now();
                    if cycle(i).await {
                        samples.push(t.elapsed());
                    } else {
                        errors += 1;
                    }
                }
                (samples, errors)
            })
        })
        .collect();
    let results = join_all(workers).await;
    let mut run = Run {
        elapsed: started.elapsed(),
        cpu: cpu_time().saturating_sub(cpu0),
        ..Run::default()
    };
    for (s, e) in results.into_iter().flatten() {
        run.samples.extend(s);
        run.errors += e;
    }
    run
}

fn series(name: &'static str, mut run: Run) -> Series {
    let summary = Summary::of(&mut run.samples, run.errors, run.elapsed);
    let mut extra = Map::new();
    let per_cycle = u32::try_from(summary.count)
        .ok()
        .filter(|n| *n > 0)
        .map_or(Duration::ZERO, |n| run.cpu / n);
    extra.insert("cpu_us_per_cycle".into(), micros(per_cycle).into());
    if let (Some(node), Some(n)) = (
        run.node_cpu,
        u32::try_from(summary.count).ok().filter(|n| *n > 0),
    ) {
        extra.insert(
            "node_cpu_us_per_cycle".into(),
            micros(node.total / n).into(),
        );
        extra.insert("nodes_measured".into(), node.nodes.into());
    }
    Series {
        name,
        summary,
        samples: run.samples,
        extra,
        extra_curves: Vec::new(),
    }
}

/// Blocks of `seq`/`par` cycles, library and baseline alternating, so that a change in the
/// machine's load during the run weighs on both alike.
const BLOCKS: usize = 10;

async fn cycles_both(
    client: &fencelock::Client,
    raw: Option<&Baseline>,
    n: usize,
    c: usize,
    hold: Duration,
    prefix: &str,
) -> Vec<Series> {
    let (mut lib, mut base) = (Run::default(), Run::default());
    let prefix: Arc<str> = prefix.into();
    let lib_cycle = {
        let (client, prefix) = (client.clone(), prefix.clone());
        move |i: usize| {
            let (client, prefix) = (client.clone(), prefix.clone());
            async move {
                let key = format!("{prefix}:lib:{i}");
                match client.try_acquire(&key).await {
                    Ok(lock) => {
                        hold_for(hold).await;
                        lock.release().await.is_ok()
                    }
                    Err(_) => false,
                }
            }
        }
    };
    let raw_cycle = {
        let raw = raw.cloned();
        move |i: usize| {
            let (raw, prefix) = (raw.clone(), prefix.clone());
            async move {
                let Some(raw) = raw else { return false };
                let key = format!("{prefix}:raw:{i}");
                let token = Raw::token();
                if !raw.acquire(&key, &token).await {
                    return false;
                }
                hold_for(hold).await;
                raw.release(&key, &token).await
            }
        }
    };
    let blocks = if raw.is_some() {
        BLOCKS.min(n.max(1))
    } else {
        1
    };
    // Each block's node CPU is read around it (with the baseline's connections), so that each
    // series is charged with what the nodes spent on it alone.
    for b in 0..blocks {
        let (from, to) = (n * b / blocks, n * (b + 1) / blocks);
        // Alternate which goes first, so neither always runs on the warmer caches.
        if b % 2 == 0 || raw.is_none() {
            lib.add(with_node_cpu(raw, drive(from, to, c, lib_cycle.clone())).await);
            if raw.is_some() {
                base.add(with_node_cpu(raw, drive(from, to, c, raw_cycle.clone())).await);
            }
        } else {
            base.add(with_node_cpu(raw, drive(from, to, c, raw_cycle.clone())).await);
            lib.add(with_node_cpu(raw, drive(from, to, c, lib_cycle.clone())).await);
        }
    }
    let mut out = vec![series("fencelock", lib)];
    if raw.is_some() {
        out.push(series("raw", base));
    }
    out
}

/// A cycle's time in its critical section (none for zero: no timer).
async fn hold_for(hold: Duration) {
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
}

/// What the contended workers share. They run on threads of their own, so the overlap check
/// is a real cross-thread one.
#[derive(Debug, Default)]
struct Contention {
    taken: AtomicUsize,
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    /// Per section, by number: when it was granted, when its work ended (the release starts),
    /// when its release returned.
    times: Mutex<Vec<SectionTimes>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct SectionTimes {
    granted: Option<Instant>,
    ended: Option<Instant>,
    released: Option<Instant>,
}

/// What one contended worker reports: grant latencies, errors, sections done.
type WorkerRun = (Vec<Duration>, usize, usize);

impl Contention {
    /// Called on each grant: the number of the section to do, if one remains.
    fn granted(&self, n: usize) -> Option<usize> {
        let now = Instant::now();
        let number = self
            .taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                (t < n).then_some(t + 1)
            })
            .ok()?;
        self.record(number, |t| t.granted = Some(now));
        Some(number)
    }

    fn record(&self, number: usize, set: impl FnOnce(&mut SectionTimes)) {
        let mut times = self.times.lock().expect("bench mutex");
        if times.len() <= number {
            times.resize(number + 1, SectionTimes::default());
        }
        set(&mut times[number]);
    }

    /// Called when the release of section `number` returned.
    fn released(&self, number: usize) {
        let now = Instant::now();
        self.record(number, |t| t.released = Some(now));
    }

    fn done(&self, n: usize) -> bool {
        self.taken.load(Ordering::Acquire) >= n
    }

    /// The critical section `number`: the overlap check around a read-modify-write of the
    /// counter on the first node.
    async fn section(&self, number: usize, counter: &mut Counter, key: &str) -> bool {
        if self.inside.fetch_add(1, Ordering::AcqRel) > 0 {
            self.overlaps.fetch_add(1, Ordering::AcqRel);
        }
        let ok = counter.increment(key).await;
        self.inside.fetch_sub(1, Ordering::AcqRel);
        let now = Instant::now();
        self.record(number, |t| t.ended = Some(now));
        ok
    }

    /// The hand-overs: from the end of each section (its release starts) to the next grant, and
    /// from the return of that release to the next grant (zero when the next holder had the lock
    /// before the releaser heard back from every node).
    fn handovers(times: &[SectionTimes]) -> (Vec<Duration>, Vec<Duration>) {
        let (mut from_end, mut from_release) = (Vec::new(), Vec::new());
        for w in times.windows(2) {
            let Some(next) = w[1].granted else { continue };
            if let Some(ended) = w[0].ended {
                from_end.push(next.saturating_duration_since(ended));
            }
            if let Some(released) = w[0].released {
                from_release.push(next.saturating_duration_since(released));
            }
        }
        from_end.sort_unstable();
        from_release.sort_unstable();
        (from_end, from_release)
    }

    async fn finish(
        self,
        name: &'static str,
        raw: &Baseline,
        counter_key: &str,
        per_worker: Vec<WorkerRun>,
        (elapsed, cpu): (Duration, Duration),
    ) -> anyhow::Result<Series> {
        let counter = raw.take_counter(counter_key).await?;
        let sections: Vec<usize> = per_worker.iter().map(|(_, _, s)| *s).collect();
        let total: usize = sections.iter().sum();
        let mut run = Run {
            elapsed,
            cpu,
            ..Run::default()
        };
        for (s, e, _) in per_worker {
            run.samples.extend(s);
            run.errors += e;
        }
        let mut out = series(name, run);
        let times = self.times.into_inner().expect("bench mutex");
        let (handovers, after_release) = Self::handovers(&times);
        let workers = sections.len().max(1);
        let fair = total as f64 / workers as f64;
        let busiest = sections.iter().copied().max().unwrap_or(0);
        let e = &mut out.extra;
        e.insert("overlaps".into(), self.overlaps.into_inner().into());
        e.insert("counter".into(), counter.into());
        e.insert("sections".into(), total.into());
        e.insert("sections_per_worker".into(), json!(sections));
        e.insert("busiest_worker_sections".into(), busiest.into());
        e.insert("fair_share".into(), round2(fair).into());
        e.insert(
            "busiest_over_fair".into(),
            round2(if fair > 0.0 {
                busiest as f64 / fair
            } else {
                0.0
            })
            .into(),
        );
        e.insert("handovers".into(), handovers.len().into());
        for (field, q) in [("handover_p50_us", 0.5), ("handover_p99_us", 0.99)] {
            e.insert(
                field.into(),
                micros(stats::percentile(&handovers, q)).into(),
            );
        }
        e.insert(
            "handover_max_us".into(),
            micros(handovers.last().copied().unwrap_or_default()).into(),
        );
        e.insert(
            "handover_after_release_p50_us".into(),
            micros(stats::percentile(&after_release, 0.5)).into(),
        );
        out.extra_curves
            .push((format!("{name} hand-over"), handovers));
        Ok(out)
    }
}

/// Runs `workers` contended workers, each on a thread of its own with its own single-threaded
/// runtime, as separate processes would run (on one shared runtime, the hand-over of one worker
/// queued behind the others' traffic and measured the runtime, not the lock). `work(i, start)`
/// sets up worker `i`, waits on `start` (a barrier of all workers and the caller), then works.
/// Returns the workers' reports and the wall and CPU time from the start to the last finish.
async fn on_threads<F, Fut>(
    workers: usize,
    work: F,
) -> anyhow::Result<(Vec<WorkerRun>, (Duration, Duration))>
where
    F: Fn(usize, Arc<std::sync::Barrier>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<WorkerRun>>,
{
    let work = Arc::new(work);
    let start = Arc::new(std::sync::Barrier::new(workers + 1));
    let mut threads = Vec::with_capacity(workers);
    for i in 0..workers {
        let (work, start) = (work.clone(), start.clone());
        threads.push(std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting a worker's runtime")?;
            runtime.block_on(work(i, start))
        }));
    }
    tokio::task::spawn_blocking(move || {
        start.wait();
        let cpu0 = cpu_time();
        let started = Instant::now();
        let mut runs = Vec::with_capacity(threads.len());
        for t in threads {
            runs.push(
                t.join()
                    .map_err(|_| anyhow::anyhow!("a contended worker panicked"))??,
            );
        }
        Ok((runs, (started.elapsed(), cpu_time().saturating_sub(cpu0))))
    })
    .await
    .context("joining the contended workers")?
}

/// What a contended worker's attempt to take the lock came to.
enum Taken<H> {
    Got(H),
    /// Not this time: counts as an error; the worker tries again (up to three errors).
    Failed,
    /// Counts as an error, and the worker stops (it waited its longest).
    GaveUp,
    /// Every section is done: the worker stops.
    Done,
}

/// How a contended worker takes and gives back the lock: the library, or the polling baseline.
/// Each runs on a current-thread runtime of its own, so the futures need not be `Send`.
trait Contender {
    type Held;
    async fn take(&self, key: &str, shared: &Contention, n: usize) -> Taken<Self::Held>;
    /// Whether the release went through.
    async fn give(&self, key: &str, held: Self::Held) -> bool;
}

/// The library: `acquire` waits in line and is woken by its turn.
struct LibContender(fencelock::Client);

impl Contender for LibContender {
    type Held = fencelock::Lock;

    async fn take(&self, key: &str, _: &Contention, _: usize) -> Taken<fencelock::Lock> {
        match self.0.acquire(key).await {
            Ok(lock) => Taken::Got(lock),
            Err(_) => Taken::Failed,
        }
    }

    async fn give(&self, _: &str, lock: fencelock::Lock) -> bool {
        lock.release().await.is_ok()
    }
}

/// The baselines: a polling client, as simple lock clients are (on a refusal, retry after a
/// random delay around `poll_delay`, 50 ms by default), or, with a zero `poll_delay`, a barging
/// one that retries at once.
struct RawContender {
    raw: Baseline,
    poll_delay: Duration,
}

impl Contender for RawContender {
    type Held = String;

    async fn take(&self, key: &str, shared: &Contention, n: usize) -> Taken<String> {
        let (started, token) = (Instant::now(), Raw::token());
        while !self.raw.acquire(key, &token).await {
            if shared.done(n) {
                return Taken::Done;
            }
            if started.elapsed() > CONTENDED_WAIT {
                return Taken::GaveUp;
            }
            if self.poll_delay.is_zero() {
                continue;
            }
            let delay = self.poll_delay / 2 + self.poll_delay.mul_f64(fastrand::f64());
            tokio::time::sleep(delay).await;
        }
        Taken::Got(token)
    }

    async fn give(&self, key: &str, token: String) -> bool {
        self.raw.release(key, &token).await
    }
}

/// Runs `contended` for one side: `workers` workers, each made by `make` on its own thread,
/// take turns on one key until `n` sections are done.
async fn contended<C, F, Fut>(
    name: &'static str,
    settings: &Settings,
    raw: &Baseline,
    (n, workers): (usize, usize),
    prefix: &str,
    make: F,
) -> anyhow::Result<Series>
where
    C: Contender,
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<C>>,
{
    let key = Arc::new(format!("{prefix}:contended:{name}"));
    let counter_key = Arc::new(format!("{prefix}:counter:{name}"));
    let (nodes, ttl) = (Arc::new(settings.nodes.clone()), settings.ttl);
    let shared = Arc::new(Contention::default());
    let (shared_, counter_key_) = (shared.clone(), counter_key.clone());
    let make = Arc::new(make);
    let (per_worker, times) = on_threads(workers, move |_, start| {
        let (make, shared, key, counter_key, nodes) = (
            make.clone(),
            shared_.clone(),
            key.clone(),
            counter_key_.clone(),
            nodes.clone(),
        );
        async move {
            // Set-up fails fast: the others would wait at the barrier for ever.
            let setup = async {
                let contender = make().await?;
                let counter = Counter::connect(&nodes, ttl).await?;
                anyhow::Ok((contender, counter))
            };
            let setup = setup.await;
            start.wait();
            let (contender, mut counter) = setup?;
            let (mut samples, mut errors, mut mine) = (Vec::new(), 0usize, 0usize);
            while !shared.done(n) {
                let t = Instant::now();
                let held = match contender.take(&key, &shared, n).await {
                    Taken::Got(held) => held,
                    Taken::Done => break,
                    Taken::GaveUp => {
                        errors += 1;
                        break;
                    }
                    Taken::Failed => {
                        errors += 1;
                        // Every worker waits this long at most: a stuck run ends, with errors.
                        if errors > 3 {
                            break;
                        }
                        continue;
                    }
                };
                let Some(number) = shared.granted(n) else {
                    contender.give(&key, held).await;
                    break;
                };
                samples.push(t.elapsed());
                if !shared.section(number, &mut counter, &counter_key).await {
                    errors += 1;
                }
                mine += 1;
                if !contender.give(&key, held).await {
                    errors += 1;
                }
                shared.released(number);
            }
            Ok((samples, errors, mine))
        }
    })
    .await?;
    let shared = Arc::try_unwrap(shared).map_err(|_| anyhow::anyhow!("workers still running"))?;
    shared
        .finish(name, raw, &counter_key, per_worker, times)
        .await
}

/// The process's CPU time so far (user + system).
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct we pass; a zeroed rusage is a valid initial value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Counters of one node: commands processed, EVALSHA calls, read events (about one per
/// request or pipeline that arrives), CPU time (user + system; `None` when the node did not
/// report it).
#[derive(Debug, Clone, Copy, Default)]
struct NodeCounters {
    commands: u64,
    evalsha: u64,
    reads: u64,
    cpu: Option<Duration>,
}

/// Runs `run` and adds to its result the CPU time the nodes spent meanwhile (Redis nodes that
/// answer `INFO cpu`; none on etcd). The nodes are shared with nothing else during a bench
/// run, so this is the run's own cost on the nodes, give or take the two `INFO` calls.
async fn with_node_cpu(raw: Option<&Baseline>, run: impl Future<Output = Run>) -> Run {
    let Some(raw) = raw else {
        return run.await;
    };
    let before = node_counters(raw).await;
    let mut out = run.await;
    let after = node_counters(raw).await;
    let spent: Vec<Duration> = before
        .iter()
        .zip(&after)
        .filter_map(|(b, a)| Some(a.cpu?.saturating_sub(b.cpu?)))
        .collect();
    if !spent.is_empty() {
        out.node_cpu = Some(NodeCpu {
            total: spent.iter().sum(),
            nodes: spent.len(),
        });
    }
    out
}

/// Per node, for Redis nodes (an etcd cluster has no such counters: none).
async fn node_counters(raw: &Baseline) -> Vec<NodeCounters> {
    let mut out = Vec::new();
    let Baseline::Redis(raw) = raw else {
        return out;
    };
    for conn in raw.conns() {
        let text: String = redis::cmd("INFO")
            .arg("stats")
            .arg("commandstats")
            .arg("cpu")
            .query_async(&mut conn.clone())
            .await
            .unwrap_or_default();
        let info = crate::node::parse_info(&text);
        let field = |name: &str| {
            info.get(name)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let evalsha = text
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|v| v.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0);
        let seconds = |name: &str| info.get(name).and_then(|v| v.parse::<f64>().ok());
        let cpu = match (seconds("used_cpu_user"), seconds("used_cpu_sys")) {
            (Some(user), Some(sys)) => Duration::try_from_secs_f64(user + sys).ok(),
            _ => None,
        };
        out.push(NodeCounters {
            commands: field("total_commands_processed"),
            evalsha,
            reads: field("total_reads_processed"),
            cpu,
        });
    }
    out
}

/// Measures CPU and node traffic over `hold`, and reports them into `extra`.
async fn measure_hold(
    raw: &Baseline,
    locks: usize,
    during: impl Future<Output = ()>,
) -> Map<String, Value> {
    let before = node_counters(raw).await;
    let cpu0 = cpu_time();
    let started = Instant::now();
    during.await;
    let cpu = cpu_time().saturating_sub(cpu0);
    let took = started.elapsed();
    let after = node_counters(raw).await;
    let secs = took.as_secs_f64().max(1e-9);
    let per_node: Vec<Value> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| {
            let commands = a.commands.saturating_sub(b.commands);
            json!({
                "commands": commands,
                "commands_per_sec": round2(commands as f64 / secs),
                "evalsha": a.evalsha.saturating_sub(b.evalsha),
                "round_trips": a.reads.saturating_sub(b.reads),
            })
        })
        .collect();
    let mut e = Map::new();
    e.insert("locks".into(), locks.into());
    e.insert("hold_ms".into(), micros(took).div_euclid(1000).into());
    e.insert("cpu_ms".into(), micros(cpu).div_euclid(1000).into());
    e.insert("cpu_fraction".into(), (cpu.as_secs_f64() / secs).into());
    e.insert("per_node".into(), Value::Array(per_node));
    e
}

async fn held_lib(
    client: &fencelock::Client,
    raw: &Baseline,
    locks: usize,
    hold: Duration,
    prefix: &str,
) -> Series {
    let guards = Arc::new(Mutex::new(Vec::with_capacity(locks)));
    let acquire = {
        let (client, guards) = (client.clone(), guards.clone());
        let prefix: Arc<str> = format!("{prefix}:held:lib").into();
        move |i: usize| {
            let (client, guards, prefix) = (client.clone(), guards.clone(), prefix.clone());
            async move {
                match client.try_acquire(&format!("{prefix}:{i}")).await {
                    Ok(lock) => {
                        let guard = lock.auto_extend(fencelock::AutoExtend::new());
                        guards.lock().expect("guards mutex").push(guard);
                        true
                    }
                    Err(_) => false,
                }
            }
        }
    };
    let run = drive(0, locks, HELD_ACQUIRE_CONCURRENCY, acquire).await;
    let mut out = series("fencelock", run);
    let mut extra = measure_hold(raw, locks, tokio::time::sleep(hold)).await;
    let lost = guards
        .lock()
        .expect("guards mutex")
        .iter()
        .filter(|g| g.is_lost())
        .count();
    extra.insert("lost".into(), lost.into());
    out.extra.extend(extra);
    let release = move |_| {
        let guards = guards.clone();
        async move {
            let guard = guards.lock().expect("guards mutex").pop();
            match guard {
                Some(g) => g.release().await.is_ok(),
                None => false,
            }
        }
    };
    let _ = drive(0, locks, HELD_ACQUIRE_CONCURRENCY, release).await;
    out
}

async fn held_raw(raw: &Raw, locks: usize, hold: Duration, ttl: Duration, prefix: &str) -> Series {
    let held = Arc::new(Mutex::new(Vec::with_capacity(locks)));
    let acquire = {
        let (raw, held) = (raw.clone(), held.clone());
        let prefix: Arc<str> = format!("{prefix}:held:raw").into();
        move |i: usize| {
            let (raw, held, prefix) = (raw.clone(), held.clone(), prefix.clone());
            async move {
                let key = format!("{prefix}:{i}");
                let token = Raw::token();
                if raw.acquire(&key, &token).await {
                    held.lock().expect("held mutex").push((key, token));
                    true
                } else {
                    false
                }
            }
        }
    };
    let run = drive(0, locks, HELD_ACQUIRE_CONCURRENCY, acquire).await;
    let mut out = series("raw", run);
    let held: Arc<Vec<(String, String)>> =
        Arc::new(std::mem::take(&mut *held.lock().expect("held mutex")));
    let interval = ttl / 3;
    let lost = Cell::new(0usize);
    let extend = async {
        let until = Instant::now() + hold;
        loop {
            let next = Instant::now() + interval;
            if next > until {
                tokio::time::sleep_until(until.into()).await;
                break;
            }
            tokio::time::sleep_until(next.into()).await;
            let ok = raw.extend_all(&held).await;
            lost.set(held.len() - ok);
        }
    };
    let mut extra = measure_hold(&Baseline::Redis(raw.clone()), locks, extend).await;
    extra.insert("lost".into(), lost.get().into());
    out.extra.extend(extra);
    let release = {
        let raw = raw.clone();
        move |i: usize| {
            let (raw, held) = (raw.clone(), held.clone());
            async move {
                let (key, token) = &held[i];
                raw.release(key, token).await > 0
            }
        }
    };
    let n = out.summary.count;
    let _ = drive(0, n, HELD_ACQUIRE_CONCURRENCY, release).await;
    out
}

/// `held` on etcd, as etcd's own clients hold locks: one session lease for all of them (as
/// `concurrency.NewSession` makes), kept alive every TTL/3, each lock a key attached to it.
async fn held_raw_etcd(
    raw: &raw_etcd::RawEtcd,
    locks: usize,
    hold: Duration,
    ttl: Duration,
    prefix: &str,
) -> anyhow::Result<Series> {
    let session = raw.with_session().await?;
    let keeper = session.keep_session_alive(ttl / 3).await?;
    let acquire = {
        let session = session.clone();
        let prefix: Arc<str> = format!("{prefix}:held:raw").into();
        move |i: usize| {
            let (session, prefix) = (session.clone(), prefix.clone());
            async move { session.acquire(&format!("{prefix}:{i}"), "held").await }
        }
    };
    let run = drive(0, locks, HELD_ACQUIRE_CONCURRENCY, acquire).await;
    let mut out = series("raw", run);
    let baseline = Baseline::Etcd(Box::new(raw.clone()));
    let mut extra = measure_hold(&baseline, locks, tokio::time::sleep(hold)).await;
    keeper.abort();
    // Lost: keys gone before the end of the hold (their lease expired).
    let mut lost = 0usize;
    for i in 0..out.summary.count {
        if !session.release(&format!("{prefix}:held:raw:{i}")).await {
            lost += 1;
        }
    }
    extra.insert("lost".into(), lost.into());
    out.extra.extend(extra);
    Ok(out)
}

/// Everything one run measured.
#[derive(Debug)]
struct Report {
    workload: Workload,
    nodes: usize,
    ttl: Duration,
    concurrency: usize,
    fencing: bool,
    series: Vec<Series>,
}

impl Report {
    fn lib(&self) -> &Series {
        &self.series[0]
    }

    /// A baseline's series by name: `raw` (for `contended`, the poller) or `raw-barging`.
    fn named(&self, name: &str) -> Option<&Series> {
        self.series.iter().skip(1).find(|s| s.name == name)
    }

    fn raw(&self) -> Option<&Series> {
        self.named("raw")
    }

    /// Library cycles/s over the named baseline's.
    fn ratio_to(&self, name: &str) -> Option<f64> {
        let raw = self.named(name)?.summary.per_sec();
        (raw > 0.0).then(|| self.lib().summary.per_sec() / raw)
    }

    /// Library cycles/s over the baseline's.
    fn ratio(&self) -> Option<f64> {
        self.ratio_to("raw")
    }

    /// Whether a contended run saw two holders at once or lost an increment.
    fn safety_violated(&self) -> bool {
        self.series.iter().any(|s| {
            let get = |k: &str| s.extra.get(k).and_then(Value::as_u64);
            get("overlaps").is_some_and(|o| o > 0)
                || matches!((get("counter"), get("sections")), (Some(c), Some(n)) if c != n)
        })
    }

    fn series_json(s: &Series) -> Map<String, Value> {
        let mut m = s.summary.json();
        m.extend(s.extra.clone());
        m
    }

    fn json(&self) -> Value {
        // The library's figures at the top level (what most readers want), both series under
        // their names, and the ratio.
        let lib = Self::series_json(self.lib());
        let mut top = lib.clone();
        top.insert("workload".into(), self.workload.name().into());
        top.insert("nodes".into(), self.nodes.into());
        top.insert("ttl_ms".into(), micros(self.ttl).div_euclid(1000).into());
        top.insert("concurrency".into(), self.concurrency.into());
        top.insert("fencing".into(), self.fencing.into());
        top.insert("fencelock".into(), Value::Object(lib));
        top.insert(
            "raw".into(),
            self.raw()
                .map_or(Value::Null, |r| Value::Object(Self::series_json(r))),
        );
        top.insert(
            "ratio".into(),
            self.ratio().map_or(Value::Null, |r| round2(r).into()),
        );
        if let Some(mutex) = self.named("mutex") {
            top.insert("mutex".into(), Value::Object(Self::series_json(mutex)));
            top.insert(
                "ratio_to_mutex".into(),
                self.ratio_to("mutex")
                    .map_or(Value::Null, |r| round2(r).into()),
            );
        }
        if let Some(barging) = self.named("raw-barging") {
            top.insert(
                "raw_barging".into(),
                Value::Object(Self::series_json(barging)),
            );
            top.insert(
                "ratio_barging".into(),
                self.ratio_to("raw-barging")
                    .map_or(Value::Null, |r| round2(r).into()),
            );
        }
        Value::Object(top)
    }

    fn print(&self) {
        self.print_table();
        self.print_ratios();
        for s in &self.series {
            self.print_details(s);
        }
    }

    /// One line per series: throughput, latency, errors, CPU.
    fn print_table(&self) {
        println!(
            "{:<11} {:>10} {:>9} {:>9} {:>9} {:>7} {:>10}",
            "series", "cycles/s", "p50", "p99", "max", "errors", "cpu/cycle"
        );
        for s in &self.series {
            let m = &s.summary;
            println!(
                "{:<11} {:>10.0} {:>9} {:>9} {:>9} {:>7} {:>10}",
                s.name,
                m.per_sec(),
                human(m.p50),
                human(m.p99),
                human(m.max),
                m.errors,
                s.extra
                    .get("cpu_us_per_cycle")
                    .and_then(Value::as_u64)
                    .map_or("-".into(), |us| human(Duration::from_micros(us)))
            );
        }
    }

    /// The library's throughput against each baseline the workload has.
    fn print_ratios(&self) {
        if let Some(r) = self.ratio() {
            let what = if self.workload == Workload::Contended {
                "raw (polling)"
            } else {
                "raw"
            };
            println!("ratio fencelock/{what} (cycles/s): {r:.2}x");
        }
        if let Some(r) = self.ratio_to("raw-barging") {
            println!("ratio fencelock/raw-barging (cycles/s): {r:.2}x");
        }
        if let Some(r) = self.ratio_to("mutex") {
            if self.workload == Workload::Permits {
                println!("ratio permits/mutex (sections/s): {r:.2}x");
            } else {
                println!("ratio read-write lock/mutex, one key (cycles/s): {r:.2}x");
            }
        }
    }

    /// The workload's own figures of one series (its safety counts, hand-over, CPU...).
    fn print_details(&self, s: &Series) {
        let e = &s.extra;
        let n = |k: &str| e.get(k).cloned().unwrap_or(Value::Null);
        let us = |k: &str| {
            e.get(k)
                .and_then(Value::as_u64)
                .map_or("-".into(), |v| human(Duration::from_micros(v)))
        };
        match self.workload {
            Workload::Contended => println!(
                "{}: overlaps {}, counter {} for {} sections, per worker {}, busiest {} (fair share {}), hand-over p50 {} p99 {} max {}, p50 after the release returned {} (round trip {})",
                s.name,
                n("overlaps"),
                n("counter"),
                n("sections"),
                n("sections_per_worker"),
                n("busiest_worker_sections"),
                n("fair_share"),
                us("handover_p50_us"),
                us("handover_p99_us"),
                us("handover_max_us"),
                us("handover_after_release_p50_us"),
                us("round_trip_us"),
            ),
            Workload::Held => print_held(s),
            Workload::Permits => println!(
                "{}: {} permit(s), hold {}, at most {} holders at once, {} over the limit",
                s.name,
                n("permits"),
                us("hold_us"),
                n("most_holders"),
                n("overlaps"),
            ),
            Workload::Shared if s.name == "fencelock" => println!(
                "{}: {} write cycles, overlaps {}",
                s.name,
                n("write_cycles"),
                n("overlaps")
            ),
            Workload::Seq | Workload::Par => {
                if let Some(nodes) = e.get("nodes_measured") {
                    println!(
                        "{}: node CPU per cycle {} over {nodes} node(s)",
                        s.name,
                        us("node_cpu_us_per_cycle")
                    );
                }
            }
            Workload::Shared => {}
        }
    }

    fn plot(&self, path: &std::path::Path) -> Result<(), Failure> {
        let mut curves = Vec::new();
        for s in &self.series {
            curves.push(plot::Series {
                name: s.name,
                sorted: &s.samples,
            });
        }
        for s in &self.series {
            for (name, samples) in &s.extra_curves {
                curves.push(plot::Series {
                    name,
                    sorted: samples,
                });
            }
        }
        let what = match self.workload {
            Workload::Held => "acquisition latency",
            Workload::Permits => "wait for a permit (for the mutex)",
            Workload::Contended => "wait for the lock, and hand-over",
            Workload::Seq | Workload::Par => "acquire + release latency",
            Workload::Shared => "acquire + release latency, one key",
        };
        let title = format!(
            "fencelock bench {}: {what}, {} node(s){}",
            self.workload.name(),
            self.nodes,
            if self.fencing { ", fencing" } else { "" }
        );
        std::fs::write(path, plot::svg(&title, &curves)).map_err(|e| {
            Failure::internal(format!("cannot write the plot to {}: {e}", path.display()))
        })
    }
}

/// The held workload's figures of one series: CPU while locks are held, and each node's load.
fn print_held(s: &Series) {
    let e = &s.extra;
    let n = |k: &str| e.get(k).cloned().unwrap_or(Value::Null);
    println!(
        "{}: {} locks held {} ms, CPU {} ms ({:.1}% of a core), lost {}",
        s.name,
        n("locks"),
        n("hold_ms"),
        n("cpu_ms"),
        e.get("cpu_fraction").and_then(Value::as_f64).unwrap_or(0.0) * 100.0,
        n("lost"),
    );
    if let Some(Value::Array(nodes)) = e.get("per_node") {
        for (i, node) in nodes.iter().enumerate() {
            println!(
                "  node {}: {} commands ({} /s), {} EVALSHA, {} round trips",
                i + 1,
                node["commands"],
                node["commands_per_sec"],
                node["evalsha"],
                node["round_trips"]
            );
        }
    }
}
