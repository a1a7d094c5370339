//! `fencelock run`: hold a lock while a command runs.
//!
//! The command runs under a guard process (see `guard.rs`), a child subreaper that keeps every
//! process the command starts in its subtree (background jobs, daemons that call setsid) and
//! exits when the last of them has exited: the lock is held, extended, until then, as flock(1)
//! holds its lock while any process that inherited it runs. A lock that is lost while a
//! grandchild keeps working protects nothing. The lock is a library `LockGuard`: the library's
//! extension engine extends it every TTL/3 and retries failed extensions within the validity
//! left, by the same rule as every auto-extended lock. The supervisor loop here owns the kill
//! clock: it sends SIGTERM to every process of the command at `validity deadline - margin -
//! grace` unless an extension moved the deadline, and SIGKILL at `validity deadline - margin`,
//! so they are dead before the keys can expire on a majority; the guard's lost signal (no
//! quorum holds the lock any more) sends SIGTERM at once. The supervisor never waits on a node:
//! the engine does, so a hung extension cannot delay the kill. If the supervisor itself dies,
//! the guard kills them all at once; if it is stopped or starved, the guard's watchdog sends the
//! SIGKILL at its time all the same (`run/watchdog.rs`), from the deadline of the last extension.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use fencelock::{AutoExtend, Client, ErrorKind, LockGuard, LostCause};
use tokio::signal::unix::{signal, SignalKind};

use self::guard::Guard;
use crate::cli::human;
use crate::exit::{self, Failure};
use crate::hold::Hold;
use crate::settings::Settings;
use crate::settings::WaitMode;

pub(crate) mod guard;
mod watchdog;

/// Largest default grace between SIGTERM and SIGKILL.
const MAX_DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// What `run` was asked to do.
#[derive(Debug)]
pub(crate) struct RunPlan {
    pub(crate) resource: String,
    pub(crate) command: Vec<OsString>,
    pub(crate) wait: WaitMode,
    pub(crate) fencing: bool,
    pub(crate) grace: Option<Duration>,
    /// `--min-hold`: the lock is not released sooner than this after the grant.
    pub(crate) min_hold: Option<Duration>,
    /// What the command runs under: the exclusive lock, a shared lock, a permit, or the
    /// leadership.
    pub(crate) hold: Hold,
}

/// The default grace: the smaller of 5 s and TTL/4.
pub(crate) fn default_grace(ttl: Duration) -> Duration {
    (ttl / 4).min(MAX_DEFAULT_GRACE)
}

/// How long before the validity deadline SIGKILL is sent: room for the kernel to tear the
/// group down. The deadline itself already has the clock drift taken off.
pub(crate) fn kill_margin(ttl: Duration) -> Duration {
    (ttl / 20).min(Duration::from_millis(250))
}

/// When SIGTERM and SIGKILL are due for a validity deadline. No I/O.
pub(crate) fn stop_schedule(
    deadline: Instant,
    grace: Duration,
    margin: Duration,
) -> (Instant, Instant) {
    let kill_at = deadline.checked_sub(margin).unwrap_or(deadline);
    let term_at = kill_at.checked_sub(grace).unwrap_or(kill_at);
    (term_at, kill_at)
}

/// Checks `--grace` against the TTL.
///
/// # Errors
///
/// A usage failure when the grace leaves no time for an extension to fail and be retried.
pub(crate) fn check_grace(grace: Duration, ttl: Duration) -> Result<(), Failure> {
    // An extension is due at TTL/3; SIGTERM must come later than that, or every run would be
    // stopped before its first extension could even fail.
    if grace + kill_margin(ttl) >= ttl / 2 {
        return Err(Failure::usage(format!(
            "--grace {} is too long for a TTL of {}: SIGTERM would come before the lock could be extended; use at most {} or raise --ttl",
            humantime::format_duration(grace),
            humantime::format_duration(ttl),
            humantime::format_duration(default_grace(ttl))
        )));
    }
    Ok(())
}

/// The exit code a shell would report for a status: the code, or 128 + the signal.
pub(crate) fn status_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        // Exit codes are 0..=255 on Unix; the mask only makes the conversion total.
        (code & 0xff) as u8
    } else if let Some(sig) = status.signal() {
        128u8.saturating_add(u8::try_from(sig).unwrap_or(127))
    } else {
        exit::INTERNAL
    }
}

