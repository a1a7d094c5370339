//! `fencelock bench` against real redis-server nodes started by the testkit: each workload runs
//! small, and the JSON carries the documented fields. Safety figures are asserted exactly (no
//! overlap, the counter equals the sections); speed is never asserted.

use std::process::{Command, Output, Stdio};

use fencelock_testkit::{Etcd, Postgres, RedisCluster, RedisNodes, ZooKeeper};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_fencelock");

fn bench(home: &std::path::Path, urls: &[String], args: &[&str]) -> Value {
    let out: Output = Command::new(BIN)
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("FENCELOCK_NODES")
        .env_remove("FENCELOCK_CONFIG")
        .arg("--nodes")
        .arg(urls.join(","))
        // Loose enough for a loaded two-core box: errors are not the subject here.
        .args(["--node-timeout", "2s", "--no-quarantine", "--json", "bench"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run fencelock bench");
    assert!(
        out.status.success(),
        "bench {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bench {args:?} printed no JSON object ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn assert_series(v: &Value, cycles: u64) {
    for field in [
        "cycles_per_sec",
        "p50_us",
        "p99_us",
        "max_us",
        "errors",
        "cycles",
    ] {
        assert!(v.get(field).is_some(), "missing {field} in {v}");
    }
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["cycles"], cycles, "{v}");
    assert!(v["p50_us"].as_u64().unwrap() <= v["p99_us"].as_u64().unwrap());
    assert!(v["p99_us"].as_u64().unwrap() <= v["max_us"].as_u64().unwrap());
}

#[test]
fn seq_and_par_report_both_series_and_the_ratio() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    let plot = home.path().join("seq.svg");
    let v = bench(
        home.path(),
        &nodes.urls(),
        &[
            "--workload",
            "seq",
            "--cycles",
            "50",
            "--raw",
            "--plot",
            plot.to_str().unwrap(),
        ],
    );
    assert_eq!(v["workload"], "seq");
    assert_eq!(v["nodes"], 3);
    assert_series(&v, 50);
    assert_series(&v["fencelock"], 50);
    assert_series(&v["raw"], 50);
    assert!(v["ratio"].as_f64().unwrap() > 0.0);
    // With the baseline's connections, each series reports what it cost the three nodes.
    for series in ["fencelock", "raw"] {
        assert_eq!(v[series]["nodes_measured"], 3, "{}", v[series]);
        assert!(
            v[series]["node_cpu_us_per_cycle"].as_u64().unwrap() > 0,
            "{}",
            v[series]
        );
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.matches("<polyline").count() == 2);

    let v = bench(
        home.path(),
        &nodes.urls(),
        &[
            "--workload",
            "par",
            "--cycles",
            "50",
            "--concurrency",
            "8",
            "--fencing",
        ],
    );
    assert_eq!(v["workload"], "par");
    assert_eq!(v["fencing"], true);
    assert_series(&v, 50);
    assert!(v["raw"].is_null() && v["ratio"].is_null());
    // Without the baseline there is no connection to read the nodes' CPU with: no figure, not 0.
    assert!(v["fencelock"]["node_cpu_us_per_cycle"].is_null(), "{v}");

    // --hold: every cycle of both series holds its lock that long before the release.
    let v = bench(
        home.path(),
        &nodes.urls(),
        &[
            "--workload",
            "seq",
            "--cycles",
            "4",
            "--raw",
            "--hold",
            "30ms",
        ],
    );
    for series in ["fencelock", "raw"] {
        assert_series(&v[series], 4);
        assert!(
            v[series]["p50_us"].as_u64().unwrap() >= 30_000,
            "{}",
            v[series]
        );
    }
}

#[test]
fn shared_reports_the_read_write_lock_beside_the_mutex_and_no_overlap() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    let v = bench(
        home.path(),
        &nodes.urls(),
        &[
            "--workload",
            "shared",
            "--cycles",
            "100",
            "--concurrency",
            "8",
            "--fencing",
        ],
    );
    assert_eq!(v["workload"], "shared");
    assert_series(&v["fencelock"], 100);
    assert_series(&v["mutex"], 100);
    assert_eq!(v["fencelock"]["write_cycles"], 10, "{v}");
    assert_eq!(v["fencelock"]["overlaps"], 0, "{v}");
    assert!(v["ratio_to_mutex"].as_f64().unwrap() > 0.0);
}

