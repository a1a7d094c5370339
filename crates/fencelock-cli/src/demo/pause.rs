//! Scene 4, the article's process pause (section 7.1), with and without fencing; and the worker
//! process that plays client A.
//!
//! A is a real process, the demo's own binary run as `fencelock demo --worker SPEC`: it takes the
//! lock, reads the stock, prints what it read, and stops itself with SIGSTOP, as a
//! stop-the-world GC pause would stop it. Its lock's keys expire while it is stopped. The demo
//! plays B meanwhile, then sends SIGCONT; A writes what it computed before the pause.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use fencelock::{Client, Error};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::nodes::die_with_parent;
use super::out::{human, Tone};
use super::stock::{lock_resource, Shop};
use super::{client, config, Stage};
use crate::exit;

/// The lock's TTL in this scene: short, so that the pause outlasts it quickly.
const TTL: Duration = Duration::from_secs(1);
/// How long the demo waits for the worker at each step before calling it hung.
const WORKER_PATIENCE: Duration = Duration::from_secs(30);
const START_STOCK: i64 = 10;
const A_WANTS: i64 = 5;
const B_WANTS: i64 = 3;

/// What the worker process is told to do (JSON on its command line).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WorkerSpec {
    nodes: Vec<String>,
    db: PathBuf,
    sku: String,
    quantity: i64,
    ttl: Duration,
    fencing: bool,
}

/// `fencelock demo --worker SPEC`: client A of scene 4.
///
/// Prints `READ <stock> <fencing token or 0>`, stops itself, and once resumed prints
/// `WROTE <new stock>` or `REJECTED <why>`.
///
/// # Errors
///
/// A bad spec, or a lock or storage error other than the stale-token refusal.
pub(crate) async fn worker(spec: &str) -> anyhow::Result<u8> {
    let spec: WorkerSpec = serde_json::from_str(spec)
        .context("--worker is internal to `fencelock demo`; run `fencelock demo` instead")?;
    let shop = Shop::open(&spec.db)?;
    let client = client(
        config(&spec.nodes)
            .with_ttl(spec.ttl)
            .with_fencing(spec.fencing),
    )
    .await?;
    let lock = client.acquire(&lock_resource(&spec.sku)).await?;
    let token = lock.fencing_token().map(|t| t.value());
    let stock = shop.stock(&spec.sku)?;
    say(&format!("READ {stock} {}", token.unwrap_or(0)));
    // SAFETY: raising a signal on our own process has no memory-safety preconditions.
    unsafe { libc::raise(libc::SIGSTOP) };
    // A does not look at its lock's validity before writing: the article's point is that such a
    // check would not help, since the pause can come right after it.
    let new_stock = stock - spec.quantity;
    let written = match token {
        Some(token) => shop.write_fenced(&spec.sku, new_stock, token).await,
        None => shop.write_unfenced(&spec.sku, new_stock),
    };
    match written {
        Ok(()) => say(&format!("WROTE {new_stock}")),
        Err(e @ Error::StaleToken { .. }) => say(&format!("REJECTED {e}")),
        Err(e) => return Err(e.into()),
    }
    // Its keys expired while it was stopped, so this reports the lock lost: that is the point.
    let _ = lock.release().await;
    Ok(exit::OK)
}

