//! A throw-away MariaDB (MySQL-compatible) server on a free loopback port.

use std::io::{self, Read};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use crate::ports::free_port;
use crate::process::{retry_addr_in_use, ServerProcess, STOP_GRACE};

/// Debian's server binary (package `mariadb-server`).
const DEFAULT_SERVER: &str = "/usr/sbin/mariadbd";
/// Overrides [`DEFAULT_SERVER`].
const SERVER_ENV: &str = "FENCELOCK_MARIADBD";
/// Generous: the machine may be loaded, and InnoDB creates its files on the first start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const START_TRIES: usize = 5;
const INSTALL_HINT: &str = "apt-get install mariadb-server";

/// A MariaDB server (`mariadbd`, not a service) with its own data directory, made by
/// `mariadb-install-db` in a temporary directory.
///
/// User `root` without a password over TCP on `127.0.0.1` only (`--skip-name-resolve`), the
/// socket inside the temporary directory, a database `test` created at start, and no flush at
/// each commit (durability against a machine crash is not what tests exercise). As root it runs
/// with `--user=root`, which mariadbd requires to be said explicitly.
///
/// Dropping the handle stops the server (SIGTERM, then SIGKILL after 10 s), reaps it and
/// removes the directory; during a panic the last 40 log lines go to stderr.
#[derive(Debug)]
pub struct MariaDb {
    port: u16,
    server: PathBuf,
    data_dir: PathBuf,
    dir_path: PathBuf,
    process: ServerProcess,
    // Last, so the server is gone before its directory is removed.
    _dir: TempDir,
}

impl MariaDb {
    /// Creates a data directory and starts the server; returns once it greets a client and
    /// the database `test` exists.
    ///
    /// # Errors
    ///
    /// Fails when MariaDB is not installed, `mariadb-install-db` fails, or the server does not
    /// come up in time; the error carries the relevant output.
    pub fn start() -> io::Result<MariaDb> {
        let server = std::env::var_os(SERVER_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SERVER));
        if !server.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "MariaDB server not found at {} (set {SERVER_ENV} to override): {INSTALL_HINT}",
                    server.display()
                ),
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("fencelock-mariadb-")
            .tempdir()?;
        let data_dir = dir.path().join("data");
        install_db(&data_dir)?;
        let mut db = MariaDb {
            port: 0,
            server,
            process: ServerProcess::new(
                format!("mariadbd in {}", data_dir.display()),
                dir.path().join("mariadb.log"),
            ),
            data_dir,
            dir_path: dir.path().to_path_buf(),
            _dir: dir,
        };
        retry_addr_in_use(START_TRIES, || {
            db.port = free_port()?;
            db.launch()
        })?;
        db.sql("CREATE DATABASE IF NOT EXISTS test")?;
        Ok(db)
    }

    fn launch(&self) -> io::Result<()> {
        let mut cmd = Command::new(&self.server);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.data_dir.display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.dir_path.join("sock").display()))
            .arg(format!(
                "--pid-file={}",
                self.dir_path.join("pid").display()
            ))
            .args([
                "--skip-name-resolve",
                "--skip-log-bin",
                "--innodb-flush-log-at-trx-commit=0",
                "--innodb-buffer-pool-size=32M",
                "--max-connections=200",
            ])
            .env_remove("LD_PRELOAD");
        if is_root() {
            cmd.arg("--user=root");
        }
        self.process.spawn(&mut cmd, INSTALL_HINT)?;
        let ready = self.process.wait_ready(START_TIMEOUT, || greets(self.port));
        if ready.is_err() {
            let _ = self.process.kill();
        }
        ready
    }

    /// `mysql://root@127.0.0.1:<port>/test`, as sqlx takes it.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's pid while it exists.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Whether the server process exists.
    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Runs `sql` in the database `test` with the `mariadb` client (batch mode, no column
    /// names) and returns its trimmed output, e.g. `"1"` for `select 1`.
    ///
    /// # Errors
    ///
    /// Fails when the client is missing or the statement fails; the error carries its stderr.
    pub fn sql(&self, sql: &str) -> io::Result<String> {
        let out = Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-u", "root", "-N", "-B"])
            .arg(format!("-P{}", self.port))
            .args(["--connect-timeout=5", "-e", sql])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    io::Error::new(
                        e.kind(),
                        "mariadb (the client) not found: apt-get install mariadb-client",
                    )
                } else {
                    e
                }
            })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(io::Error::other(format!(
                "mariadb -e {sql:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }

    /// Graceful shutdown (SIGTERM) and wait. A no-op when not running.
    ///
    /// # Errors
    ///
    /// Fails when the process cannot be signalled or reaped.
    pub fn stop(&self) -> io::Result<()> {
        self.process.terminate(libc::SIGTERM, STOP_GRACE)
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        let _ = self.process.terminate(libc::SIGTERM, STOP_GRACE);
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the server on `port` sends its greeting (the protocol's first packet) to a new
/// connection: it accepts clients.
fn greets(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut header = [0u8; 5];
    // Length (3 bytes), sequence 0, then protocol version 10.
    stream.read_exact(&mut header).is_ok() && header[3] == 0 && header[4] == 10
}

fn install_db(data_dir: &std::path::Path) -> io::Result<()> {
    let mut cmd = Command::new("mariadb-install-db");
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", data_dir.display()))
        .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
        .stdin(Stdio::null());
    if is_root() {
        cmd.arg("--user=root");
    }
    let out = cmd.output().map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            io::Error::new(
                e.kind(),
                format!("mariadb-install-db not found: {INSTALL_HINT}"),
            )
        } else {
            e
        }
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "mariadb-install-db failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