#[test]
fn contended_sections_never_overlap_and_every_increment_counts() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    let v = bench(
        home.path(),
        &nodes.urls(),
        &[
            "--workload",
            "contended",
            "--cycles",
            "40",
            "--concurrency",
            "4",
            "--raw",
        ],
    );
    assert!(v["ratio_barging"].as_f64().is_some(), "{v}");
    for s in [&v, &v["fencelock"], &v["raw"], &v["raw_barging"]] {
        // The counter first: a read-modify-write per section, so two holders at once lose an
        // increment, which this sees even where the overlap check (one process) could not.
        assert_eq!(s["counter"], s["sections"], "{s}");
        assert_eq!(s["overlaps"], 0, "{s}");
        assert_eq!(s["sections"], 40, "{s}");
        let per_worker: Vec<u64> = s["sections_per_worker"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(per_worker.len(), 4);
        assert_eq!(per_worker.iter().sum::<u64>(), 40);
        assert_eq!(
            s["busiest_worker_sections"].as_u64(),
            per_worker.iter().copied().max()
        );
        for field in [
            "handover_p50_us",
            "handover_p99_us",
            "round_trip_us",
            "fair_share",
        ] {
            assert!(s.get(field).is_some(), "missing {field} in {s}");
        }
    }
}

#[test]
fn held_reports_cpu_and_per_node_traffic() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    let v = bench(
        home.path(),
        &nodes.urls(),
        &[
            "--ttl",
            "3s",
            "--workload",
            "held",
            "--concurrency",
            "50",
            "--hold",
            "2s",
            "--raw",
        ],
    );
    for s in [&v, &v["raw"]] {
        assert_eq!(s["locks"], 50, "{s}");
        assert_eq!(s["cycles"], 50, "{s}");
        assert_eq!(s["lost"], 0, "{s}");
        assert!(s["cpu_fraction"].as_f64().is_some(), "{s}");
        let per_node = s["per_node"].as_array().unwrap();
        assert_eq!(per_node.len(), 3);
        for node in per_node {
            // Every lock is extended at least once during a hold of two intervals (TTL/3 each).
            assert!(node["evalsha"].as_u64().unwrap() >= 50, "{node}");
            assert!(node["round_trips"].as_u64().is_some(), "{node}");
            assert!(node["commands_per_sec"].as_f64().is_some(), "{node}");
        }
    }
}