/// Sends `sig` to the process group `pgid`; a group that is already gone is not an error.
fn signal_group(pgid: i32, sig: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative PID signals a process group we created.
        unsafe { libc::kill(-pgid, sig) };
    }
}

/// The terminal handed to the command's process group, so that it can read from it and get
/// the terminal's Ctrl-C directly; given back when the command exits.
#[derive(Debug)]
struct Foreground {
    ours: libc::pid_t,
}

fn with_ttou_ignored<T>(f: impl FnOnce() -> T) -> T {
    // tcsetpgrp from a background group raises SIGTTOU, which would stop us.
    // SAFETY: signal(2) swaps the disposition of SIGTTOU, restored right after.
    let old = unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
    let out = f();
    // SAFETY: as above.
    unsafe { libc::signal(libc::SIGTTOU, old) };
    out
}

impl Foreground {
    fn hand_to(pgid: i32) -> Option<Foreground> {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return None;
        }
        // SAFETY: plain queries of our process group and the terminal's foreground group.
        let ours = unsafe { libc::getpgrp() };
        if unsafe { libc::tcgetpgrp(0) } != ours {
            return None;
        }
        // SAFETY: fd 0 is a terminal whose foreground group is ours.
        let rc = with_ttou_ignored(|| unsafe { libc::tcsetpgrp(0, pgid) });
        // The command may have been stopped by SIGTTIN before it had the terminal.
        signal_group(pgid, libc::SIGCONT);
        (rc == 0).then_some(Foreground { ours })
    }

    fn restore(self) {
        // SAFETY: gives the terminal back to the group that had it.
        with_ttou_ignored(|| unsafe { libc::tcsetpgrp(0, self.ours) });
    }
}

pub(crate) fn spawn_failure(program: &OsString, err: &std::io::Error) -> Failure {
    let name = program.to_string_lossy();
    match err.kind() {
        std::io::ErrorKind::NotFound => Failure::new(
            exit::NOT_FOUND,
            format!("command {name:?} not found; check its name, or give its full path (PATH is searched)"),
        ),
        std::io::ErrorKind::PermissionDenied => Failure::new(
            exit::CANNOT_EXECUTE,
            format!("command {name:?} cannot be executed: permission denied; check that it is an executable file"),
        ),
        _ => Failure::new(exit::CANNOT_EXECUTE, format!("command {name:?} cannot be executed: {err}")),
    }
}

/// Starts the command under its guard, with the lock's resource (and fencing token, or for a
/// shared lock the last writer's) in its environment.
fn start_command(
    program: &OsString,
    args: &[OsString],
    resource: &str,
    (fencing_token, last_writer): (Option<u64>, Option<u64>),
    kill_at: Instant,
) -> std::io::Result<Guard> {
    let env = [
        ("FENCELOCK_RESOURCE", Some(OsString::from(resource))),
        // An outer `fencelock run --fencing` must not leak its token into this command.
        (
            "FENCELOCK_TOKEN",
            fencing_token.map(|t| OsString::from(t.to_string())),
        ),
        (
            "FENCELOCK_LAST_WRITER_TOKEN",
            last_writer.map(|t| OsString::from(t.to_string())),
        ),
    ];
    Guard::spawn(program, args, &env, kill_at)
}

