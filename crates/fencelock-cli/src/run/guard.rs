//! The guard of `fencelock run`: the process between the supervisor and the command, which
//! keeps every process the command starts inside one tree and takes the whole tree down with
//! the supervisor.
//!
//! ```text
//! fencelock run (supervisor: lock, keeper, deadlines)
//!   └─ fencelock (guard: child subreaper)            <- control pipe from the supervisor
//!        └─ COMMAND (PDEATHSIG = SIGKILL)
//!             └─ ... every descendant, even one that called setsid or was orphaned
//! ```
//!
//! The guard leads a process group of its own, which the command inherits: a signal to the
//! supervisor's group (`kill -9 %1`, a job killed by its shell) reaches the supervisor, not the
//! guard, which then sees the pipe close. Signals to the command's group reach the guard too;
//! it catches the ones a terminal or the supervisor sends (SIGINT, SIGTERM, SIGHUP, SIGQUIT,
//! SIGTSTP, SIGTTIN, SIGTTOU) with handlers that do nothing, so it neither dies nor stops
//! (a stopped guard could not relay the deadline's SIGKILL).
//!
//! - The guard is a child subreaper (`PR_SET_CHILD_SUBREAPER`): a descendant whose parent
//!   exits is reparented to the guard instead of init, so the guard's subtree holds every
//!   process the command started, whatever process group or session it moved to. The guard
//!   reaps them all and exits only when none is left (`waitpid` says `ECHILD`), with the
//!   command's status: the supervisor keeps the lock, extended, until the guard exits.
//! - The supervisor's signals go through the control pipe: forward a signal to the command's
//!   process group (SIGINT, SIGTERM, SIGHUP sent to `fencelock run`), or send one to every
//!   descendant (the SIGTERM/SIGKILL deadline of a lock that is lost or running out).
//! - The supervisor also sends the SIGKILL time of the validity deadline, at the start and after
//!   every extension: the guard kills every descendant at that time by its own clock, so a
//!   supervisor that is stopped or starved cannot let the command outlive the lock (see
//!   `watchdog.rs`).
//! - When the supervisor dies, however it dies (kill -9, the OOM killer), the kernel closes its
//!   end of the pipe; the guard reads end-of-file and SIGKILLs every descendant before it exits.
//!   The pipe needs no thread to outlive anything, unlike `PR_SET_PDEATHSIG`, which fires when
//!   the *thread* that forked exits. The command itself also gets `PR_SET_PDEATHSIG(SIGKILL)`
//!   (the guard is single-threaded), so that it dies even if the guard is killed with SIGKILL.
//!   What remains unprotected is a SIGKILL to the guard alone while the supervisor lives: the
//!   supervisor, a child subreaper too, then receives the orphans and SIGKILLs them.
//!
//! Processes are found by their parent links in `/proc/<pid>/stat`: no cgroups, no privileges.
//!
//! On other Unix systems (macOS, the BSDs) there is no child subreaper, no
//! `PR_SET_PDEATHSIG` and no `/proc`. The guard then finds processes by their parent links in
//! `ps -A -o pid= -o ppid= -o stat=`, and what holds is less: a descendant that leaves the tree
//! (its parent exits and it is reparented to init) is no longer found, and a SIGKILL to the guard
//! alone leaves the command running. The pipe, the watchdog and the process group work as on
//! Linux, so a supervisor that dies or stops still takes down the command and the processes that
//! stay below it. `run --help` says so.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;
use std::time::Duration;

/// The hidden first argument that makes the binary a guard. Never typed by users.
pub(crate) const GUARD_ARG: &str = "__fencelock-run-guard";

/// Control messages: [`MSG_LEN`] bytes, an operation, a signal number and a time (nanoseconds
/// of `CLOCK_MONOTONIC`, little-endian, for [`KILL_AT`]). Each is one `write` below `PIPE_BUF`,
/// so the kernel never splits or interleaves one, and a read of a multiple of `MSG_LEN` bytes
/// returns whole messages.
const MSG_LEN: usize = 10;
const TO_GROUP: u8 = b'g';
const TO_ALL: u8 = b'a';
/// The watchdog's SIGKILL time (the signal byte is unused).
const KILL_AT: u8 = b'k';

