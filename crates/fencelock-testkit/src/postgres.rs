//! A throw-away PostgreSQL 15 server on a free loopback port.

use std::ffi::CStr;
use std::io;
use std::os::unix::fs::chown;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use tempfile::TempDir;

use crate::ports::free_port;
use crate::process::{retry_addr_in_use, ServerProcess, STOP_GRACE};

/// Where Debian installs the PostgreSQL 15 server binaries.
const DEFAULT_BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

/// Overrides [`DEFAULT_BIN_DIR`], e.g. for another major version.
const BIN_DIR_ENV: &str = "FENCELOCK_PG_BIN";

/// Generous: the machine may be loaded, and a start after
/// [`Postgres::kill`] runs crash recovery first.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Start attempts on fresh ports when another process took the port first.
const START_TRIES: usize = 5;

/// A PostgreSQL server (`postgres` binary, not a service) with its own
/// cluster created by `initdb` in a temporary directory.
///
/// Trust authentication, user and database `postgres`, listening on
/// `127.0.0.1` only, unix socket inside the temporary directory, and
/// `fsync=off` for speed (durability against a machine crash is not what
/// tests exercise). PostgreSQL refuses to run as root, so when the test runs
/// as root, `initdb` and `postgres` run as the `postgres` user and the
/// directory is handed to that user.
///
/// Dropping the handle shuts the server down immediately (SIGQUIT, then
/// SIGKILL after 10 s), reaps it and removes the directory; during a panic
/// the last 40 log lines go to stderr.
#[derive(Debug)]
pub struct Postgres {
    port: u16,
    bin_dir: PathBuf,
    data_dir: PathBuf,
    run_as: Option<(u32, u32)>,
    process: ServerProcess,
    // Last, so the server is gone before its directory is removed.
    _dir: TempDir,
}

