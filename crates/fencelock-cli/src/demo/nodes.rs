//! The demo's own redis-server nodes: child processes on free loopback ports, with a temp dir
//! each, that the demo can kill -9 and restart.
//!
//! They are stopped at the end, on Ctrl-C and on error (by [`LocalNodes::stop_all`] and by
//! `Drop`, which also runs when the demo panics), and, if the demo itself is killed with
//! SIGKILL, by the kernel: each node is started with a parent-death signal. Each node also runs
//! in its own process group, so that a Ctrl-C on the terminal reaches the demo alone, which then
//! stops the nodes in order instead of watching them die under its feet mid-scene.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::exit::Failure;
use crate::node::Node;

/// How long a started node has to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a node has to exit after SIGTERM before it gets SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(3);
/// Attempts at starting one node, each on a fresh port: another program may take a free port
/// between the moment we pick it and the moment redis-server binds it.
const START_ATTEMPTS: usize = 3;

/// The demo's nodes, in order.
#[derive(Debug)]
pub(crate) struct LocalNodes {
    dir: PathBuf,
    nodes: Vec<LocalNode>,
}

#[derive(Debug)]
struct LocalNode {
    port: u16,
    /// `None` once the node was killed or stopped.
    child: Option<Child>,
}

impl LocalNodes {
    /// No nodes yet; they will keep their files under `dir`.
    pub(crate) fn new(dir: &Path) -> LocalNodes {
        LocalNodes {
            dir: dir.to_path_buf(),
            nodes: Vec::new(),
        }
    }

    /// Starts `count` nodes and waits until each answers PING.
    ///
    /// # Errors
    ///
    /// A failure naming the node if redis-server is missing or a node does not come up; the
    /// nodes started so far keep running until [`LocalNodes::stop_all`] or drop.
    pub(crate) async fn start(&mut self, count: usize) -> Result<(), Failure> {
        for _ in 0..count {
            self.nodes.push(LocalNode {
                port: 0,
                child: None,
            });
            let index = self.nodes.len() - 1;
            self.start_fresh(index).await?;
        }
        Ok(())
    }

    async fn start_fresh(&mut self, index: usize) -> Result<(), Failure> {
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            self.nodes[index].port = port;
            match self.launch(index).await {
                Ok(()) => return Ok(()),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| Failure::internal("no node could be started")))
    }

    /// Starts node `index` on its port and waits until it answers.
    async fn launch(&mut self, index: usize) -> Result<(), Failure> {
        let port = self.nodes[index].port;
        let dir = self.dir.join(format!("node-{}", index + 1));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Failure::internal(format!("cannot create {}: {e}", dir.display())))?;
        let log = dir.join("redis.log");
        let child = spawn_redis(port, &dir, &log)?;
        self.nodes[index].child = Some(child);
        let node = Node::parse(&url(port), index)?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(mut conn) = node.connect(Duration::from_millis(500)).await {
                if conn.query::<String>(&redis::cmd("PING")).await.is_ok() {
                    return Ok(());
                }
            }
            let exited = self.nodes[index]
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited || Instant::now() >= deadline {
                self.stop(index);
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                let tail = tail.lines().last().unwrap_or("no log").trim().to_owned();
                return Err(Failure::internal(format!(
                    "demo node {} (redis-server on 127.0.0.1:{port}) did not come up: {tail}",
                    index + 1
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Restarts a killed node, empty (it keeps nothing on disk): on the same port if it is still
    /// free, else on a fresh one ([`LocalNodes::urls`] then gives the new URL).
    ///
    /// # Errors
    ///
    /// As [`LocalNodes::start`].
    pub(crate) async fn restart(&mut self, index: usize) -> Result<(), Failure> {
        self.stop(index);
        if self.launch(index).await.is_ok() {
            return Ok(());
        }
        self.start_fresh(index).await
    }

    /// The node URLs.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| url(n.port)).collect()
    }

    /// The ports, in node order.
    pub(crate) fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The PIDs of the running nodes, in node order.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter_map(|n| n.child.as_ref().map(Child::id))
            .collect()
    }

    /// `kill -9` of node `index`: no shutdown, no goodbye to the clients. Returns its PID.
    pub(crate) fn kill9(&mut self, index: usize) -> Option<u32> {
        let mut child = self.nodes.get_mut(index)?.child.take()?;
        let pid = child.id();
        // `Child::kill` sends SIGKILL; `wait` reaps it so that no zombie is left.
        let _ = child.kill();
        let _ = child.wait();
        Some(pid)
    }

    /// Stops node `index` (SIGTERM, then SIGKILL) and reaps it.
    fn stop(&mut self, index: usize) {
        if let Some(child) = self.nodes.get_mut(index).and_then(|n| n.child.take()) {
            stop_child(child);
        }
    }

    /// Stops every node that still runs. Returns the PIDs stopped.
    pub(crate) fn stop_all(&mut self) -> Vec<u32> {
        let mut stopped = Vec::new();
        for index in 0..self.nodes.len() {
            if let Some(child) = self.nodes[index].child.take() {
                stopped.push(child.id());
                stop_child(child);
            }
        }
        stopped
    }
}

impl Drop for LocalNodes {
    fn drop(&mut self) {
        // The demo is a command-line program: blocking here for a moment is the price of
        // leaving no process behind, even when a scene panicked.
        self.stop_all();
    }
}

fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

fn free_port() -> Result<u16, Failure> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Failure::internal(format!("cannot find a free port on 127.0.0.1: {e}")))
}

fn spawn_redis(port: u16, dir: &Path, log: &Path) -> Result<Child, Failure> {
    let binary = crate::devset::redis_server_binary();
    let mut cmd = Command::new(&binary);
    cmd.arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--protected-mode", "yes"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(log)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    die_with_parent(&mut cmd);
    cmd.spawn()
        .map_err(|e| crate::devset::spawn_failure(&binary, &e))
}

/// Makes a child of the demo live in its own process group (Ctrl-C reaches the demo only) and,
/// on Linux, die with SIGKILL when the demo dies, however it dies.
///
/// The parent-death signal fires when the *thread* that forked the child exits, so children
/// must be spawned from the main thread (the demo's runtime is single-threaded).
pub(crate) fn die_with_parent(cmd: &mut Command) {
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    {
        let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
        // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
        // system calls (prctl, getppid, _exit); it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The demo may have died between the fork and the prctl.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
}

/// SIGTERM, then SIGKILL after [`STOP_TIMEOUT`]; always reaps.
fn stop_child(mut child: Child) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        let _ = child.kill();
        let _ = child.wait();
        return;
    };
    // SAFETY: kill(2) on our own child, which is not reaped yet, so its PID is not reused.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}