#[test]
fn local_nodes_are_started_and_conflict_with_nodes() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env_remove("FENCELOCK_NODES")
        .args(["--json", "--node-timeout", "2s", "bench", "--local", "3"])
        .args(["--workload", "seq", "--cycles", "20"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nodes"], 3);
    assert_eq!(v["cycles"], 20);

    let out = Command::new(BIN)
        .env("HOME", home.path())
        .args(["--nodes", "redis://127.0.0.1:1", "bench", "--local", "3"])
        .args(["--workload", "seq"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn delayed_nodes_are_measured_through_the_proxy() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    let v = bench(
        home.path(),
        &nodes.urls(),
        &[
            "--workload",
            "seq",
            "--cycles",
            "20",
            "--raw",
            "--delay-nodes",
            "1",
            "--delay",
            "5ms",
        ],
    );
    assert_series(&v["fencelock"], 20);
    assert_series(&v["raw"], 20);
    // The raw baseline waits for every node, the delayed one included, on each of its two
    // rounds: the proxy's delay is in its latency (a lower bound, not a speed figure).
    assert!(v["raw"]["p50_us"].as_u64().unwrap() >= 10_000, "{v}");

    let out = Command::new(BIN)
        .env("HOME", home.path())
        .args(["--nodes", &nodes.urls().join(","), "bench"])
        .args(["--workload", "seq", "--delay-nodes", "4", "--delay", "5ms"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--delay-nodes 4"),
        "{out:?}"
    );
}

#[test]
fn etcd_runs_every_workload_beside_its_raw_baseline() {
    let etcd = Etcd::start().unwrap();
    let url = vec![etcd.endpoint().replacen("http://", "etcd://", 1)];
    let home = tempfile::tempdir().unwrap();
    let v = bench(
        home.path(),
        &url,
        &["--workload", "seq", "--cycles", "20", "--raw"],
    );
    assert_series(&v["fencelock"], 20);
    assert_series(&v["raw"], 20);
    let v = bench(
        home.path(),
        &url,
        &["--workload", "par", "--cycles", "20", "--concurrency", "4"],
    );
    assert_series(&v, 20);
    let v = bench(
        home.path(),
        &url,
        &[
            "--workload",
            "contended",
            "--cycles",
            "12",
            "--concurrency",
            "3",
            "--raw",
        ],
    );
    for s in [&v["fencelock"], &v["raw"], &v["raw_barging"]] {
        assert_eq!(s["counter"], s["sections"], "{s}");
        assert_eq!(s["overlaps"], 0, "{s}");
        assert_eq!(s["sections"], 12, "{s}");
    }
    let v = bench(
        home.path(),
        &url,
        &[
            "--ttl",
            "3s",
            "--workload",
            "held",
            "--concurrency",
            "10",
            "--hold",
            "2s",
            "--raw",
        ],
    );
    for s in [&v, &v["raw"]] {
        assert_eq!(s["locks"], 10, "{s}");
        assert_eq!(s["lost"], 0, "{s}");
    }
}

#[test]
fn permits_never_exceed_n_holders_and_report_their_ratio_to_the_mutex() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    let v = bench(
        home.path(),
        &nodes.urls(),
        &[
            "--workload",
            "permits",
            "--permits",
            "2",
            "--cycles",
            "60",
            "--concurrency",
            "6",
            "--hold",
            "2ms",
        ],
    );
    assert_eq!(v["workload"], "permits");
    assert_series(&v["fencelock"], 60);
    assert_series(&v["mutex"], 60);
    assert_eq!(v["fencelock"]["overlaps"], 0, "{v}");
    assert_eq!(v["mutex"]["overlaps"], 0, "{v}");
    assert!(v["fencelock"]["most_holders"].as_u64().unwrap() <= 2, "{v}");
    assert_eq!(v["mutex"]["most_holders"], 1, "{v}");
    assert!(v["ratio_to_mutex"].as_f64().is_some(), "{v}");
}

/// `seq --raw` and `contended --raw` on one backend's URL: both series complete, and the
/// contended sections never overlap, the counter equals the sections.
fn seq_and_contended_beside_the_raw_baseline(url: &str) {
    let home = tempfile::tempdir().unwrap();
    let url = vec![url.to_string()];
    let v = bench(
        home.path(),
        &url,
        &[
            "--ttl",
            "10s",
            "--workload",
            "seq",
            "--cycles",
            "20",
            "--raw",
        ],
    );
    assert_series(&v["fencelock"], 20);
    assert_series(&v["raw"], 20);
    assert!(v["ratio"].as_f64().is_some_and(|r| r > 0.0), "{url:?}: {v}");
    let v = bench(
        home.path(),
        &url,
        &[
            "--ttl",
            "10s",
            "--workload",
            "contended",
            "--cycles",
            "12",
            "--concurrency",
            "3",
            "--raw",
        ],
    );
    for s in [&v["fencelock"], &v["raw"], &v["raw_barging"]] {
        assert_eq!(s["counter"], s["sections"], "{url:?}: {s}");
        assert_eq!(s["overlaps"], 0, "{url:?}: {s}");
        assert_eq!(s["sections"], 12, "{url:?}: {s}");
    }
}

#[test]
fn zookeeper_and_postgres_run_beside_their_raw_baselines() {
    let zk = std::thread::spawn(|| {
        let zk = ZooKeeper::start().unwrap();
        seq_and_contended_beside_the_raw_baseline(&format!("{}/bench", zk.url()));
    });
    let pg = Postgres::start().unwrap();
    seq_and_contended_beside_the_raw_baseline(&pg.url());
    zk.join().unwrap();
}

/// A `redis+cluster://` URL: the library through the cluster beside the baseline on the primary
/// that owns the tag's slot, a plain node (issue 31: a cluster's figures beside a single
/// node's): `seq`, `par`, `contended` (no overlap, every increment counted) and `held` (every
/// lock kept, the traffic counted on the primary).
#[test]
fn a_cluster_runs_beside_the_primary_that_serves_it() {
    let cluster = RedisCluster::start().unwrap();
    let home = tempfile::tempdir().unwrap();
    let v = bench(
        home.path(),
        &[cluster.url()],
        &["--workload", "seq", "--cycles", "20", "--raw"],
    );
    assert_series(&v["fencelock"], 20);
    assert_series(&v["raw"], 20);
    let v = bench(
        home.path(),
        &[cluster.url()],
        &[
            "--workload",
            "par",
            "--cycles",
            "40",
            "--concurrency",
            "4",
            "--raw",
        ],
    );
    assert_series(&v["fencelock"], 40);
    assert_series(&v["raw"], 40);
    let v = bench(
        home.path(),
        &[cluster.url()],
        &[
            "--workload",
            "contended",
            "--cycles",
            "24",
            "--concurrency",
            "3",
            "--raw",
        ],
    );
    for s in [&v["fencelock"], &v["raw"], &v["raw_barging"]] {
        assert_eq!(s["counter"], s["sections"], "{s}");
        assert_eq!(s["overlaps"], 0, "{s}");
        assert_eq!(s["sections"], 24, "{s}");
    }
    let v = bench(
        home.path(),
        &[cluster.url()],
        &[
            "--ttl",
            "3s",
            "--workload",
            "held",
            "--concurrency",
            "20",
            "--hold",
            "2s",
            "--raw",
        ],
    );
    for s in [&v, &v["raw"]] {
        assert_eq!(s["locks"], 20, "{s}");
        assert_eq!(s["lost"], 0, "{s}");
        let per_node = s["per_node"].as_array().unwrap();
        assert_eq!(per_node.len(), 1, "{s}");
        // Every lock is extended at least once during a hold of two intervals, on the primary
        // that owns the tag's slot.
        assert!(per_node[0]["evalsha"].as_u64().unwrap() >= 20, "{s}");
    }
}
