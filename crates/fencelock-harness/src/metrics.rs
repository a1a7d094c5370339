//! `--metrics`: each client process records the library's metrics (the Prometheus exporter's
//! recorder, no listener) and writes them as Prometheus text beside its log (in the `run` mode,
//! each `fencelock run` supervisor writes its own with `--metrics-file`); the run sums the
//! processes' counters and histogram counts per series.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Installs the recorder in this (client) process.
///
/// # Errors
///
/// When another recorder is installed already.
pub fn install() -> io::Result<PrometheusHandle> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(handle)
}

/// The sum over the clients' `client-*.prom` files in `dir` of every `fencelock_*` counter and
/// histogram count, one line per series (labels as recorded, the node's among them).
///
/// # Errors
///
/// When the directory cannot be read.
pub fn summary(dir: &Path) -> io::Result<String> {
    let mut totals: BTreeMap<String, f64> = BTreeMap::new();
    let mut files = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let is_prom = path.extension().is_some_and(|e| e == "prom");
        if !is_prom {
            continue;
        }
        files += 1;
        for line in std::fs::read_to_string(&path)?.lines() {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = series.split('{').next().unwrap_or(series);
            let wanted = name.starts_with("fencelock_")
                && (name.ends_with("_total") || name.ends_with("_count"));
            if let (true, Ok(value)) = (wanted, value.parse::<f64>()) {
                *totals.entry(series.to_string()).or_default() += value;
            }
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "metrics, summed over {files} client process(es):");
    for (series, value) in &totals {
        let _ = writeln!(out, "  {series} {value}");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_counts_are_summed_per_series() {
        let dir = tempfile::tempdir().unwrap();
        let text = "# TYPE fencelock_releases_total counter\nfencelock_releases_total{outcome=\"released\"} 3\nfencelock_acquire_seconds_count{outcome=\"granted\",mode=\"wait\"} 4\nfencelock_acquire_seconds_sum{outcome=\"granted\",mode=\"wait\"} 0.5\n";
        std::fs::write(dir.path().join("client-0.prom"), text).unwrap();
        std::fs::write(dir.path().join("client-1.prom"), text).unwrap();
        std::fs::write(dir.path().join("client-1.jsonl"), "not metrics").unwrap();
        let out = summary(dir.path()).unwrap();
        assert!(out.contains("summed over 2 client process(es)"), "{out}");
        assert!(
            out.contains("fencelock_releases_total{outcome=\"released\"} 6"),
            "{out}"
        );
        assert!(out.contains("mode=\"wait\"} 8"), "{out}");
        assert!(!out.contains("_sum"), "{out}");
    }
}