/// Makes this process a child subreaper. Errors are ignored: on a kernel without it (before
/// 3.4) orphans go to init, as they did before.
#[cfg(target_os = "linux")]
pub(crate) fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag of this process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// No subreaper outside Linux: orphans go to init (see the module docs).
#[cfg(not(target_os = "linux"))]
pub(crate) fn become_subreaper() {}

/// A pipe whose two ends are close-on-exec.
#[cfg(target_os = "linux")]
fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fresh descriptors, both close-on-exec.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A pipe whose two ends are close-on-exec. Without `pipe2` the flag is set after the pipe is
/// made: a command another thread starts in between inherits the ends, and the guard then sees
/// the supervisor's end close only when that command exits too. `run` starts no other command.
#[cfg(not(target_os = "linux"))]
fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe fills two fresh descriptors.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here.
    let ends = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    for fd in [ends.0.as_raw_fd(), ends.1.as_raw_fd()] {
        // SAFETY: fcntl on a descriptor owned here.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(ends)
}

/// This binary, to start again as the guard. On Linux `/proc/self/exe` names the running file
/// even if it was replaced on disk since (an upgrade during a long run).
fn this_binary() -> std::io::Result<std::path::PathBuf> {
    if cfg!(target_os = "linux") {
        Ok("/proc/self/exe".into())
    } else {
        std::env::current_exe()
    }
}

/// Names the guard for `ps` and `top` (the kernel's name would be "exe", from /proc/self/exe).
#[cfg(target_os = "linux")]
fn name_this_process() {
    // SAFETY: PR_SET_NAME copies at most 16 bytes from a NUL-terminated string.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"fencelock-guard".as_ptr(), 0, 0, 0) };
}

/// Elsewhere the process keeps its `argv[0]`, "fencelock".
#[cfg(not(target_os = "linux"))]
fn name_this_process() {}

