//! One supervised server process: spawn, signal, reap, and keep its log.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// How many log lines a failing test shows per server.
const PANIC_LOG_LINES: usize = 40;

/// How long a graceful stop may take before the process is killed.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);

/// A server process the kit owns.
///
/// All methods take `&self` (the child sits behind a mutex) so that tests can
/// pause or kill a server from one thread while clients run in others.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    name: String,
    log_path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    child: Option<Child>,
    /// Length of the log when the current child was spawned, so that start
    /// errors look only at what this child wrote.
    log_start: u64,
}

impl ServerProcess {
    /// A supervisor with no process yet; output goes to `log_path`.
    pub(crate) fn new(name: impl Into<String>, log_path: impl Into<PathBuf>) -> Self {
        ServerProcess {
            name: name.into(),
            log_path: log_path.into(),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state usable: it only
        // holds the child handle.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Path of the file that collects the process's stdout and stderr.
    pub(crate) fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Spawns `cmd` with stdout and stderr appended to the log.
    ///
    /// `install_hint` completes the "not found" message, e.g.
    /// `"apt-get install redis-server"`.
    pub(crate) fn spawn(&self, cmd: &mut Command, install_hint: &str) -> io::Result<()> {
        let mut state = self.state();
        if let Some(child) = state.child.as_mut() {
            if child.try_wait()?.is_none() {
                return Err(io::Error::other(format!(
                    "{} is already running",
                    self.name
                )));
            }
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot open log file {}: {e}", self.log_path.display()),
                )
            })?;
        let log_start = log.metadata()?.len();
        let log_err = log.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(log).stderr(log_err);
        let child = cmd.spawn().map_err(|e| {
            let program = cmd.get_program().to_string_lossy().into_owned();
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    e.kind(),
                    format!("{program} not found on PATH: {install_hint}"),
                )
            } else {
                io::Error::new(e.kind(), format!("cannot start {program}: {e}"))
            }
        })?;
        state.child = Some(child);
        state.log_start = log_start;
        Ok(())
    }

    /// The pid of the process while it exists (running or paused).
    pub(crate) fn pid(&self) -> Option<u32> {
        let mut state = self.state();
        let child = state.child.as_mut()?;
        match child.try_wait() {
            Ok(None) => Some(child.id()),
            _ => None,
        }
    }

    /// Whether the process exists (a paused process counts as running).
    pub(crate) fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// The exit status if the process has exited (reaping it).
    pub(crate) fn exit_status(&self) -> Option<ExitStatus> {
        let mut state = self.state();
        state
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Sends `sig` to the process. For `SIGSTOP`, returns once every thread has stopped:
    /// kill(2) returns before the threads of a multi-threaded server (etcd's Go runtime) have
    /// all reached the stop, and on a loaded machine one of them answered a request sent right
    /// after the kill (seen in CI: an acquire granted by an etcd "paused" a moment before).
    pub(crate) fn signal(&self, sig: libc::c_int) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other(format!("{} is not running", self.name)))?;
        send_signal(pid, sig)?;
        if sig == libc::SIGSTOP {
            wait_until_stopped(pid, &self.name)?;
        }
        Ok(())
    }

    /// Stops the process with `sig`, waits up to `grace`, then kills it.
    /// A no-op when nothing is running.
    pub(crate) fn terminate(&self, sig: libc::c_int, grace: Duration) -> io::Result<()> {
        let mut state = self.state();
        let Some(child) = state.child.as_mut() else {
            return Ok(());
        };
        if child.try_wait()?.is_some() {
            state.child = None;
            return Ok(());
        }
        let pid = child.id();
        // A stopped process would hold the signal until continued.
        let _ = send_signal(pid, libc::SIGCONT);
        send_signal(pid, sig)?;
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if child.try_wait()?.is_some() {
                state.child = None;
                return Ok(());
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        child.wait()?;
        state.child = None;
        Ok(())
    }

    /// SIGKILLs the process and reaps it. A no-op when nothing is running.
    pub(crate) fn kill(&self) -> io::Result<()> {
        let mut state = self.state();
        let Some(mut child) = state.child.take() else {
            return Ok(());
        };
        if child.try_wait()?.is_none() {
            let _ = send_signal(child.id(), libc::SIGCONT);
            let _ = child.kill();
            child.wait()?;
        }
        Ok(())
    }

    /// Waits until `probe` answers true, the process exits, or `timeout`.
    ///
    /// An exit whose log mentions "address already in use" becomes an
    /// [`io::ErrorKind::AddrInUse`] error so that callers can retry on
    /// another port.
    pub(crate) fn wait_ready(
        &self,
        timeout: Duration,
        mut probe: impl FnMut() -> bool,
    ) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_exited()?;
            if probe() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} did not become ready within {timeout:?}; log:\n{}",
                        self.name,
                        self.log_tail(PANIC_LOG_LINES)
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// An error describing the exit if the process exited (it was expected
    /// to be running). The kind is [`io::ErrorKind::AddrInUse`] when the log
    /// written since the spawn mentions "address already in use".
    pub(crate) fn check_exited(&self) -> io::Result<()> {
        let Some(status) = self.exit_status() else {
            return Ok(());
        };
        let log = self.log_since_spawn();
        let kind = if log.to_ascii_lowercase().contains("address already in use") {
            io::ErrorKind::AddrInUse
        } else {
            io::ErrorKind::Other
        };
        Err(io::Error::new(
            kind,
            format!(
                "{} exited during start-up ({status}); log:\n{}",
                self.name,
                tail(&log, PANIC_LOG_LINES)
            ),
        ))
    }

    /// The whole log (lossy UTF-8); empty if it cannot be read.
    pub(crate) fn log(&self) -> String {
        read_lossy(&self.log_path, 0)
    }

    fn log_since_spawn(&self) -> String {
        let start = self.state().log_start;
        read_lossy(&self.log_path, start)
    }

    /// The last `lines` lines of the log.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        tail(&self.log(), lines)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.kill();
        if thread::panicking() {
            eprintln!(
                "----- last {PANIC_LOG_LINES} log lines of {} ({}) -----\n{}\n----- end of log -----",
                self.name,
                self.log_path.display(),
                self.log_tail(PANIC_LOG_LINES)
            );
        }
    }
}

