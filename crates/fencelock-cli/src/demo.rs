//! `fencelock demo`: the article's story end to end, on 5 local redis-server nodes that the demo
//! starts itself and stops at the end (also on Ctrl-C and on error).
//!
//! 1. Contention: A gets the lock, B is refused, A releases, B is woken at once.
//! 2. A node killed while the lock is held; then a majority killed: "unavailable", no key left.
//! 3. The inventory's `reserve(sku, qty)` with concurrent workers under a fencing lock.
//! 4. The process pause with and without fencing, with a real stopped process as client A.
//!
//! It ends with which lock to use when (article section 8).

mod nodes;
mod out;
mod pause;
mod scenes;
mod stock;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fencelock::{Client, Config, RetryPolicy};
use tokio::signal::unix::{signal, SignalKind};

use self::nodes::LocalNodes;
use self::out::{human, Out, Tone};
use crate::cli::{DemoArgs, Global};
use crate::devset;
use crate::exit::{self, Failure};

/// How many nodes the demo starts.
const NODES: usize = 5;
/// Per-node timeout: far above a local round trip, so that a loaded machine does not turn the
/// story into timeouts; no scene is about slow nodes.
const NODE_TIMEOUT: Duration = Duration::from_millis(200);

/// What the scenes share.
#[derive(Debug)]
pub(crate) struct Stage<'a> {
    out: Out,
    nodes: &'a mut LocalNodes,
    dir: &'a Path,
}

/// The lock settings of every client of the demo.
fn config(urls: &[String]) -> Config {
    Config::new(urls)
        .with_node_timeout(NODE_TIMEOUT)
        // The demo's nodes were started moments ago and have never held a lock. The restart
        // quarantine leaves out nodes that are up for less than a TTL, because such a node may
        // have forgotten a lock it granted before a restart; here a short uptime only means
        // "new", so the quarantine would exclude every node and protect nothing.
        .with_quarantine(false)
        .with_retry(
            RetryPolicy::new()
                .with_wait(Duration::from_secs(30))
                .with_base_delay(Duration::from_millis(5))
                .with_max_delay(Duration::from_millis(50)),
        )
}

/// A client with its connections open, so that no scene's first round pays for connecting.
async fn client(config: Config) -> Result<Client, Failure> {
    let client = Client::new(config).map_err(|e| Failure::internal(e.to_string()))?;
    client.connect().await;
    Ok(client)
}

/// `fencelock demo`.
///
/// # Errors
///
/// A failure if the nodes cannot be started, a scene's outcome is not the one the story needs,
/// or the demo is interrupted (exit 128 + the signal); the nodes are stopped in every case.
pub(crate) async fn demo(global: &Global, args: DemoArgs) -> anyhow::Result<u8> {
    if let Some(spec) = args.worker {
        return pause::worker(&spec).await;
    }
    // Listen for signals before the first node starts: from then on a Ctrl-C must stop them.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let started = Instant::now();
    let out = Out::new();
    intro(&out, global);

    let dir = TempDir::create()?;
    let mut nodes = LocalNodes::new(dir.path());
    let story = story(&out, &mut nodes, dir.path());
    let result = tokio::select! {
        result = story => result,
        _ = interrupt.recv() => Err(interrupted("SIGINT", libc::SIGINT)),
        _ = terminate.recv() => Err(interrupted("SIGTERM", libc::SIGTERM)),
        _ = hangup.recv() => Err(interrupted("SIGHUP", libc::SIGHUP)),
    };
    let stopped = nodes.stop_all();
    drop(dir);
    if result.is_err() {
        out.raw("");
    }
    let stopped = if stopped.is_empty() {
        "No demo node was running".to_owned()
    } else {
        format!("Stopped the demo's nodes (pids {})", join(&stopped))
    };
    out.raw(out.paint(
        Tone::Dim,
        format!(
            "{stopped}; nothing is left running, and the demo's files are removed. The demo took {}.",
            human(started.elapsed())
        ),
    ));
    result?;
    summary(&out);
    Ok(exit::OK)
}

