//! The command on a Sentinel-managed primary (`redis+sentinel://`, issue 31): `inspect`,
//! `doctor` and `bench` ask the Sentinels for the primary and read it, as the lock commands do.
//! Real redis-server and Sentinel processes from the test kit.

use fencelock_testkit::SentinelGroup;

mod common;
use common::{fencelock, output};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn inspect_doctor_and_bench_follow_the_sentinels_to_the_primary() {
    let group = SentinelGroup::start().unwrap();
    let home = tempfile::tempdir().unwrap();
    let cmd = || {
        let mut c = fencelock(home.path());
        c.arg("--nodes").arg(group.url());
        c
    };
    let out = output(cmd().args([
        "--no-quarantine",
        "--label",
        "sentinel job",
        "acquire",
        "report",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let owner = text(&out.stdout).trim().to_string();
    let stored = owner
        .split_once(".ttl")
        .map_or(owner.as_str(), |(o, _)| o)
        .to_string();
    let out = output(cmd().args(["inspect", "report"]));
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        shown.contains(&format!("held by owner {stored}")),
        "{shown}"
    );
    assert!(shown.contains("\"sentinel job\""), "{shown}");
    // doctor reads the primary: its replicas are expected (a failover is a loss of data the
    // quarantine covers), not a failure as on a plain node.
    let out = output(cmd().arg("doctor"));
    let report = text(&out.stdout);
    assert!(
        report.contains("pass  replication")
            && report.contains("the Sentinels' primary has 2 replica(s)"),
        "{report}"
    );
    assert!(report.contains("pass  write"), "{report}");
    // The test kit's group keeps min-replicas-to-write 0: a primary cut off from its replicas
    // would go on granting locks.
    assert!(report.contains("warn  split brain"), "{report}");
    // bench: the library through the Sentinels beside the raw baseline on the primary they
    // name; the contended sections never overlap.
    for (workload, cycles) in [("seq", "20"), ("contended", "12")] {
        let out = output(cmd().args([
            "--no-quarantine",
            "--json",
            "bench",
            "--workload",
            workload,
            "--cycles",
            cycles,
            "--concurrency",
            "3",
            "--raw",
        ]));
        assert!(
            out.status.success(),
            "bench {workload}: {}",
            text(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let n: u64 = cycles.parse().unwrap();
        for s in [&v["fencelock"], &v["raw"]] {
            assert_eq!(s["errors"].as_u64().unwrap_or(0), 0, "{workload}: {v}");
            if workload == "seq" {
                assert_eq!(s["cycles"], n, "{v}");
            } else {
                assert_eq!(s["sections"], n, "{v}");
                assert_eq!(s["counter"], s["sections"], "{v}");
                assert_eq!(s["overlaps"], 0, "{v}");
            }
        }
    }
    // After a failover the commands read the new primary, where the key was replicated.
    let old = group.primary().unwrap();
    group.failover().unwrap();
    group
        .wait_for_failover(old, std::time::Duration::from_secs(30))
        .unwrap();
    let out = output(cmd().args(["--json", "inspect", "report"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let node = &json["nodes"][0];
    assert_eq!(node["reachable"], true, "{json}");
    assert!(
        node["owner"].is_null() || node["owner"] == stored.as_str(),
        "the new primary shows the old owner or none: {json}"
    );
}
