//! The workload of one client process (the harness's hidden `client` subcommand).
//!
//! Each iteration: acquire the lock; read the fenced record (under the token in fenced modes)
//! and the counter; wait a little (the race window); write both back incremented; release.
//! Every step is a JSON line in the client's log. Clients are separate processes so that a
//! SIGSTOP is a real pause: the process does nothing while its lock's keys expire.
//!
//! The nemesis talks to a client through files in the control directory, because a file can
//! be taken exactly once (`unlink` succeeds for one side only): `pause-<id>` asks the client to
//! stop itself right after its next reads, `long-<id>` asks it to hold its next lock for most of
//! the validity (it creates `holding-<id>` meanwhile), and `stop` ends the run.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fencelock::{Client, Config, Error, ErrorKind, RetryPolicy};

use crate::history::{ClientEvent, EventKind, Record};
use crate::mode::Mode;
use crate::mono;
use crate::storage::{self, Who};

/// The lock's resource name.
pub const RESOURCE: &str = "harness:record";

/// What a client is told on its command line.
#[derive(Debug, Clone)]
pub struct ClientArgs {
    /// Client id (0-based).
    pub id: u32,
    /// The mode (fencing, quarantine).
    pub mode: Mode,
    /// Node URLs (the proxies).
    pub nodes: Vec<String>,
    /// The SQLite file.
    pub db: PathBuf,
    /// The control directory.
    pub dir: PathBuf,
    /// The JSON-lines log to write.
    pub log: PathBuf,
    /// Lock TTL.
    pub ttl: Duration,
    /// Per-node timeout.
    pub node_timeout: Duration,
    /// The race window between reads and writes.
    pub window: Duration,
    /// The run's epoch on `CLOCK_MONOTONIC`, in nanoseconds.
    pub epoch_ns: u64,
    /// The `fencelock` binary (the `run` mode drives it).
    pub fencelock: Option<PathBuf>,
    /// Record the library's metrics and write them beside the log (`client-<id>.prom`).
    pub metrics: bool,
}

/// A request the nemesis leaves for a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Stop yourself (SIGSTOP) right after the next reads.
    Pause,
    /// Hold the next lock for most of its validity.
    LongHold,
}

fn request_path(dir: &Path, id: u32, request: Request) -> PathBuf {
    dir.join(match request {
        Request::Pause => format!("pause-{id}"),
        Request::LongHold => format!("long-{id}"),
    })
}

/// Leaves `request` for client `id`.
///
/// # Errors
///
/// When the file cannot be created.
pub fn send(dir: &Path, id: u32, request: Request) -> io::Result<()> {
    File::create(request_path(dir, id, request)).map(drop)
}

/// Takes back `request` if the client has not taken it yet; `true` when withdrawn.
pub fn withdraw(dir: &Path, id: u32, request: Request) -> bool {
    fs::remove_file(request_path(dir, id, request)).is_ok()
}

/// Whether the client has taken `request` (its file is gone).
pub fn taken(dir: &Path, id: u32, request: Request) -> bool {
    !request_path(dir, id, request).exists()
}

/// The file client `id` keeps while inside a long hold.
pub fn holding_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("holding-{id}"))
}

/// Whether client `id` is inside a long hold.
pub fn holding(dir: &Path, id: u32) -> bool {
    holding_path(dir, id).exists()
}

/// Asks every client to stop after its current iteration.
///
/// # Errors
///
/// When the file cannot be created.
pub fn stop_all(dir: &Path) -> io::Result<()> {
    File::create(dir.join("stop")).map(drop)
}

/// Takes `request` if the nemesis left it (once: the file is gone afterwards).
pub(crate) fn take(dir: &Path, id: u32, request: Request) -> bool {
    fs::remove_file(request_path(dir, id, request)).is_ok()
}

