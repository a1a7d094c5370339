//! A Sentinel-managed primary: one primary, two replicas and three Sentinels, all real
//! `redis-server` processes on loopback ports.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::ports::free_port;
use crate::process::{retry_addr_in_use, ServerProcess};
use crate::{resp, RedisNode, RedisOptions};

/// The name the Sentinels know the primary by.
pub const MASTER_NAME: &str = "fencemaster";

/// How long a Sentinel waits without an answer before it calls a node down.
const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// How long a failover may take, and how long a Sentinel waits before it tries another.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// A Sentinel group: three data nodes (node 0 the first primary, nodes 1 and 2 its replicas by
/// `--replicaof`) and three `redis-server FILE --sentinel` processes that watch them under
/// [`MASTER_NAME`] with a quorum of 2, a `down-after-milliseconds` of 1 s and a
/// `failover-timeout` of 10 s. Which node is the primary changes with each failover:
/// [`primary`](Self::primary) asks the Sentinels.
///
/// Dropping the group kills every process.
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// let group = fencelock_testkit::SentinelGroup::start()?;
/// let url = group.url(); // redis+sentinel://127.0.0.1:<p>,...,127.0.0.1:<p>/fencemaster/0
/// let old = group.primary()?;
/// group.node(old).kill()?;
/// let new = group.wait_for_failover(old, std::time::Duration::from_secs(30))?;
/// # let _ = (url, new); Ok(()) }
/// ```
#[derive(Debug)]
pub struct SentinelGroup {
    nodes: Vec<RedisNode>,
    sentinels: Vec<Sentinel>,
}

/// One Sentinel process.
#[derive(Debug)]
struct Sentinel {
    port: u16,
    process: ServerProcess,
    // Last, so the process is gone before its directory is removed.
    _dir: TempDir,
}

impl SentinelGroup {
    /// Starts the three data nodes, waits until both replicas are in sync, then starts the
    /// three Sentinels and waits until each sees both replicas and the two other Sentinels.
    ///
    /// # Errors
    ///
    /// Fails when a process does not start, or the group does not form within 30 s.
    pub fn start() -> io::Result<SentinelGroup> {
        let primary = RedisNode::start()?;
        let replica = || RedisNode::start_with(RedisOptions::default().replica_of(primary.port()));
        let nodes = vec![replica()?, replica()?];
        let nodes: Vec<RedisNode> = std::iter::once(primary).chain(nodes).collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        wait(deadline, "both replicas in sync with the primary", || {
            let info = nodes[0].cli(&["INFO", "replication"]).unwrap_or_default();
            info.matches("state=online").count() == 2
        })?;
        let sentinels = (0..3)
            .map(|_| Sentinel::start(nodes[0].port()))
            .collect::<io::Result<Vec<_>>>()?;
        let group = SentinelGroup { nodes, sentinels };
        wait(
            deadline,
            "every Sentinel sees 2 replicas and 2 other Sentinels",
            || {
                group.sentinels.iter().all(|s| {
                    let fields = s.master_fields().unwrap_or_default();
                    field(&fields, "num-slaves").as_deref() == Some("2")
                        && field(&fields, "num-other-sentinels").as_deref() == Some("2")
                })
            },
        )?;
        Ok(group)
    }