/// `fencelock run`.
///
/// # Errors
///
/// 75 not acquired, 69 nodes unavailable, 76 lock lost (the command was stopped), 126/127 the
/// command could not be started, 2 bad arguments or a resource key that holds no lock; 128 + N
/// (as `Ok`) for a signal N while waiting for the lock.
pub(crate) async fn run(settings: &Settings, plan: RunPlan) -> anyhow::Result<u8> {
    let ttl = settings.ttl;
    let grace = plan.grace.unwrap_or_else(|| default_grace(ttl));
    check_grace(grace, ttl)?;
    let margin = kill_margin(ttl);
    let resource = plan.resource.as_str();
    let (program, args) = split_command(&plan.command)?;

    // Install the handlers before taking the lock, so that a signal in between is not lost to
    // the default action (which would leave the keys to the TTL).
    let mut signals = Signals::install()?;

    // Orphans of the command's processes come to us if the guard itself is killed.
    guard::become_subreaper();
    let client = settings.client(plan.fencing).await?;
    // A signal ends the wait at once: a stop by systemd or Kubernetes must not hang behind the
    // holder. Dropping the wait takes it out of the line (`Client::close` waits for that), and
    // the command never starts.
    let lock = tokio::select! {
        biased;
        sig = signals.recv() => return Ok(stopped_waiting(&client, resource, sig).await),
        lock = plan.hold.take(&client, settings, resource, plan.wait) => lock?,
    };
    // A signal that came with the grant: the command must not start either.
    if let Some(sig) = signals.pending() {
        let _ = lock.release().await;
        return Ok(stopped_waiting(&client, resource, sig).await);
    }

    // No later than the grant: the minimum hold counts from here.
    let granted_at = Instant::now();
    // The library's extension engine keeps the lock from here on; its lost signal fires at
    // the kill time (the margin), or at once when no quorum holds the lock any more.
    let lock = lock.auto_extend(
        AutoExtend::new()
            .with_interval(ttl / 3)
            .with_safety_margin(margin),
    );
    let tokens = (
        lock.fencing_token().map(|t| t.value()),
        lock.last_writer_token(),
    );
    let Guard {
        mut child,
        control: guard,
    } = match start_command(
        program,
        args,
        resource,
        tokens,
        stop_schedule(lock.validity_deadline(), grace, margin).1,
    ) {
        Ok(guard) => guard,
        Err(err) => {
            let failure =
                Failure::internal(format!("cannot start the guard of the command: {err}"));
            let_go(lock, &client).await;
            return Err(failure.into());
        }
    };
    let foreground = Foreground::hand_to(group_of(&child));

    let mut supervisor = Supervisor::new(lock.validity_deadline(), grace, margin);
    let status = supervisor
        .watch(&mut child, &guard, &lock, &mut signals, resource)
        .await;
    let exited_at = Instant::now();
    if let Some(fg) = foreground {
        fg.restore();
    }
    supervisor.check_after_exit(exited_at);
    if let Some(why) = supervisor.lost.take() {
        let_go(lock, &client).await;
        let signals = (supervisor.term_sent, supervisor.kill_sent);
        return Err(lost_failure(resource, &why, signals, grace).into());
    }

    let status =
        status.map_err(|e| Failure::internal(format!("waiting for the command failed: {e}")))?;
    let code = status_code(status);
    if let Some(min_hold) = plan.min_hold {
        let until = granted_at + min_hold;
        if !hold_until(&lock, until, &mut signals, resource).await {
            // Stopped during the minimum hold: the lock is left to expire, not released.
            std::mem::forget(lock);
            return Ok(code);
        }
    }
    let code = release_after_exit(lock, resource, code, ttl).await;
    // The release returned at a quorum: let it reach the other nodes before the process ends.
    client.close().await;
    Ok(code)
}

/// `--min-hold`: keeps the (auto-extended) lock until `until`. False when a signal ended the
/// wait first: the caller then leaves the lock to expire, as no release may come before
/// `until`. A lock lost meanwhile is reported, and the wait ends.
async fn hold_until(
    lock: &LockGuard,
    until: Instant,
    signals: &mut Signals,
    resource: &str,
) -> bool {
    let lost = lock.lost();
    tokio::select! {
        () = tokio::time::sleep_until(until.into()) => true,
        () = lost.fired() => {
            eprintln!(
                "fencelock: warning: lock {resource:?} was lost during --min-hold, {} before its end: another run may start before then",
                human(until.saturating_duration_since(Instant::now()))
            );
            true
        }
        sig = signals.recv() => {
            eprintln!(
                "fencelock: {} during --min-hold: lock {resource:?} is left to expire by its TTL",
                signal_name(sig)
            );
            false
        }
    }
}

/// The program and its arguments.
fn split_command(command: &[OsString]) -> Result<(&OsString, &[OsString]), Failure> {
    command.split_first().ok_or_else(|| {
        Failure::usage(
            "no command given: write it after the resource, e.g. fencelock run job -- ./backup.sh",
        )
    })
}