/// The error's cause as the log names it.
pub fn cause(e: &Error) -> String {
    match e {
        Error::Timeout { last, .. } => format!("timeout/{}", cause(last)),
        _ => match e.kind() {
            ErrorKind::Contention => "contention".into(),
            ErrorKind::Unavailable => "unavailable".into(),
            ErrorKind::TooSlow => "too-slow".into(),
            ErrorKind::Lost => "lost".into(),
            ErrorKind::StaleToken => "stale-token".into(),
            ErrorKind::Storage => "storage".into(),
            ErrorKind::InvalidConfig => "invalid-config".into(),
            other => format!("{other:?}").to_lowercase(),
        },
    }
}

/// The log's event for an acquisition that failed with `e`.
fn failed(e: &Error) -> EventKind {
    EventKind::AcquireFail {
        cause: cause(e),
        detail: Some(e.to_string()),
    }
}

/// A client's JSON-lines log.
pub(crate) struct Log {
    out: BufWriter<File>,
    id: u32,
    epoch_ns: u64,
}

impl Log {
    /// Creates the log of the client `args` describes.
    pub(crate) fn create(args: &ClientArgs) -> io::Result<Log> {
        // Empty, then opened to append: in the `run` mode the command's processes append their
        // own lines to this file, which a write at our own offset would overwrite.
        File::create(&args.log)?;
        Ok(Log {
            out: BufWriter::new(OpenOptions::new().append(true).open(&args.log)?),
            id: args.id,
            epoch_ns: args.epoch_ns,
        })
    }

    /// Appends one event, flushed.
    pub(crate) fn event(&mut self, acq: u64, kind: EventKind) -> io::Result<()> {
        let e = ClientEvent {
            client: self.id,
            acq,
            mono_ns: mono::now_ns().saturating_sub(self.epoch_ns),
            wall_ms: mono::wall_ms(),
            kind,
        };
        serde_json::to_writer(&mut self.out, &e)?;
        self.out.write_all(b"\n")?;
        // Flushed per event: a client may be killed at the end of a run, and a SIGSTOP must not
        // hold back what happened before it.
        self.out.flush()
    }
}

