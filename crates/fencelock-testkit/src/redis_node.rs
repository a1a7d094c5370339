//! One real `redis-server` process on a free loopback port.

use std::io;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use tempfile::TempDir;

use crate::ports::free_port;
use crate::process::{retry_addr_in_use, ServerProcess, STOP_GRACE};
use crate::{resp, ClockOffset, RedisOptions};

/// Timeout of one [`RedisNode::cli`] command (connect, write and read).
const CLI_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a start may take before it is reported as failed. Generous: the
/// test machine may be loaded, and an AOF restart replays the log first.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Start attempts on fresh ports when another process took the port first.
const START_TRIES: usize = 5;

/// A `redis-server` child process listening on `127.0.0.1` on a free port,
/// with its own temporary working directory.
///
/// Started with `--save '' --appendonly no` unless the
/// [`RedisOptions`] say otherwise, and with `--enable-debug-command local`
/// so tests may use `DEBUG`. Its stdout and stderr go to a log file in the
/// temporary directory; see [`log`](Self::log).
///
/// All control methods take `&self`, so one thread may pause or kill a node
/// while others use it. Dropping the node kills the process (continuing it
/// first if paused), reaps it and removes the directory; when the drop
/// happens during a panic, the last 40 log lines go to stderr.
#[derive(Debug)]
pub struct RedisNode {
    port: u16,
    options: RedisOptions,
    process: ServerProcess,
    clock: Option<ClockOffset>,
    // Last, so the process is gone before its directory is removed.
    dir: TempDir,
}

impl RedisNode {
    /// Starts a node with [`RedisOptions::default`].
    ///
    /// # Errors
    ///
    /// Fails when `redis-server` is not installed, the clock shim cannot be
    /// built, or the server does not answer `PING` in time; the error
    /// includes the server's log.
    pub fn start() -> io::Result<RedisNode> {
        RedisNode::start_with(RedisOptions::default())
    }

