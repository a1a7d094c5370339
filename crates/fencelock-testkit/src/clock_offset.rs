//! A wall-clock offset that child processes read through the shim.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use tempfile::TempDir;

use crate::clock_shim::{clock_shim_path, OFFSET_FILE_ENV};

/// A file holding a signed wall-clock offset in milliseconds, plus the
/// environment that makes a child process obey it.
///
/// Any dynamically linked child started with [`env`](Self::env) (or
/// [`apply`](Self::apply)) reads its wall clock as real time plus the offset,
/// re-reading the file on every clock call, so [`set`](Self::set) takes
/// effect at once in running processes. Monotonic clocks are not shifted,
/// just as an NTP step leaves them alone.
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// let clock = fencelock_testkit::ClockOffset::new()?;
/// let mut cmd = std::process::Command::new("date");
/// clock.apply(&mut cmd);
/// clock.set(-3_600_000)?; // one hour behind
/// cmd.status()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ClockOffset {
    path: PathBuf,
    shim: PathBuf,
    counter: AtomicU64,
    // Last: removed after everything else is dropped.
    _dir: TempDir,
}

impl ClockOffset {
    /// Creates an offset file holding 0 in a fresh temporary directory and
    /// builds the shim if needed.
    ///
    /// # Errors
    ///
    /// Fails when the shim cannot be compiled (see [`clock_shim_path`]) or
    /// the temporary directory or file cannot be created.
    pub fn new() -> io::Result<ClockOffset> {
        let shim = clock_shim_path()?;
        let dir = tempfile::Builder::new()
            .prefix("fencelock-clock-")
            .tempdir()?;
        let offset = ClockOffset {
            path: dir.path().join("clock_offset_ms"),
            shim,
            counter: AtomicU64::new(0),
            _dir: dir,
        };
        offset.set(0)?;
        Ok(offset)
    }

    /// Sets the offset in milliseconds (negative moves the clock back).
    ///
    /// The file is replaced by rename, so a process never reads half a
    /// value.
    ///
    /// # Errors
    ///
    /// Fails when the file cannot be written or renamed.
    pub fn set(&self, offset_ms: i64) -> io::Result<()> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .path
            .with_extension(format!("tmp{}-{n}", std::process::id()));
        fs::write(&tmp, format!("{offset_ms}\n"))?;
        fs::rename(&tmp, &self.path)
    }

    /// The offset currently in the file, in milliseconds.
    ///
    /// # Errors
    ///
    /// Fails when the file cannot be read or does not hold an integer.
    pub fn get(&self) -> io::Result<i64> {
        let text = fs::read_to_string(&self.path)?;
        text.trim().parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("clock offset file holds {text:?}"),
            )
        })
    }

    /// Path of the offset file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Path of the compiled shim library.
    pub fn shim_path(&self) -> &Path {
        &self.shim
    }

    /// The environment variables to give a child process: `LD_PRELOAD` and
    /// `FENCELOCK_CLOCK_OFFSET_FILE`.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "LD_PRELOAD".to_owned(),
                self.shim.to_string_lossy().into_owned(),
            ),
            (
                OFFSET_FILE_ENV.to_owned(),
                self.path.to_string_lossy().into_owned(),
            ),
        ]
    }

    /// Adds [`env`](Self::env) to `cmd`.
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.envs(self.env())
    }
}
