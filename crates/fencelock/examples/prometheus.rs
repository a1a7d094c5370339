//! fencelock's metrics on a Prometheus endpoint: install the exporter's recorder, then take
//! locks; Prometheus scrapes `http://127.0.0.1:9464/metrics` (the address is the first argument,
//! `FENCELOCK_METRICS_ADDR`, or that default).
//!
//! ```text
//! fencelock up
//! eval "$(fencelock nodes --export)"
//! cargo run -p fencelock --features metrics --example prometheus -- 127.0.0.1:9464
//! curl -s http://127.0.0.1:9464/metrics | grep fencelock_
//! ```
//!
//! It takes and releases a few locks, prints what the endpoint serves, and keeps serving for
//! `FENCELOCK_METRICS_LINGER` seconds (default 0) so that a scraper can read it. The README's
//! "In production" section lists every metric.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use fencelock::{Client, Config};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("prometheus example: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("FENCELOCK_METRICS_ADDR").ok())
        .unwrap_or_else(|| "127.0.0.1:9464".to_string())
        .parse()
        .map_err(|e| format!("the listen address: {e}; give host:port, e.g. 127.0.0.1:9464"))?;
    // The recorder first: fencelock records into whatever recorder is installed, and before
    // one is, into none.
    let (recorder, exporter) = PrometheusBuilder::new()
        .with_http_listener(addr)
        // Lock latencies are milliseconds on a healthy set; the defaults start at 5 ms.
        .set_buckets(&[
            0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ])?
        .build()?;
    let handle = recorder.handle();
    // The HTTP listener is the exporter's future: it serves while this runtime runs.
    tokio::spawn(exporter);
    metrics::set_global_recorder(recorder)?;

    let client = Client::new(Config::from_env()?)?;
    for _ in 0..3 {
        let lock = client.acquire("report:daily").await?;
        lock.release().await?;
    }
    // A second holder meets the first: one contention.
    let held = client.acquire("report:weekly").await?;
    let other = Client::new(Config::from_env()?)?;
    let refused = other.try_acquire("report:weekly").await;
    println!(
        "second holder: {}",
        refused.err().map_or("granted?".into(), |e| e.to_string())
    );
    held.release().await?;
    client.close().await;
    other.close().await;

    let text = handle.render();
    for line in text.lines().filter(|l| l.starts_with("fencelock_")) {
        println!("{line}");
    }
    let linger = std::env::var("FENCELOCK_METRICS_LINGER")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    if linger > 0 {
        println!("serving http://{addr}/metrics for {linger} s");
        tokio::time::sleep(Duration::from_secs(linger)).await;
    }
    Ok(())
}