/// In the command, between fork and exec: die with the guard. Only async-signal-safe calls.
#[cfg(target_os = "linux")]
fn die_with_parent() -> std::io::Result<()> {
    // SAFETY: prctl is async-signal-safe.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// No parent-death signal outside Linux: a SIGKILL to the guard alone leaves the command.
#[cfg(not(target_os = "linux"))]
fn die_with_parent() -> std::io::Result<()> {
    Ok(())
}

/// The supervisor's side: the guard's process and the pipe that controls it.
#[derive(Debug)]
pub(crate) struct Guard {
    pub(crate) child: tokio::process::Child,
    pub(crate) control: Control,
}

/// The supervisor's end of the control pipe.
#[derive(Debug)]
pub(crate) struct Control(OwnedFd);

impl Guard {
    /// Starts the guard, which starts `program args` and SIGKILLs it at `kill_at` unless told a
    /// later time ([`Control::kill_at`]); `env` sets (`Some`) or removes (`None`) variables of
    /// the environment both inherit.
    ///
    /// # Errors
    ///
    /// The I/O error of creating the pipe or starting this binary again.
    pub(crate) fn spawn(
        program: &OsStr,
        args: &[OsString],
        env: &[(&str, Option<OsString>)],
        kill_at: std::time::Instant,
    ) -> std::io::Result<Guard> {
        let (read, write) = cloexec_pipe()?;
        // The supervisor must never block on a guard that does not read.
        // SAFETY: fcntl on our own descriptor.
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        let control = Control(write);
        // In the pipe before the guard exists: the guard reads it before it starts the command,
        // so no stop of the supervisor can leave the command without a deadline.
        control.kill_at(kill_at);
        let read_fd = read.as_raw_fd();
        let mut cmd = tokio::process::Command::new(this_binary()?);
        cmd.arg0("fencelock")
            .arg(GUARD_ARG)
            .arg(read_fd.to_string())
            .arg(program)
            .args(args)
            .process_group(0)
            .kill_on_drop(false);
        for (name, value) in env {
            match value {
                Some(v) => cmd.env(name, v),
                None => cmd.env_remove(name),
            };
        }
        // SAFETY: the closure runs between fork and exec and only calls fcntl, which is
        // async-signal-safe, to let the read end survive the exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(read_fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // tokio forks in the calling thread; the guard does not depend on which one (see the
        // module docs).
        let child = cmd.spawn()?;
        drop(read);
        Ok(Guard { child, control })
    }
}

impl Control {
    /// Sends `sig` to the command's process group (forwarded signals).
    pub(crate) fn signal_group(&self, sig: i32) {
        self.send(TO_GROUP, sig);
    }

    /// Sends `sig` to every process the command started (the deadline's SIGTERM and SIGKILL).
    pub(crate) fn signal_all(&self, sig: i32) {
        self.send(TO_ALL, sig);
    }

    /// Sets the time at which the guard SIGKILLs every process the command started, by its own
    /// clock, unless a later time comes first: the stop of a supervisor that cannot send it.
    pub(crate) fn kill_at(&self, at: std::time::Instant) {
        self.write(KILL_AT, 0, super::watchdog::at_ns(at));
    }

    fn send(&self, op: u8, sig: i32) {
        self.write(op, sig, 0);
    }

    fn write(&self, op: u8, sig: i32, at_ns: u64) {
        let mut msg = [0u8; MSG_LEN];
        msg[0] = op;
        msg[1] = u8::try_from(sig).unwrap_or(libc::SIGKILL as u8);
        msg[2..].copy_from_slice(&at_ns.to_le_bytes());
        // A full pipe or a gone guard: nothing better to do; the guard's exit is what counts.
        // SAFETY: writes two bytes from a live buffer to our own descriptor.
        unsafe { libc::write(self.0.as_raw_fd(), msg.as_ptr().cast(), msg.len()) };
    }
}

/// After the guard exited: SIGKILLs and reaps whatever is left below this process (orphans of a
/// guard that was itself killed) and returns how many processes that were.
pub(crate) fn kill_leftovers() -> usize {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let killed = kill_tree(me, libc::SIGKILL, true);
    reap_all();
    killed
}

/// The guard's `main`, when the binary was started as one.
pub(crate) fn main_if_guard() -> Option<ExitCode> {
    let mut argv = std::env::args_os().skip(1);
    if argv.next().as_deref() != Some(OsStr::new(GUARD_ARG)) {
        return None;
    }
    let control: Option<RawFd> = argv
        .next()
        .and_then(|fd| fd.to_str()?.parse().ok())
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        .filter(|fd| unsafe { libc::fcntl(*fd, libc::F_GETFD) } >= 0);
    let (Some(control), Some(program)) = (control, argv.next()) else {
        eprintln!("fencelock: error: {GUARD_ARG} is internal to `fencelock run`");
        return Some(ExitCode::from(crate::exit::USAGE));
    };
    let args: Vec<OsString> = argv.collect();
    Some(ExitCode::from(guard(control, &program, &args)))
}

extern "C" fn ignore(_: libc::c_int) {}

fn guard(control: RawFd, program: &OsStr, args: &[OsString]) -> u8 {
    become_subreaper();
    name_this_process();
    keep_control_and_outlive_signals(control);
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let mut watchdog = super::watchdog::Watchdog::default();
    // The first deadline was written before the guard started (`Guard::spawn`).
    let Some(first) = next_orders(control, 0) else {
        return 137;
    };
    for (op, sig, at) in first {
        obey(me, op, sig, at, &mut watchdog);
    }
    let child = match spawn_command(program, args, me) {
        Ok(child) => child,
        Err(err) => {
            let failure = crate::run::spawn_failure(&program.to_os_string(), &err);
            eprintln!("fencelock: error: {}", failure.message);
            return failure.code;
        }
    };
    let mut reaper = Reaper {
        command: i32::try_from(child.id()).unwrap_or(0),
        status: None,
    };
    loop {
        if let Some(code) = reaper.reap() {
            return code;
        }
        if watchdog.due(super::watchdog::now_ns()) {
            // The supervisor did not move the deadline in time: stopped, starved or hung.
            kill_tree(me, libc::SIGKILL, true);
            continue;
        }
        // A short wait: exits are found by waitpid, the deadline by the clock.
        let wait = watchdog.wait_ms(super::watchdog::now_ns(), Duration::from_millis(20));
        let Some(orders) = next_orders(control, wait) else {
            // The supervisor is gone, and with it the lock's keeper: nothing may run on.
            kill_tree(me, libc::SIGKILL, true);
            reap_all();
            return 137;
        };
        for (op, sig, at) in orders {
            obey(me, op, sig, at, &mut watchdog);
        }
    }
}

/// Keeps the inherited read end of the control pipe out of the command and non-blocking, and
/// installs signal handlers that do nothing. Handlers, unlike SIG_IGN, are reset by exec, so
/// the command gets the default dispositions; the guard itself must outlive a Ctrl-C or a
/// SIGTERM sent to the supervisor's process group, to go on tracking the command's processes.
fn keep_control_and_outlive_signals(control: RawFd) {
    // SAFETY: plain descriptor flags on the inherited read end, and signal handlers that do
    // nothing.
    unsafe {
        libc::fcntl(control, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(control, libc::F_SETFL, libc::O_NONBLOCK);
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            libc::signal(
                sig,
                ignore as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
        // A handler, not the default (discard), so that a child's exit interrupts the poll
        // in `next_orders` and is reaped at once instead of at the poll's timeout.
        libc::signal(
            libc::SIGCHLD,
            ignore as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

/// Starts the command in the guard's process group (see the module docs), to die with the
/// guard (`me`).
fn spawn_command(
    program: &OsStr,
    args: &[OsString],
    me: i32,
) -> std::io::Result<std::process::Child> {
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    // SAFETY: prctl and getppid are async-signal-safe; the check closes the race in which
    // the guard died before the flag was set.
    unsafe {
        cmd.pre_exec(move || {
            die_with_parent()?;
            if libc::getppid() != me {
                libc::_exit(137);
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Reaps the guard's exited descendants, keeping the command's own status.
#[derive(Debug)]
struct Reaper {
    command: i32,
    status: Option<u8>,
}

impl Reaper {
    /// Reaps every exited descendant; once none is left, the guard's exit code (the command's).
    fn reap(&mut self) -> Option<u8> {
        loop {
            let mut raw = 0;
            // SAFETY: waitpid on our own children, without blocking.
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid > 0 {
                if pid == self.command {
                    self.status = Some(crate::run::status_code(
                        std::os::unix::process::ExitStatusExt::from_raw(raw),
                    ));
                }
                continue;
            }
            if pid < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
                return Some(self.status.unwrap_or(crate::exit::INTERNAL));
            }
            return None;
        }
    }
}

/// Waits up to `wait_ms` for the supervisor's orders, `(op, signal, time)` triples (none when it
/// sent none); `None` when the supervisor is gone.
fn next_orders(control: RawFd, wait_ms: i32) -> Option<Vec<(u8, i32, u64)>> {
    let mut pfd = libc::pollfd {
        fd: control,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polls one live descriptor.
    unsafe { libc::poll(&mut pfd, 1, wait_ms.max(0)) };
    let mut msg = [0u8; MSG_LEN * 16];
    // SAFETY: reads into a live buffer from our own descriptor.
    let n = unsafe { libc::read(control, msg.as_mut_ptr().cast(), msg.len()) };
    if n == 0 {
        return None;
    }
    let n = usize::try_from(n).unwrap_or(0);
    Some(
        msg[..n]
            .chunks_exact(MSG_LEN)
            .map(|m| {
                let mut at = [0u8; 8];
                at.copy_from_slice(&m[2..]);
                (m[0], i32::from(m[1]), u64::from_le_bytes(at))
            })
            .collect(),
    )
}

/// Carries out one order: `sig` to the command's process group, or to every process below the
/// guard (`me`), or a new SIGKILL time for the watchdog.
fn obey(me: i32, op: u8, sig: i32, at_ns: u64, watchdog: &mut super::watchdog::Watchdog) {
    match op {
        KILL_AT => watchdog.set(at_ns),
        TO_GROUP => {
            // SAFETY: signals our own process group, the command's (we ignore it).
            unsafe { libc::kill(-me, sig) };
        }
        TO_ALL => {
            kill_tree(me, sig, sig == libc::SIGKILL);
        }
        _ => {}
    }
}

/// Sends `sig` to every live descendant of `root`. With `until_none`, scans again until no live
/// descendant is left (a process may fork between the scan and the signal).
fn kill_tree(root: i32, sig: i32, until_none: bool) -> usize {
    let mut signalled = std::collections::HashSet::new();
    for _ in 0..200 {
        let found = descendants(root);
        let fresh: Vec<i32> = if until_none {
            found.clone()
        } else {
            found
                .iter()
                .copied()
                .filter(|p| !signalled.contains(p))
                .collect()
        };
        for pid in &fresh {
            // SAFETY: signals a process found below us in the process tree.
            unsafe { libc::kill(*pid, sig) };
            signalled.insert(*pid);
        }
        if !until_none || found.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    signalled.len()
}

/// Reaps every child until none is left, waiting for each.
fn reap_all() {
    loop {
        let mut raw = 0;
        // SAFETY: waitpid on our own children.
        let pid = unsafe { libc::waitpid(-1, &mut raw, 0) };
        if pid <= 0 {
            let again = std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
            if !again {
                return;
            }
        }
    }
}

/// Every process's parent link: `(pid, parent, zombie)`, from `/proc`.
#[cfg(target_os = "linux")]
fn parent_links() -> Vec<(i32, i32, bool)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut links = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some((ppid, zombie)) = parent_of(pid) {
            links.push((pid, ppid, zombie));
        }
    }
    links
}

/// Every process's parent link: `(pid, parent, zombie)`, from `ps`, where there is no `/proc`.
#[cfg(not(target_os = "linux"))]
fn parent_links() -> Vec<(i32, i32, bool)> {
    let Ok(out) = std::process::Command::new("ps")
        .args(["-A", "-o", "pid=", "-o", "ppid=", "-o", "stat="])
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    parse_ps(&String::from_utf8_lossy(&out.stdout))
}

/// `ps -o pid= -o ppid= -o stat=` lines as parent links; a state starting with `Z` is a zombie.
#[cfg(any(test, not(target_os = "linux")))]
fn parse_ps(text: &str) -> Vec<(i32, i32, bool)> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let pid = f.next()?.parse().ok()?;
            let ppid = f.next()?.parse().ok()?;
            let zombie = f.next().is_some_and(|s| s.starts_with('Z'));
            Some((pid, ppid, zombie))
        })
        .collect()
}

/// The live (not zombie) descendants of `root`, from every process's parent link.
fn descendants(root: i32) -> Vec<i32> {
    let links = parent_links();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid, zombie) in &links {
            if ppid == parent && pid != root {
                frontier.push(pid);
                if !zombie {
                    found.push(pid);
                }
            }
        }
    }
    found
}

/// The parent of `pid` and whether it is a zombie, from `/proc/<pid>/stat`.
#[cfg(target_os = "linux")]
fn parent_of(pid: i32) -> Option<(i32, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state == "Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_grandchild_and_its_parent_link() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        let me = i32::try_from(std::process::id()).unwrap();
        let sh = i32::try_from(child.id()).unwrap();
        // Other tests of this binary start processes too: look below `sh` for the sleeper.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut below_sh = descendants(sh);
        while below_sh.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            below_sh = descendants(sh);
        }
        let below = descendants(me);
        assert!(below.contains(&sh), "{below:?}");
        assert_eq!(parent_of(sh).map(|(p, _)| p), Some(me));
        let [sleeper] = below_sh[..] else {
            panic!("below sh: {below_sh:?}");
        };
        assert!(below.contains(&sleeper), "{below:?}");
        assert_eq!(parent_of(sleeper).map(|(p, _)| p), Some(sh));
        assert_eq!(kill_tree(sh, libc::SIGKILL, true), 1);
        // SAFETY: kills our own child.
        unsafe { libc::kill(sh, libc::SIGKILL) };
        child.wait().unwrap();
    }

    /// The parent links the guard reads from `ps` where there is no `/proc` (macOS, the BSDs)
    /// are the ones `/proc` gives: checked here against `ps` itself.
    #[test]
    fn ps_gives_the_parent_links_proc_gives() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = i32::try_from(std::process::id()).unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let out = std::process::Command::new("ps")
            .args(["-A", "-o", "pid=", "-o", "ppid=", "-o", "stat="])
            .output()
            .expect("ps (procps) runs: scripts/install-deps.sh installs it");
        let links = parse_ps(&String::from_utf8_lossy(&out.stdout));
        assert!(links.contains(&(pid, me, false)), "{links:?}");
        assert_eq!(parent_of(pid), Some((me, false)));
        assert_eq!(
            parse_ps("  12     1 Ss\n  40    12 Z+\nPID PPID STAT\n"),
            vec![(12, 1, false), (40, 12, true)]
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