fn say(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// Scene 4: the pause, first without fencing, then with it.
///
/// # Errors
///
/// A node, storage or worker failure, or an outcome other than the one the story needs.
pub(crate) async fn pause(stage: &mut Stage<'_>) -> anyhow::Result<()> {
    let out = stage.out;
    out.scene(
        4,
        "The pause (article 7.1): a holder freezes for longer than its lock lives",
    );
    out.line(format!(
        "Stock of \"pear\": {START_STOCK}. The lock's TTL: {}. A wants {A_WANTS} pears, B wants {B_WANTS}.",
        human(TTL)
    ));

    out.line(out.paint(Tone::Strong, "Without fencing (Redlock alone):"));
    let plain = play(stage, false).await?;
    out.line(format!(
        "  A (process {}) takes the lock, reads stock {}, and freezes (SIGSTOP, like a long GC pause).",
        plain.a_pid, plain.a_read
    ));
    out.line(format!(
        "  B waits {} for A's keys to expire, takes the lock, reads {}, writes {} - {B_WANTS} = {}.",
        human(plain.b_waited),
        plain.b_read,
        plain.b_read,
        plain.b_read - B_WANTS
    ));
    let Outcome::Wrote(a_wrote) = plain.a_outcome else {
        bail!(
            "without fencing A's write was refused: {:?}",
            plain.a_outcome
        );
    };
    out.line(format!(
        "  A wakes up (SIGCONT), still believes it holds the lock, and writes {} - {A_WANTS} = {a_wrote}.",
        plain.a_read
    ));
    let should_be = START_STOCK - A_WANTS - B_WANTS;
    if plain.final_stock == should_be {
        bail!(
            "without fencing the stock came out right ({should_be}); the pause did not overlap B"
        );
    }
    out.line(format!(
        "  Stock is now {}, yet {A_WANTS} + {B_WANTS} pears were sold: it should be {should_be}. {}",
        plain.final_stock,
        out.paint(
            Tone::Bad,
            "B's reservation was overwritten: the stock is corrupted."
        )
    ));

    out.line(out.paint(
        Tone::Strong,
        "With fencing (fencing mode + fenced storage), the same story:",
    ));
    let fenced = play(stage, true).await?;
    out.line(format!(
        "  A (process {}) takes the lock with fencing token {}, reads stock {}, and freezes.",
        fenced.a_pid, fenced.a_token, fenced.a_read
    ));
    out.line(format!(
        "  B waits {}, takes the lock with token {} (newer), writes {}; the storage remembers token {}.",
        human(fenced.b_waited),
        fenced.b_token,
        fenced.b_read - B_WANTS,
        fenced.b_token
    ));
    let Outcome::Rejected(why) = &fenced.a_outcome else {
        bail!(
            "with fencing A's stale write was accepted: {:?}",
            fenced.a_outcome
        );
    };
    out.line(format!(
        "  A wakes up and writes {} with token {}: {}",
        fenced.a_read - A_WANTS,
        fenced.a_token,
        out.paint(Tone::Good, "refused by the storage (StaleToken):")
    ));
    out.line(format!("    {why}"));
    if fenced.final_stock != START_STOCK - B_WANTS {
        bail!(
            "with fencing the stock is {} instead of {}",
            fenced.final_stock,
            START_STOCK - B_WANTS
        );
    }
    out.line(format!(
        "  Stock is {} = {START_STOCK} - {B_WANTS}: {}",
        fenced.final_stock,
        out.paint(
            Tone::Good,
            "B's data is intact, and A learned that its lock was gone."
        )
    ));
    out.lesson(
        "no lock with a TTL can stop a paused process from writing late, and checking the validity first does not help: the pause can come right after the check. The storage must check a fencing token.",
    );
    out.line(out.paint(
        Tone::Dim,
        "(A clock that jumps ahead on one node does the same harm, by expiring A's key there early. That needs a fake-clock shim, so it is not shown here; see `cargo test -p fencelock --all-features --test inventory clock_jump`.)",
    ));
    Ok(())
}

/// What A's write came to.
#[derive(Debug)]
enum Outcome {
    Wrote(i64),
    Rejected(String),
}

/// One play of the scene.
#[derive(Debug)]
struct Played {
    a_pid: u32,
    a_read: i64,
    a_token: u64,
    b_waited: Duration,
    b_read: i64,
    b_token: u64,
    a_outcome: Outcome,
    final_stock: i64,
}

async fn play(stage: &mut Stage<'_>, fencing: bool) -> anyhow::Result<Played> {
    let sku = "pear";
    let db = stage
        .dir
        .join(if fencing { "pear-fenced.db" } else { "pear.db" });
    let shop = Shop::open(&db)?;
    shop.set_stock(sku, START_STOCK)?;
    let urls = stage.nodes.urls();
    let b = client(config(&urls).with_ttl(TTL).with_fencing(fencing)).await?;

    let spec = WorkerSpec {
        nodes: urls,
        db,
        sku: sku.to_owned(),
        quantity: A_WANTS,
        ttl: TTL,
        fencing,
    };
    let mut a = Worker::spawn(&spec)?;
    let read = a.next_line().await?;
    let (a_read, a_token) = parse_read(&read)?;
    a.wait_stopped().await?;

    let (b_waited, b_read, b_token) = play_b(&b, &shop, sku).await?;

    let a_pid = a.pid();
    let last = a.resume().await?;
    let a_outcome = if let Some(n) = last.strip_prefix("WROTE ") {
        Outcome::Wrote(n.parse().context("the worker's WROTE line")?)
    } else if let Some(why) = last.strip_prefix("REJECTED ") {
        Outcome::Rejected(why.to_owned())
    } else {
        bail!("the worker said {last:?}");
    };
    Ok(Played {
        a_pid,
        a_read,
        a_token,
        b_waited,
        b_read,
        b_token,
        a_outcome,
        final_stock: shop.stock(sku)?,
    })
}

/// B: waits for the lock (A's keys must expire first), reserves, releases.
async fn play_b(b: &Client, shop: &Shop, sku: &str) -> anyhow::Result<(Duration, i64, u64)> {
    let started = Instant::now();
    let lock = b
        .acquire(&lock_resource(sku))
        .await
        .context("B's wait for the lock")?;
    let waited = started.elapsed();
    let token = lock.fencing_token().map(|t| t.value());
    let stock = shop.stock(sku)?;
    match token {
        Some(token) => shop.write_fenced(sku, stock - B_WANTS, token).await?,
        None => shop.write_unfenced(sku, stock - B_WANTS)?,
    }
    let _ = lock.release().await;
    Ok((waited, stock, token.unwrap_or(0)))
}

fn parse_read(line: &str) -> anyhow::Result<(i64, u64)> {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("READ"), Some(stock), Some(token)) => Ok((stock.parse()?, token.parse()?)),
        _ => bail!("the worker said {line:?} instead of READ <stock> <token>"),
    }
}

