//! `--metrics` (bench) and `run --metrics-file`: the library's metrics of one run, recorded in
//! memory by the Prometheus exporter's recorder (no listener) and printed or written at the end
//! in its text format.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Installs the recorder; the library records into it from now on.
///
/// # Errors
///
/// When another recorder is installed already (a bug of the command, not the user's).
pub(crate) fn install() -> anyhow::Result<PrometheusHandle> {
    let recorder = PrometheusBuilder::new()
        // Lock latencies are sub-millisecond on a local set; the defaults start at 5 ms.
        .set_buckets(&[
            0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
            1.0, 5.0,
        ])?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))?;
    // The `# HELP` lines: what each series means, in the file itself.
    fencelock::telemetry::describe();
    Ok(handle)
}

/// The `fencelock_*` series in Prometheus text format (the exporter's own lines about itself
/// left out).
pub(crate) fn render(handle: &PrometheusHandle) -> String {
    let text = handle.render();
    let mut out = String::new();
    for line in text.lines() {
        let name = line
            .strip_prefix("# TYPE ")
            .or_else(|| line.strip_prefix("# HELP "))
            .unwrap_or(line);
        if name.starts_with("fencelock_") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `run --metrics-file PATH`: the recorder, and `PATH.tmp`, created before the run so that a
/// path that cannot be written is an error up front, not news after the command ran.
#[derive(Debug)]
pub(crate) struct MetricsFile {
    path: PathBuf,
    tmp: PathBuf,
    file: File,
    handle: PrometheusHandle,
}

impl MetricsFile {
    /// Creates `PATH.tmp` and installs the recorder.
    ///
    /// # Errors
    ///
    /// When `PATH.tmp` cannot be created (naming it and why).
    pub(crate) fn create(path: &Path) -> anyhow::Result<MetricsFile> {
        if path.is_dir() {
            anyhow::bail!(crate::exit::Failure::usage(format!(
                "--metrics-file {}: it is a directory; give a file path in it, e.g. {}",
                path.display(),
                path.join("fencelock.prom").display()
            )));
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let file = File::create(&tmp).with_context(|| {
            format!(
                "--metrics-file {}: cannot create {}; check that its directory exists and is writable",
                path.display(),
                tmp.display()
            )
        })?;
        Ok(MetricsFile {
            path: path.to_owned(),
            tmp,
            file,
            handle: install()?,
        })
    }

    /// Writes the metrics and renames `PATH.tmp` to `PATH`, so that a reader (node_exporter's
    /// textfile collector) never sees half a file.
    ///
    /// # Errors
    ///
    /// When writing or renaming fails.
    pub(crate) fn finish(mut self) -> anyhow::Result<()> {
        let written = self
            .file
            .write_all(render(&self.handle).as_bytes())
            .and_then(|()| self.file.sync_all())
            .and_then(|()| std::fs::rename(&self.tmp, &self.path));
        if written.is_err() {
            // Nothing is left behind that a textfile collector would read as stale metrics.
            let _ = std::fs::remove_file(&self.tmp);
        }
        written.with_context(|| format!("--metrics-file {}: cannot write it", self.path.display()))
    }
}