/// Runs the client until the control directory's `stop` file appears.
///
/// # Errors
///
/// When the log cannot be written or the lock configuration is invalid.
pub fn run(args: &ClientArgs) -> io::Result<()> {
    if args.mode == Mode::Run {
        let fencelock = args.fencelock.as_deref().ok_or_else(|| {
            io::Error::other("the run mode needs the fencelock binary (--fencelock)")
        })?;
        return crate::runcmd::run(args, fencelock);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: &ClientArgs) -> io::Result<()> {
    let metrics = if args.metrics {
        Some(crate::metrics::install()?)
    } else {
        None
    };
    let result = run_locks(args).await;
    if let Some(handle) = metrics {
        std::fs::write(args.log.with_extension("prom"), handle.render())?;
    }
    result
}

async fn run_locks(args: &ClientArgs) -> io::Result<()> {
    let mut log = Log::create(args)?;
    // The command line split a `zk://` URL's server list at its commas: put it back.
    let nodes = fencelock::NodeAddr::split_list(&args.nodes.join(","));
    let config = Config::new(&nodes)
        .with_ttl(args.ttl)
        .with_node_timeout(args.node_timeout)
        .with_fencing(args.mode.fencing())
        .with_quarantine(args.mode.quarantine())
        .with_retry(
            RetryPolicy::new()
                .with_wait(args.ttl * 5)
                .with_base_delay(Duration::from_millis(2))
                .with_max_delay(Duration::from_millis(20)),
        );
    let client = Client::new(config).map_err(io::Error::other)?;
    let taker = crate::family::Taker::new(&client, args.mode, args.id).map_err(io::Error::other)?;
    let fence = storage::open(&args.db).map_err(io::Error::other)?;
    let stop = args.dir.join("stop");
    let rwlock = (args.mode == Mode::RedlockRwlock)
        .then(|| client.rwlock(RESOURCE))
        .transpose()
        .map_err(io::Error::other)?;
    let mut acq = 0u64;
    while !stop.exists() {
        acq += 1;
        log.event(acq, EventKind::AcquireStart)?;
        // The rwlock mode: two iterations of three read, one writes (shifted per client, so
        // that readers and writers meet).
        if let Some(rw) = rwlock
            .as_ref()
            .filter(|_| !(u64::from(args.id) + acq).is_multiple_of(3))
        {
            shared_section(args, rw, &fence, acq, &mut log).await?;
            continue;
        }
        let acquired = match &rwlock {
            Some(rw) => rw.write().await.map(|lock| (lock, None)),
            None => taker.take(&client).await,
        };
        let (lock, slot) = match acquired {
            Ok(taken) => taken,
            Err(e) => {
                log.event(acq, failed(&e))?;
                continue;
            }
        };
        let (deadline_ns, attempt_ns) = stamps(args, &lock);
        let token = lock.fencing_token().map(|t| t.value());
        log.event(
            acq,
            EventKind::AcquireOk {
                token,
                deadline_ns,
                attempt_ns,
            },
        )?;
        if let Some(slot) = slot {
            log.event(acq, EventKind::Slot { slot })?;
        }
        let who = Who {
            client: args.id,
            acq,
            token,
            epoch_ns: args.epoch_ns,
        };
        let long = take(&args.dir, args.id, Request::LongHold);
        let holding = holding_path(&args.dir, args.id);
        if long {
            File::create(&holding)?;
            log.event(acq, EventKind::LongHold)?;
        }
        critical_section(args, &fence, who, slot, long, &mut log).await?;
        if long {
            let _ = fs::remove_file(&holding);
        }
        log.event(acq, EventKind::ReleaseStart)?;
        let kind = match lock.release().await {
            Ok(_) => EventKind::Release {
                ok: true,
                cause: None,
            },
            Err(e) => EventKind::Release {
                ok: false,
                cause: Some(cause(&e)),
            },
        };
        log.event(acq, kind)?;
    }
    Ok(())
}

/// The lock's deadline and the start of its granted attempt, in nanoseconds since the epoch:
/// from the lock's own deadline (an Instant fixed inside the library), so that a pause between
/// the grant and the log line moves neither.
fn stamps(args: &ClientArgs, lock: &fencelock::Lock) -> (u64, Option<u64>) {
    let (now, now_ns) = (Instant::now(), mono::now_ns());
    let deadline = lock.validity_deadline();
    let deadline_ns = if deadline >= now {
        now_ns + (deadline - now).as_nanos() as u64
    } else {
        now_ns.saturating_sub((now - deadline).as_nanos() as u64)
    }
    .saturating_sub(args.epoch_ns);
    let valid_for = args.ttl.saturating_sub(lock.client().config().drift());
    (
        deadline_ns,
        Some(deadline_ns.saturating_sub(valid_for.as_nanos() as u64)),
    )
}

/// A read lock's iteration (the rwlock mode): two reads of the counter a window apart (a write
/// between them, by a valid writer, is two holders at once), then the release.
async fn shared_section(
    args: &ClientArgs,
    rw: &fencelock::RwLock,
    fence: &fencelock::fence::SqliteFence,
    acq: u64,
    log: &mut Log,
) -> io::Result<()> {
    let lock = match rw.read().await {
        Ok(lock) => lock,
        Err(e) => return log.event(acq, failed(&e)),
    };
    let (deadline_ns, attempt_ns) = stamps(args, &lock);
    log.event(
        acq,
        EventKind::ReadOk {
            deadline_ns,
            attempt_ns,
            last_writer: lock.last_writer_token(),
        },
    )?;
    let who = Who {
        client: args.id,
        acq,
        token: None,
        epoch_ns: args.epoch_ns,
    };
    let read = || tokio::task::block_in_place(|| storage::counter_read(fence, who));
    if let Err(e) = read() {
        log_storage_error(log, acq, Record::Counter, e, true)?;
    }
    if take(&args.dir, args.id, Request::Pause) {
        log.event(acq, EventKind::SelfPause)?;
        // SAFETY: raising a signal on our own process has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
    tokio::time::sleep(args.window).await;
    if let Err(e) = read() {
        log_storage_error(log, acq, Record::Counter, e, true)?;
    }
    log.event(acq, EventKind::ReleaseStart)?;
    let kind = match lock.release().await {
        Ok(_) => EventKind::Release {
            ok: true,
            cause: None,
        },
        Err(e) => EventKind::Release {
            ok: false,
            cause: Some(cause(&e)),
        },
    };
    log.event(acq, kind)
}

/// Reads both records, waits (the window a pause or a slow holder widens), writes both back. A
/// permit's holder (`slot`) reads and writes its slot's fenced record only: N holders at once
/// share no other record.
async fn critical_section(
    args: &ClientArgs,
    fence: &fencelock::fence::SqliteFence,
    who: Who,
    slot: Option<u32>,
    long: bool,
    log: &mut Log,
) -> io::Result<()> {
    let acq = who.acq;
    let blocking = |f: &mut dyn FnMut() -> fencelock::Result<i64>| tokio::task::block_in_place(f);
    let read = |who| match slot {
        Some(s) => storage::slot_read(fence, who, s),
        None => storage::fenced_read(fence, who),
    };
    let fenced = match blocking(&mut || read(who)) {
        Ok(v) => Some(v),
        Err(e) => {
            log_storage_error(log, acq, Record::Fenced, e, true)?;
            None
        }
    };
    let counter = match slot {
        Some(_) => None,
        None => Some(blocking(&mut || storage::counter_read(fence, who))),
    };
    if take(&args.dir, args.id, Request::Pause) {
        log.event(acq, EventKind::SelfPause)?;
        // A real pause, as a stop-the-world GC makes: nothing runs until the nemesis sends
        // SIGCONT, and the lock's keys expire meanwhile.
        // SAFETY: raising a signal on our own process has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
    let hold = if long {
        args.ttl.mul_f64(0.6)
    } else {
        args.window
    };
    tokio::time::sleep(hold).await;
    if let Some(read) = fenced {
        let write = || match slot {
            Some(s) => storage::slot_write(fence, who, s, read),
            None => storage::fenced_write(fence, who, read),
        };
        match blocking(&mut || write()) {
            Ok(value) => log.event(
                acq,
                EventKind::WriteAccepted {
                    record: Record::Fenced,
                    value,
                },
            )?,
            Err(e) => log_storage_error(log, acq, Record::Fenced, e, false)?,
        }
    }
    match counter {
        None => {}
        Some(Ok(read)) => match blocking(&mut || storage::counter_write(fence, who, read)) {
            Ok(value) => log.event(
                acq,
                EventKind::WriteAccepted {
                    record: Record::Counter,
                    value,
                },
            )?,
            Err(e) => log_storage_error(log, acq, Record::Counter, e, false)?,
        },
        Some(Err(e)) => log_storage_error(log, acq, Record::Counter, e, true)?,
    }
    Ok(())
}

fn log_storage_error(
    log: &mut Log,
    acq: u64,
    record: Record,
    e: Error,
    read: bool,
) -> io::Result<()> {
    match e {
        Error::StaleToken {
            presented, current, ..
        } => log.event(
            acq,
            if read {
                EventKind::ReadRejected {
                    record,
                    presented,
                    current,
                }
            } else {
                EventKind::WriteRejected {
                    record,
                    presented,
                    current,
                }
            },
        ),
        other => log.event(
            acq,
            EventKind::StorageError {
                message: other.to_string(),
            },
        ),
    }
}