/// Client A as a child process; killed and reaped on drop if still running.
#[derive(Debug)]
struct Worker {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Worker {
    fn spawn(spec: &WorkerSpec) -> anyhow::Result<Worker> {
        let exe = std::env::current_exe().context("finding the fencelock binary to run A")?;
        let mut cmd = Command::new(exe);
        cmd.arg("demo")
            .arg("--worker")
            .arg(serde_json::to_string(spec)?)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().context("starting client A's process")?;
        let stdout = child.stdout.take().context("client A's stdout")?;
        let (tx, lines) = mpsc::unbounded_channel();
        // A thread, not a task: reading a pipe blocks, and the runtime has one thread.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Ok(Worker { child, lines })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn next_line(&mut self) -> anyhow::Result<String> {
        match tokio::time::timeout(WORKER_PATIENCE, self.lines.recv()).await {
            Ok(Some(line)) => Ok(line),
            Ok(None) => bail!("client A's process ended early (see its error above)"),
            Err(_) => bail!(
                "client A's process said nothing for {}",
                human(WORKER_PATIENCE)
            ),
        }
    }

    /// Waits until the process has stopped itself (state `T` in /proc).
    async fn wait_stopped(&self) -> anyhow::Result<()> {
        let stat = format!("/proc/{}/stat", self.child.id());
        let deadline = Instant::now() + WORKER_PATIENCE;
        loop {
            let Ok(text) = std::fs::read_to_string(&stat) else {
                // No /proc (not Linux): the line came right before the stop; give it a moment.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Ok(());
            };
            let state = text
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            match state {
                Some('T' | 't') => return Ok(()),
                Some('Z' | 'X') => bail!("client A's process ended before it paused"),
                _ if Instant::now() >= deadline => bail!("client A's process never paused"),
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    /// SIGCONT; returns A's last line after it exits.
    async fn resume(mut self) -> anyhow::Result<String> {
        let pid = libc::pid_t::try_from(self.child.id())?;
        // SAFETY: kill(2) on our own child, not yet reaped, so the PID is still its own.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let line = self.next_line().await?;
        let deadline = Instant::now() + WORKER_PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!("client A's process failed ({status}); see its error above");
                }
                return Ok(line);
            }
            if Instant::now() >= deadline {
                bail!("client A's process did not exit after its write");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SIGKILL also ends a stopped process.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workers_read_line_parses() {
        assert_eq!(parse_read("READ 10 65601").unwrap(), (10, 65601));
        assert_eq!(parse_read("READ 10 0").unwrap(), (10, 0));
        assert!(parse_read("fencelock: error: boom").is_err());
        assert!(parse_read("READ ten 1").is_err());
    }

    #[test]
    fn the_worker_spec_round_trips() {
        let spec = WorkerSpec {
            nodes: vec!["redis://127.0.0.1:1".into()],
            db: "/tmp/x.db".into(),
            sku: "pear".into(),
            quantity: 5,
            ttl: TTL,
            fencing: true,
        };
        let back: WorkerSpec =
            serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(back.ttl, TTL);
        assert_eq!(back.nodes, spec.nodes);
        assert!(back.fencing);
    }
}