/// The process group of the command: the guard leads it (0 when it has no id any more).
fn group_of(guard: &tokio::process::Child) -> i32 {
    guard
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0)
}

/// Gives the lock up after the command could not run or its lock was lost.
async fn let_go(lock: LockGuard, client: &Client) {
    let _ = lock.release().await;
    client.close().await;
}

/// After a signal while waiting: the place in line and any lock let go, the exit code a shell
/// gives a process killed by `sig` (128 + N).
async fn stopped_waiting(client: &Client, resource: &str, sig: i32) -> u8 {
    client.close().await;
    eprintln!(
        "fencelock: {} while waiting for lock {resource:?}: stopped waiting; the command was not run",
        signal_name(sig)
    );
    128u8.saturating_add(u8::try_from(sig).unwrap_or(127))
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// The signals `run` passes on to its command.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next of them to arrive.
    async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }

    /// One that already arrived, without waiting.
    fn pending(&mut self) -> Option<i32> {
        futures_util::FutureExt::now_or_never(self.recv())
    }
}

/// The supervisor's kill clock: when SIGTERM and SIGKILL are due for the current validity
/// deadline, what was sent, and why the lock counts as lost once it does.
#[derive(Debug)]
struct Supervisor {
    deadline: Instant,
    term_at: Instant,
    kill_at: Instant,
    grace: Duration,
    margin: Duration,
    term_sent: bool,
    kill_sent: bool,
    /// A warning about failing extensions was printed since the last success.
    warned: bool,
    lost: Option<String>,
}

impl Supervisor {
    fn new(deadline: Instant, grace: Duration, margin: Duration) -> Supervisor {
        let (term_at, kill_at) = stop_schedule(deadline, grace, margin);
        Supervisor {
            deadline,
            term_at,
            kill_at,
            grace,
            margin,
            term_sent: false,
            kill_sent: false,
            warned: false,
            lost: None,
        }
    }

    /// An extension moved the deadline: the stop moves with it, unless it has begun.
    fn extended(&mut self, deadline: Instant) {
        if self.lost.is_some() || self.term_sent {
            return;
        }
        self.deadline = deadline;
        (self.term_at, self.kill_at) = stop_schedule(deadline, self.grace, self.margin);
        self.warned = false;
    }

    /// Runs the kill clock until the command's guard exits: SIGTERM and SIGKILL when they are
    /// due, at once when the lock is lost, rescheduled by each extension; the signals run
    /// receives go to the command.
    async fn watch(
        &mut self,
        child: &mut tokio::process::Child,
        guard: &guard::Control,
        lock: &LockGuard,
        signals: &mut Signals,
        resource: &str,
    ) -> std::io::Result<std::process::ExitStatus> {
        let mut extensions = lock.extensions();
        let lost_signal = lock.lost();
        let mut guard_kills_at = self.kill_at;
        loop {
            // The guard's watchdog kills at the same time by its own clock (`run/watchdog.rs`):
            // this process may be stopped before its timer fires.
            if self.kill_at != guard_kills_at {
                guard.kill_at(self.kill_at);
                guard_kills_at = self.kill_at;
            }
            tokio::select! {
                // Timers first: after a suspension of this process, stopping the command wins
                // over noticing that it exited.
                biased;
                () = tokio::time::sleep_until(self.term_at.into()), if !self.term_sent => {
                    self.lose("its validity would run out before an extension succeeded".to_owned());
                    guard.signal_all(libc::SIGTERM);
                    self.term_sent = true;
                }
                () = tokio::time::sleep_until(self.kill_at.into()), if self.term_sent && !self.kill_sent => {
                    guard.signal_all(libc::SIGKILL);
                    self.kill_sent = true;
                }
                () = lost_signal.fired(), if self.lost.is_none() => {
                    let cause = lost_signal.cause().unwrap_or(LostCause::Expired);
                    self.lose(match extensions.latest().failing() {
                        Some(why) => format!("{cause} ({why})"),
                        None => cause.to_string(),
                    });
                    guard.signal_all(libc::SIGTERM);
                    self.term_sent = true;
                    self.kill_at = self.kill_at.min(Instant::now() + self.grace);
                }
                Some(state) = extensions.changed(), if self.lost.is_none() => {
                    match state.failing() {
                        None => self.extended(state.validity_deadline()),
                        Some(why) if !self.warned => {
                            eprintln!(
                                "fencelock: extending {resource:?} failed, retrying for {} before the command is stopped: {why}",
                                human(self.term_at.saturating_duration_since(Instant::now()))
                            );
                            self.warned = true;
                        }
                        Some(_) => {}
                    }
                }
                // The guard exits once every process of the command has exited.
                status = child.wait() => return status,
                _ = signals.int.recv() => guard.signal_group(libc::SIGINT),
                _ = signals.term.recv() => guard.signal_group(libc::SIGTERM),
                _ = signals.hup.recv() => guard.signal_group(libc::SIGHUP),
            }
        }
    }

