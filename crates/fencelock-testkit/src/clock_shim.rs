//! Builds the `LD_PRELOAD` clock-shift shim once per process.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The C source of the shim; see the comment at its top for why it avoids
/// malloc and stdio.
const SHIM_SOURCE: &str = include_str!("clockshift.c");

/// File name of the compiled shim inside the cache directory.
const SHIM_FILE: &str = "libfencelock_clockshift.so";

/// Environment variable naming the offset file the shim reads.
pub(crate) const OFFSET_FILE_ENV: &str = "FENCELOCK_CLOCK_OFFSET_FILE";

/// Path to the compiled clock-shift shim, compiling it with the system `cc`
/// on first use.
///
/// Load it with `LD_PRELOAD=<path>` and set `FENCELOCK_CLOCK_OFFSET_FILE` to a
/// file holding a signed offset in milliseconds (see
/// [`ClockOffset`](crate::ClockOffset), which does both). The process's wall
/// clock (`CLOCK_REALTIME`, `CLOCK_REALTIME_COARSE`, `gettimeofday`, `time`)
/// then reads as real time plus the offset; monotonic clocks are untouched.
/// Dynamically linked programs only: static binaries such as Go's `etcd`
/// ignore `LD_PRELOAD`.
///
/// The library is cached in `$TMPDIR/fencelock-testkit-<hash of source>/`
/// and shared by every process; it is built under a unique name and renamed
/// into place, so concurrent test binaries never load a half-written file.
///
/// # Errors
///
/// Fails when `cc` is missing or the compilation fails; the error carries the
/// compiler's output. The failure is remembered for the rest of the process.
pub fn clock_shim_path() -> io::Result<PathBuf> {
    static SHIM: OnceLock<Result<PathBuf, (io::ErrorKind, String)>> = OnceLock::new();
    SHIM.get_or_init(|| build_shim().map_err(|e| (e.kind(), e.to_string())))
        .clone()
        .map_err(|(kind, msg)| io::Error::new(kind, msg))
}

fn cache_dir() -> PathBuf {
    let mut hasher = DefaultHasher::new();
    SHIM_SOURCE.hash(&mut hasher);
    std::env::temp_dir().join(format!("fencelock-testkit-{:016x}", hasher.finish()))
}

fn build_shim() -> io::Result<PathBuf> {
    let dir = cache_dir();
    let target = dir.join(SHIM_FILE);
    if target.is_file() {
        return Ok(target);
    }
    fs::create_dir_all(&dir)?;
    // Unique names: other test binaries may be compiling at the same time.
    let unique = format!("{}-{:?}", std::process::id(), std::thread::current().id())
        .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    let source = dir.join(format!("shim-{unique}.c"));
    let partial = dir.join(format!("{SHIM_FILE}.{unique}.partial"));
    fs::write(&source, SHIM_SOURCE)?;
    let result = compile(&source, &partial).and_then(|()| fs::rename(&partial, &target));
    let _ = fs::remove_file(&source);
    let _ = fs::remove_file(&partial);
    result.map(|()| target)
}

fn compile(source: &Path, output: &Path) -> io::Result<()> {
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(output)
        .arg(source)
        .arg("-ldl")
        .output()
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(e.kind(), "cc not found on PATH: apt-get install gcc")
            } else {
                io::Error::new(e.kind(), format!("cannot run cc: {e}"))
            }
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "compiling the clock shim failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}