    /// `redis+sentinel://127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>/fencemaster/0`.
    pub fn url(&self) -> String {
        let list: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}/0", list.join(","))
    }

    /// Data node `i` (0: the first primary).
    ///
    /// # Panics
    ///
    /// When `i > 2`.
    pub fn node(&self, i: usize) -> &RedisNode {
        &self.nodes[i]
    }

    /// The ports of the Sentinels.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// Which data node the first Sentinel that answers names as the primary.
    ///
    /// # Errors
    ///
    /// When no Sentinel answers, or the port it names is none of the group's.
    pub fn primary(&self) -> io::Result<usize> {
        let mut last = io::Error::other("no Sentinel");
        for s in &self.sentinels {
            match s.primary_port() {
                Ok(port) => {
                    return self
                        .nodes
                        .iter()
                        .position(|n| n.port() == port)
                        .ok_or_else(|| {
                            io::Error::other(format!("the Sentinels name port {port}, not a node"))
                        })
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Waits until every Sentinel names a primary other than node `old`, and that node says
    /// `ROLE master`; returns it.
    ///
    /// # Errors
    ///
    /// When that does not happen within `timeout` (the error says what each Sentinel names).
    pub fn wait_for_failover(&self, old: usize, timeout: Duration) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        let mut found = None;
        wait(deadline, "a failover seen by every Sentinel", || {
            let ports: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(|s| s.primary_port().ok())
                .collect();
            let Some(Some(port)) = ports.first().copied() else {
                return false;
            };
            if port == self.nodes[old].port() || ports.iter().any(|p| *p != Some(port)) {
                return false;
            }
            let Some(i) = self.nodes.iter().position(|n| n.port() == port) else {
                return false;
            };
            let role = self.nodes[i].cli(&["ROLE"]).unwrap_or_default();
            found = Some(i);
            role.starts_with("master")
        })?;
        found.ok_or_else(|| io::Error::other("no new primary"))
    }

    /// Asks the Sentinels to fail over now (`SENTINEL FAILOVER`, sent to the first one), without
    /// a node down: the old primary becomes a replica of the promoted one.
    ///
    /// # Errors
    ///
    /// When the Sentinel refuses (no good replica, a failover in progress).
    pub fn failover(&self) -> io::Result<()> {
        resp::command(
            self.sentinels[0].port,
            &[b"SENTINEL", b"FAILOVER", MASTER_NAME.as_bytes()],
            Duration::from_secs(5),
        )?
        .render()
        .map(drop)
    }

    /// The log of Sentinel `i` so far.
    pub fn sentinel_log(&self, i: usize) -> String {
        self.sentinels[i].process.log()
    }
}

impl Sentinel {
    fn start(primary: u16) -> io::Result<Sentinel> {
        retry_addr_in_use(5, || {
            let dir = tempfile::Builder::new()
                .prefix("fencelock-sentinel-")
                .tempdir()?;
            let port = free_port()?;
            let conf = dir.path().join("sentinel.conf");
            // Sentinel rewrites its file (the replicas and Sentinels it finds): it must be its own.
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} {down}\n\
                     sentinel failover-timeout {MASTER_NAME} {failover}\n\
                     sentinel parallel-syncs {MASTER_NAME} 2\n",
                    dir = dir.path().display(),
                    down = DOWN_AFTER.as_millis(),
                    failover = FAILOVER_TIMEOUT.as_millis(),
                ),
            )?;
            let sentinel = Sentinel {
                port,
                process: ServerProcess::new(
                    format!("redis sentinel on port {port}"),
                    dir.path().join("sentinel.log"),
                ),
                _dir: dir,
            };
            let mut cmd = std::process::Command::new("redis-server");
            cmd.arg(&conf)
                .arg("--sentinel")
                .current_dir(sentinel._dir.path());
            sentinel.process.spawn(
                &mut cmd,
                "apt-get install redis-server (redis-sentinel is the same binary)",
            )?;
            let ready = sentinel.process.wait_ready(Duration::from_secs(30), || {
                resp::command(port, &[b"PING"], Duration::from_secs(1))
                    .and_then(|r| r.render())
                    .is_ok_and(|r| r == "PONG")
            });
            if let Err(e) = ready {
                let _ = sentinel.process.kill();
                return Err(e);
            }
            Ok(sentinel)
        })
    }

    fn primary_port(&self) -> io::Result<u16> {
        let reply = resp::command(
            self.port,
            &[
                b"SENTINEL",
                b"GET-MASTER-ADDR-BY-NAME",
                MASTER_NAME.as_bytes(),
            ],
            Duration::from_secs(2),
        )?
        .render()?;
        reply
            .lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .ok_or_else(|| io::Error::other(format!("no primary in {reply:?}")))
    }

    fn master_fields(&self) -> io::Result<String> {
        resp::command(
            self.port,
            &[b"SENTINEL", b"MASTER", MASTER_NAME.as_bytes()],
            Duration::from_secs(2),
        )?
        .render()
    }
}

/// The value after `name` in a rendered `SENTINEL MASTER` reply (one item per line).
fn field(rendered: &str, name: &str) -> Option<String> {
    let mut lines = rendered.lines();
    while let Some(line) = lines.next() {
        if line == name {
            return lines.next().map(str::to_string);
        }
    }
    None
}

fn wait(deadline: Instant, what: &str, mut ready: impl FnMut() -> bool) -> io::Result<()> {
    loop {
        if ready() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("timed out waiting for {what}"),
            ));
        }
        thread::sleep(Duration::from_millis(100));
    }
}