impl Postgres {
    /// Creates a cluster and starts the server; returns once it accepts
    /// connections (checked with `pg_isready`).
    ///
    /// # Errors
    ///
    /// Fails when PostgreSQL 15 is not installed, the `postgres` user is
    /// missing while running as root, `initdb` fails, or the server does not
    /// come up in time; the error carries the relevant output.
    pub fn start() -> io::Result<Postgres> {
        let bin_dir = std::env::var_os(BIN_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_BIN_DIR));
        if !bin_dir.join("postgres").is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "PostgreSQL server not found in {} (set {BIN_DIR_ENV} to override): \
                     apt-get install postgresql-15",
                    bin_dir.display()
                ),
            ));
        }
        let run_as = postgres_user()?;
        let dir = tempfile::Builder::new().prefix("fencelock-pg-").tempdir()?;
        if let Some((uid, gid)) = run_as {
            chown(dir.path(), Some(uid), Some(gid))?;
        }
        let data_dir = dir.path().join("data");
        initdb(&bin_dir, &data_dir, dir.path(), run_as)?;
        let mut pg = Postgres {
            port: 0,
            bin_dir,
            process: ServerProcess::new(
                format!("postgres in {}", data_dir.display()),
                dir.path().join("postgres.log"),
            ),
            data_dir,
            run_as,
            _dir: dir,
        };
        retry_addr_in_use(START_TRIES, || {
            pg.port = free_port()?;
            pg.launch()
        })?;
        Ok(pg)
    }

    fn launch(&self) -> io::Result<()> {
        let socket_dir = self
            .data_dir
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.data_dir.clone());
        let mut cmd = Command::new(self.bin_dir.join("postgres"));
        cmd.arg("-D")
            .arg(&self.data_dir)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(&socket_dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off"])
            .args(["-c", "full_page_writes=off"])
            .env("LC_ALL", "C")
            .env_remove("LD_PRELOAD")
            .current_dir(&socket_dir);
        as_user(&mut cmd, self.run_as);
        self.process
            .spawn(&mut cmd, "apt-get install postgresql-15")?;
        let ready = self
            .process
            .wait_ready(START_TIMEOUT, || self.accepts_connections());
        if ready.is_err() {
            let _ = self.process.kill();
        }
        ready
    }

    fn accepts_connections(&self) -> bool {
        Command::new(self.bin_dir.join("pg_isready"))
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-t",
                "2",
            ])
            .arg("-p")
            .arg(self.port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `host=127.0.0.1 port=<port> user=postgres dbname=postgres`, the
    /// key-value form `tokio_postgres::connect` also accepts.
    pub fn conn_str(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// The TCP port, fixed for the handle's life (also across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's pid while it exists.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Whether the postmaster process exists.
    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// The server log so far (all runs).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Runs `sql` with `psql` (unaligned, tuples only) and returns its
    /// trimmed output, e.g. `"1"` for `select 1`.
    ///
    /// # Errors
    ///
    /// Fails when `psql` is missing or the statement fails; the error
    /// carries psql's stderr.
    pub fn psql(&self, sql: &str) -> io::Result<String> {
        let out = Command::new("psql")
            .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"])
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-c")
            .arg(sql)
            .env("PGCONNECT_TIMEOUT", "5")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    io::Error::new(
                        e.kind(),
                        "psql not found on PATH: apt-get install postgresql-client",
                    )
                } else {
                    e
                }
            })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(io::Error::other(format!(
                "psql {sql:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }

    /// Fast shutdown (SIGINT: roll back open transactions, checkpoint,
    /// exit) and wait. A no-op when the server is not running.
    ///
    /// # Errors
    ///
    /// Fails when the process cannot be signalled or reaped.
    pub fn stop(&self) -> io::Result<()> {
        self.process.terminate(libc::SIGINT, STOP_GRACE)
    }

    /// Immediate shutdown (SIGQUIT, what `pg_ctl stop -m immediate` sends):
    /// no checkpoint, so the next start runs crash recovery, like after a
    /// crash. Committed data survives. A no-op when not running.
    ///
    /// # Errors
    ///
    /// Fails when the process cannot be signalled or reaped.
    pub fn kill(&self) -> io::Result<()> {
        self.process.terminate(libc::SIGQUIT, STOP_GRACE)
    }

    /// Stops the server if it runs and starts it again on the same port
    /// with the same data; returns once it accepts connections.
    ///
    /// # Errors
    ///
    /// Fails when the port stays taken or the server does not come up.
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
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Immediate shutdown lets the postmaster take its backends down with
        // it; a bare SIGKILL (the fallback in ServerProcess) would orphan
        // them.
        let _ = self.process.terminate(libc::SIGQUIT, STOP_GRACE);
    }
}

/// `(uid, gid)` of the `postgres` user when running as root, `None`
/// otherwise (the server then runs as the current user).
fn postgres_user() -> io::Result<Option<(u32, u32)>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = c"postgres";
    lookup_user(name).map(Some).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "running as root but there is no `postgres` user to run PostgreSQL as: \
                 apt-get install postgresql-15",
        )
    })
}

fn lookup_user(name: &CStr) -> Option<(u32, u32)> {
    let mut pwd = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwnam_r writes into `pwd` and `buf`, both valid for the
    // sizes passed, and sets `result` to null or to `pwd`.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            pwd.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return None;
    }
    // SAFETY: `result` is non-null, so getpwnam_r initialised `pwd`.
    let pwd = unsafe { pwd.assume_init() };
    Some((pwd.pw_uid, pwd.pw_gid))
}

fn as_user(cmd: &mut Command, run_as: Option<(u32, u32)>) {
    if let Some((uid, gid)) = run_as {
        // std drops supplementary groups when a root parent sets a uid.
        cmd.uid(uid).gid(gid);
    }
}

fn initdb(
    bin_dir: &Path,
    data_dir: &Path,
    cwd: &Path,
    run_as: Option<(u32, u32)>,
) -> io::Result<()> {
    let mut cmd = Command::new(bin_dir.join("initdb"));
    cmd.arg("-D")
        .arg(data_dir)
        .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"])
        .args(["--no-sync", "--no-instructions"])
        .env("LC_ALL", "C")
        .env_remove("LD_PRELOAD")
        .current_dir(cwd)
        .stdin(Stdio::null());
    as_user(&mut cmd, run_as);
    let out = cmd.output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot run {}: {e}", bin_dir.join("initdb").display()),
        )
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "initdb failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}