fn interrupted(name: &str, signal: i32) -> anyhow::Error {
    let code = u8::try_from(128 + signal).unwrap_or(exit::INTERNAL);
    Failure::new(code, format!("interrupted by {name}")).into()
}

fn intro(out: &Out, global: &Global) {
    out.raw(out.paint(
        Tone::Strong,
        "fencelock demo: what a distributed lock on Redis protects, and what it does not (a few seconds)",
    ));
    let dev_set_up = devset::state_path()
        .ok()
        .and_then(|path| devset::load(&path).ok().flatten())
        .is_some();
    let configured = !global.nodes.is_empty()
        || std::env::var_os("FENCELOCK_NODES").is_some_and(|v| !v.is_empty());
    if dev_set_up || configured {
        let which = if dev_set_up {
            "the dev set of `fencelock up`"
        } else {
            "the configured nodes"
        };
        out.raw(out.paint(
            Tone::Dim,
            format!(
                "(The demo leaves {which} alone and starts nodes of its own: scene 2 kills nodes.)"
            ),
        ));
    }
}

async fn story(out: &Out, nodes: &mut LocalNodes, dir: &Path) -> anyhow::Result<()> {
    nodes.start(NODES).await?;
    let ports: Vec<u32> = nodes.ports().into_iter().map(u32::from).collect();
    out.raw(format!(
        "Started {NODES} independent redis-server nodes on 127.0.0.1 (ports {}; pids {}).",
        join(&ports),
        join(&nodes.pids())
    ));
    out.raw(
        "A lock is one key on every node (SET key token NX PX ttl): a client holds the lock when a",
    );
    out.raw(
        "majority of the nodes (3 of 5) set the key for it, for the key's time to live (TTL). Below,",
    );
    out.raw(format!(
        "[...] shows each node's answer in order: {} = granted, {} = another client holds the key,",
        out.paint(Tone::Good, "ok"),
        out.paint(Tone::Warn, "held")
    ));
    out.raw(format!(
        "{} = no answer, {} = not waited for (the outcome was already decided).",
        out.paint(Tone::Bad, "down"),
        out.paint(Tone::Dim, "-")
    ));
    let mut stage = Stage {
        out: *out,
        nodes,
        dir,
    };
    scenes::contention(&mut stage).await?;
    scenes::node_down(&mut stage).await?;
    scenes::inventory(&mut stage).await?;
    pause::pause(&mut stage).await?;
    out.raw("");
    Ok(())
}

fn summary(out: &Out) {
    out.raw("");
    out.raw(out.paint(
        Tone::Strong,
        "Which lock when (article section 8)? Ask what happens if two clients hold it at once:",
    ));
    out.raw("  only duplicate work (a cron job, a cache rebuild, a report mail): an efficiency lock on one Redis node is enough;");
    out.raw("  the lock must survive a dead node: Redlock over 3 or 5 independent nodes (scene 2), still only as safe as its TTL and clocks;");
    out.raw("  corrupted data (stock, money, invoice numbers): fencing mode + fenced storage (scene 4), or constraints in the database.");
}

fn join(values: &[u32]) -> String {
    values
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The demo's own directory under the system temp dir, removed on drop.
#[derive(Debug)]
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn create() -> Result<TempDir, Failure> {
        let base = std::env::temp_dir();
        let mut last = None;
        // A random suffix, and create_dir (not create_dir_all): never reuse someone's dir.
        for _ in 0..8 {
            let path = base.join(format!(
                "fencelock-demo-{}-{:08x}",
                std::process::id(),
                fastrand::u32(..)
            ));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir { path }),
                Err(e) => last = Some(e),
            }
        }
        Err(Failure::internal(format!(
            "cannot create a directory for the demo's nodes in {}: {}",
            base.display(),
            last.map_or_else(|| "unknown error".to_owned(), |e| e.to_string())
        )))
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