/// Sends `sig` to `pid`.
pub(crate) fn send_signal(pid: u32, sig: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits (up to 10 s) until every thread of `pid` is in the stopped state (`T` in
/// `/proc/PID/task/TID/stat`).
fn wait_until_stopped(pid: u32, name: &str) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if all_threads_stopped(pid)? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::other(format!(
                "{name} (pid {pid}) still has running threads 10 s after SIGSTOP"
            )));
        }
        thread::sleep(Duration::from_millis(1));
    }
}

fn all_threads_stopped(pid: u32) -> io::Result<bool> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let stat = match std::fs::read_to_string(task?.path().join("stat")) {
            Ok(stat) => stat,
            // A thread that exited meanwhile is not running.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        // The state follows the command name, which is in parentheses and may hold spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if !matches!(state, Some("T" | "t")) {
            return Ok(false);
        }
    }
    Ok(true)
}

fn read_lossy(path: &Path, from: u64) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    if file.seek(SeekFrom::Start(from)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `attempt` until it succeeds or fails with something other than
/// "address in use", up to `tries` times.
pub(crate) fn retry_addr_in_use<T>(
    tries: usize,
    mut attempt: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    let mut last = None;
    for _ in 0..tries.max(1) {
        match attempt() {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
            other => return other,
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no start attempt was made")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }

    #[test]
    fn retry_stops_on_other_errors() {
        let mut calls = 0;
        let r: io::Result<()> = retry_addr_in_use(5, || {
            calls += 1;
            Err(io::Error::new(io::ErrorKind::AddrInUse, "x"))
        });
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::AddrInUse);
        assert_eq!(calls, 5);
        let mut calls = 0;
        let r: io::Result<()> = retry_addr_in_use(5, || {
            calls += 1;
            Err(io::Error::other("y"))
        });
        assert!(r.is_err());
        assert_eq!(calls, 1);
    }
}