    /// Starts a node with `options`, on a new port when the first one turns
    /// out to be taken.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_with(options: RedisOptions) -> io::Result<RedisNode> {
        retry_addr_in_use(START_TRIES, || {
            let dir = tempfile::Builder::new()
                .prefix("fencelock-redis-")
                .tempdir()?;
            let port = free_port()?;
            let clock = if options.clock_shift {
                Some(ClockOffset::new()?)
            } else {
                None
            };
            let node = RedisNode {
                port,
                options: options.clone(),
                process: ServerProcess::new(
                    format!("redis-server on port {port}"),
                    dir.path().join("redis.log"),
                ),
                clock,
                dir,
            };
            node.launch()?;
            Ok(node)
        })
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new("redis-server");
        let port = self.port.to_string();
        cmd.args(["--bind", "127.0.0.1", "--port", &port, "--daemonize", "no"])
            .args(["--save", ""])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--enable-debug-command", "local"])
            .args(self.options.persistence.args());
        if let Some(bytes) = self.options.maxmemory {
            cmd.arg("--maxmemory").arg(bytes.to_string());
        }
        if let Some(policy) = &self.options.maxmemory_policy {
            cmd.arg("--maxmemory-policy").arg(policy);
        }
        if let Some(primary) = self.options.replica_of {
            cmd.args(["--replicaof", "127.0.0.1"])
                .arg(primary.to_string());
        }
        cmd.args(&self.options.extra_args);
        if let Some(clock) = &self.clock {
            clock.apply(&mut cmd);
        }
        cmd.current_dir(self.dir.path());
        cmd
    }

    /// Spawns the process and waits until it answers `PING`.
    fn launch(&self) -> io::Result<()> {
        self.process
            .spawn(&mut self.command(), "apt-get install redis-server")?;
        let port = self.port;
        let loading_is_ready = self.options.ready_while_loading;
        let ready = self.process.wait_ready(START_TIMEOUT, || {
            match resp::command(port, &[b"PING"], Duration::from_secs(1)).and_then(|r| r.render()) {
                Ok(pong) => pong == "PONG",
                Err(e) => loading_is_ready && e.to_string().contains("LOADING"),
            }
        });
        if ready.is_err() {
            let _ = self.process.kill();
        }
        ready
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The TCP port, fixed for the node's life (also across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's pid while a process exists (running or paused).
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Whether a server process exists (a paused one counts).
    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// The node's working directory (AOF files, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The options the node was started with.
    pub fn options(&self) -> &RedisOptions {
        &self.options
    }

    /// Stops the server with SIGTERM and waits for it to exit (SIGKILL after
    /// 10 s). A no-op when it is not running.
    ///
    /// # Errors
    ///
    /// Fails when the process cannot be signalled or reaped.
    pub fn stop(&self) -> io::Result<()> {
        self.process.terminate(libc::SIGTERM, STOP_GRACE)
    }

    /// Kills the server with SIGKILL and reaps it: a crash. Without
    /// persistence every key is lost. A no-op when it is not running.
    ///
    /// # Errors
    ///
    /// Fails when the process cannot be reaped.
    pub fn kill(&self) -> io::Result<()> {
        self.process.kill()
    }

    /// Stops the server if it runs, then starts it again on the same port,
    /// in the same directory, with the same options, and waits until it
    /// answers. With AOF persistence the data comes back.
    ///
    /// # Errors
    ///
    /// Fails when the port stays taken by another process or the server
    /// does not come up; the error includes the log.
    pub fn restart(&self) -> io::Result<()> {
        self.stop()?;
        let mut tries = 0;
        retry_addr_in_use(10, || {
            if tries > 0 {
                thread::sleep(Duration::from_millis(200));
            }
            tries += 1;
            self.launch()
        })
    }

    /// Freezes the server with SIGSTOP: it keeps its connections but
    /// answers nothing, like a long GC pause or a partitioned host.
    ///
    /// # Errors
    ///
    /// Fails when the server is not running.
    pub fn pause(&self) -> io::Result<()> {
        self.process.signal(libc::SIGSTOP)
    }

    /// Continues a paused server with SIGCONT.
    ///
    /// # Errors
    ///
    /// Fails when the server is not running.
    pub fn resume(&self) -> io::Result<()> {
        self.process.signal(libc::SIGCONT)
    }

    /// Runs one command on a new connection and renders the reply: bulk
    /// strings as their content, integers as text, nil as `(nil)`, arrays
    /// newline-joined. Each step times out after 2 s.
    ///
    /// ```no_run
    /// # fn main() -> std::io::Result<()> {
    /// let node = fencelock_testkit::RedisNode::start()?;
    /// assert_eq!(node.cli(&["SET", "k", "v"])?, "OK");
    /// assert_eq!(node.cli(&["GET", "k"])?, "v");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Fails on connection errors, on a timeout (kind
    /// [`io::ErrorKind::TimedOut`], e.g. while paused), and when redis
    /// answers with an error reply (the message starts with
    /// `redis error:`).
    pub fn cli(&self, args: &[&str]) -> io::Result<String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        resp::command(self.port, &args, CLI_TIMEOUT)?.render()
    }

    /// The server's `run_id` (from `INFO server`): new at every start, so it tells one run of
    /// the node from the next.
    ///
    /// # Errors
    ///
    /// As [`RedisNode::cli`]; [`io::ErrorKind::InvalidData`] when the reply has no `run_id`.
    pub fn run_id(&self) -> io::Result<String> {
        let info = self.cli(&["INFO", "server"])?;
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|id| id.trim().to_string())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "INFO server has no run_id"))
    }

    /// The server's log so far (all runs, lossy UTF-8).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Path of the log file (stdout and stderr of every run).
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// Moves the server's wall clock to real time plus `offset_ms`
    /// milliseconds (negative: back). Takes effect on its next clock read.
    ///
    /// # Errors
    ///
    /// Fails when the node was not started with
    /// [`RedisOptions::clock_shift`], or the offset file cannot be written.
    pub fn set_clock_offset(&self, offset_ms: i64) -> io::Result<()> {
        self.clock_offset()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    "set_clock_offset needs a node started with RedisOptions::clock_shift(true)",
                )
            })?
            .set(offset_ms)
    }

    /// The node's clock offset, when started with
    /// [`RedisOptions::clock_shift`].
    pub fn clock_offset(&self) -> Option<&ClockOffset> {
        self.clock.as_ref()
    }
}