    /// After the command's guard exited: the lock counts as lost if the guard was killed and
    /// left processes behind (its orphans came to us), or if the validity ran out meanwhile.
    fn check_after_exit(&mut self, exited_at: Instant) {
        // Nothing is left unless the guard was killed; then its orphans came to us.
        let leftovers = guard::kill_leftovers();
        if leftovers > 0 {
            self.lose(format!(
                "the guard of the command was killed and {leftovers} process(es) of the command had to be killed"
            ));
        }
        if exited_at >= self.deadline {
            self.lose(
                "its validity ran out before the command exited (was fencelock suspended?)"
                    .to_owned(),
            );
        }
    }

    /// The first reason given is the one reported.
    fn lose(&mut self, why: String) {
        self.lost.get_or_insert(why);
    }
}

/// The failure of a `run` whose lock was lost while the command ran: why, and how the command
/// was stopped (`signals`: SIGTERM sent, SIGKILL sent).
fn lost_failure(resource: &str, why: &str, signals: (bool, bool), grace: Duration) -> Failure {
    let how = match signals {
        (true, true) => format!(
            "it was stopped with SIGTERM, then SIGKILL after {}",
            human(grace)
        ),
        (true, false) => "it was stopped with SIGTERM".to_owned(),
        _ => "it had already exited".to_owned(),
    };
    Failure::new(
        exit::LOST,
        format!(
            "lock {resource:?} was lost while the command ran: {why}; {how}. Its work may overlap with the next holder's: check the nodes (`fencelock doctor`), or raise --ttl"
        ),
    )
}

/// Releases the lock after the command exited with `code`; returns the exit code of `run`
/// (76 if the lock was no longer held).
async fn release_after_exit(lock: LockGuard, resource: &str, code: u8, ttl: Duration) -> u8 {
    match lock.release().await {
        Ok(_) => {}
        Err(err) if err.kind() == ErrorKind::Lost => {
            eprintln!(
                "fencelock: error: lock {resource:?} was no longer held when the command exited (the command's status was {code}): {err}"
            );
            return exit::LOST;
        }
        Err(err) => eprintln!(
            "fencelock: warning: releasing {resource:?} failed; its keys expire by themselves within {}: {err}",
            human(ttl)
        ),
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigkill_comes_before_the_deadline_and_sigterm_a_grace_earlier() {
        let now = Instant::now();
        let deadline = now + Duration::from_secs(10);
        let (term, kill) =
            stop_schedule(deadline, Duration::from_secs(2), Duration::from_millis(250));
        assert_eq!(kill, deadline - Duration::from_millis(250));
        assert_eq!(term, kill - Duration::from_secs(2));
        assert!(kill < deadline);
    }

    #[test]
    fn default_grace_fits_short_ttls() {
        assert_eq!(
            default_grace(Duration::from_secs(60)),
            Duration::from_secs(5)
        );
        assert_eq!(
            default_grace(Duration::from_secs(2)),
            Duration::from_millis(500)
        );
        for ttl in [
            Duration::from_millis(200),
            Duration::from_secs(2),
            Duration::from_secs(600),
        ] {
            assert!(check_grace(default_grace(ttl), ttl).is_ok(), "{ttl:?}");
        }
        assert!(check_grace(Duration::from_secs(5), Duration::from_secs(2)).is_err());
    }

    #[test]
    fn signals_map_to_128_plus_n() {
        assert_eq!(status_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(status_code(ExitStatus::from_raw(libc::SIGTERM)), 128 + 15);
        assert_eq!(status_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
