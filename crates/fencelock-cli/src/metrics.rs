//! `--metrics`: the library's metrics of one run, recorded in memory by the Prometheus
//! exporter's recorder (no listener) and printed at the end in its text format.

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
