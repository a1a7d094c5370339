//! A short fixed-seed run of the harness on real processes: with fencing, tokens follow the order
//! of the grants and the fenced storage accepts no stale write (Redlock under the faults its
//! guarantee covers, etcd under its full fault mix), and without fencing the checker finds the
//! violations a client pause past the TTL causes. Clients of different TTLs on one node set
//! never hold at once across restarts without persistence (restart quarantine), and the real
//! `fencelock run` never lets two holders' processes run at once, background and `setsid` ones
//! included, with its supervisor killed at random. The semaphore keeps at most N holders and
//! the election one leader per term with terms increasing, each with its fenced storage intact,
//! on Redis and on etcd.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn run(modes: &str, faults: &str, duration: &str) -> Vec<Value> {
    run_with(modes, faults, duration, &["--ttl", "500ms"])
}

/// The harness with `extra` arguments (which must include `--ttl` or `--ttl-mix`).
fn run_with(modes: &str, faults: &str, duration: &str, extra: &[&str]) -> Vec<Value> {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fencelock-harness"))
        .args([
            "run",
            "--modes",
            modes,
            "--faults",
            faults,
            "--duration",
            duration,
            "--seed",
            "7",
            "--clients",
            "3",
            "--json",
            "--quiet",
            "--out",
        ])
        .arg(out_dir.path())
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(0),
        "harness failed ({:?}): {stderr}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn n(v: &Value, key: &str) -> i64 {
    v[key]
        .as_i64()
        .unwrap_or_else(|| panic!("{key} missing in {v:#}"))
}

const ALL: &str = "kill,kill-leader,restart-nopersist,restart-persist,pause-node,pause-leader,pause-client,clock-forward,clock-backward,latency";

/// The faults under which docs/guarantees.md claims fenced Redlock safe: all but a forward clock
/// jump (`clock-forward`: it can expire the later holder's own key during its acquisition). A
/// restart without persistence (`restart-nopersist`) is in since the amnesia guard (a node that
/// lost its counter does not count for the token until a grant seeds it). The clock jump is in
/// the long runs of docs/harness.md, where the checker reports what it did.
const GUARANTEED: &str =
    "kill,restart-nopersist,restart-persist,pause-node,pause-client,clock-backward,latency";

/// The fenced record of a fenced mode's run is intact, tokens followed the order of the grants,
/// and the faults that make this meaningful fired.
fn assert_fenced_data_safe(m: &Value) {
    assert_grants_floor(m);
    for key in [
        "stale_accepted",
        "superseded_writes",
        "token_order",
        "grant_order",
        "duplicate_tokens",
        "fenced_interleaved",
        "fenced_lost_updates",
        "fenced_failures",
    ] {
        assert_eq!(n(m, key), 0, "{key} in {m:#}");
    }
    assert_eq!(m["uncovered_faults"], serde_json::json!([]), "{m:#}");
}

#[test]
fn fenced_storage_accepts_no_stale_write_and_unfenced_modes_lose_updates() {
    let fenced = run("redlock-fenced", GUARANTEED, "12s");
    let f = &fenced[0];
    assert_fenced_data_safe(f);
    assert!(f["faults"].as_object().unwrap().len() >= 3, "{f:#}");

    let unfenced = run("single,redlock", "pause-client", "8s");
    for m in &unfenced {
        assert!(n(m, "grants") > 0, "{m:#}");
        assert!(
            m["faults"]["pause-client"].as_i64().unwrap_or(0) >= 1,
            "{m:#}"
        );
        assert!(
            n(m, "fenced_record_violations") >= 1,
            "no violation found without fencing: {m:#}"
        );
        assert!(n(m, "fenced_lost_updates") >= 1, "{m:#}");
        assert!(n(m, "counter_lost_updates") >= 1, "{m:#}");
    }
}

/// The read-write lock (`redlock-rwlock`: fencing and quarantine on, each client two reads to
/// one write) under the faults fenced Redlock is claimed safe under: no writer's validity
/// overlapped another holder's with no clock jump in progress (readers with each other are
/// allowed), readers shared, and the fenced record the writers write took no stale row.
#[test]
fn rwlock_mode_keeps_writers_alone_and_the_fenced_record_safe() {
    let runs = run("redlock-rwlock", GUARANTEED, "10s");
    let m = &runs[0];
    assert_fenced_data_safe(m);
    assert_eq!(n(m, "exclusion_violations"), 0, "{m:#}");
    assert!(n(m, "shared_grants") > 0, "{m:#}");
    assert!(n(m, "most_readers") >= 2, "readers never shared: {m:#}");
}

/// etcd under member kills and pauses (leader and followers), client pauses and latency: the
/// fenced storage, fed revision tokens, accepts no stale write. Clock and restart-without-data
/// faults do not apply to etcd and are reported as skipped.
#[test]
fn etcd_revision_tokens_keep_the_fenced_record_safe() {
    let runs = run("etcd", ALL, "10s");
    let e = &runs[0];
    assert_fenced_data_safe(e);
    assert_eq!(n(e, "ttl_ms"), 1000, "etcd leases are whole seconds: {e:#}");
    assert!(!e["faults"].as_object().unwrap().is_empty(), "{e:#}");
    let skipped = e["skipped_faults"].as_object().unwrap();
    assert!(skipped.contains_key("clock-forward"), "{e:#}");
    assert!(!skipped.contains_key("kill-leader"), "{e:#}");
}

/// ZooKeeper (a 3-server ensemble: its leader or a follower killed or stopped) and PostgreSQL
/// (kill -9 and restart, also while a client holds the lock; `pg_terminate_backend` of every
/// client connection), each under client pauses and latency too: the fenced record, fed `czxid`
/// and sequence tokens, accepts no stale write, tokens follow the grants (issue 32). The two
/// modes run one after the other, a few seconds each.
#[test]
fn zookeeper_and_postgres_tokens_keep_the_fenced_record_safe() {
    let zk = &run(
        "zookeeper",
        "kill,kill-leader,pause-node,pause-leader,pause-client,latency,terminate-backend",
        "8s",
    )[0];
    // The first round deals a client pause and a restart first, then the rest: in 12 s the
    // connection fault comes up too.
    let pg = &run(
        "postgres",
        "pause-client,restart-persist,terminate-backend,kill,pause-node",
        "12s",
    )[0];
    for m in [zk, pg] {
        assert_fenced_data_safe(m);
        assert_eq!(n(m, "ttl_ms"), 1000, "whole seconds: {m:#}");
        assert!(
            m["faults"]["pause-client"].as_i64().unwrap_or(0) >= 1,
            "{m:#}"
        );
    }
    assert!(
        zk["skipped_faults"]
            .as_object()
            .unwrap()
            .contains_key("terminate-backend"),
        "{zk:#}"
    );
    assert!(
        pg["skipped_faults"]
            .as_object()
            .unwrap()
            .contains_key("pause-node"),
        "{pg:#}"
    );
    assert!(
        pg["faults"]["terminate-backend"].as_i64().unwrap_or(0) >= 1,
        "{pg:#}"
    );
    assert!(
        pg["faults"]["restart-persist"].as_i64().unwrap_or(0) >= 1,
        "{pg:#}"
    );
}

/// A Redis Cluster and a Sentinel group, each one node (issue 31), fencing and restart
/// quarantine on: the primary holding the lock keys killed (restarted empty), killed and
/// restarted at once while a client holds the lock, failed over on command (`CLUSTER FAILOVER`,
/// `SENTINEL FAILOVER`), and client pauses. The fenced record accepts no stale write and
/// tokens follow the grants.
#[test]
fn cluster_and_sentinel_failovers_keep_the_fenced_record_safe() {
    let runs = run_with(
        "cluster,sentinel",
        "pause-client,restart-nopersist,failover,kill",
        "15s",
        &["--ttl", "1s"],
    );
    for m in &runs {
        assert_fenced_data_safe(m);
        assert!(m["faults"]["failover"].as_i64().unwrap_or(0) >= 1, "{m:#}");
    }
}

/// A job with a 2 s TTL and application clients with 500 ms on one node set, restart quarantine
/// on (the library's default), nodes restarted without persistence while the job holds the lock:
/// no client is granted the lock inside another's validity unless a clock jump explains it. The
/// restarted node must stay out for the job's TTL, not the asking client's: with quarantine sized
/// by the asking client's own TTL (mutant `quarantine-own-ttl` in scripts/mutants.sh) the run
/// fails.
///
/// Data lost without a restart (`flushall` on the holder's nodes) and two nodes losing their
/// data within one TTL (`restart-two-nopersist`) are in too (issue 27, item 4: before the
/// marker was read behind every grant and a missing one counted from when it was seen, a
/// flushed node older than the TTL counted at once). Both with fencing (`redlock-quarantine`,
/// where the amnesia guard's counters also hold a flushed node out of the tokens) and with the
/// library's defaults (`redlock-default`: plain locks, quarantine alone keeps them apart). On
/// the code before issue 27's fixes the 10,000-grant run of docs/harness.md ("Data loss within
/// a minority") granted 84 times inside another's validity in `redlock-default`, all in
/// `flushall` episodes; this 12 s run, with its one flush, found none there (by hand).
///
/// The staged episodes keep every impaired node within a minority, so the lock must stay
/// available: each mode grants at least three quarters of its attempts ([`GRANT_FLOOR`]).
#[test]
fn clients_with_different_ttls_never_hold_at_once_across_restarts_without_persistence() {
    let runs = run_with(
        "redlock-quarantine,redlock-default",
        "restart-nopersist,restart-two-nopersist,flushall,pause-client,clock-backward",
        "12s",
        &["--ttl-mix", "500ms,2s", "--node-timeout", "200ms"],
    );
    assert_eq!(runs.len(), 2);
    for m in &runs {
        if m["fencing"] == serde_json::json!(true) {
            assert_fenced_data_safe(m);
        }
        assert_eq!(n(m, "exclusion_violations"), 0, "{m:#}");
        assert_eq!(
            m["client_ttls_ms"],
            serde_json::json!([500, 2000, 500]),
            "{m:#}"
        );
        for kind in ["restart-nopersist", "flushall"] {
            assert!(
                m["faults"][kind].as_i64().unwrap_or(0) >= 1,
                "{kind}: {m:#}"
            );
        }
        assert_grants_floor(m);
    }
}

/// The share of its attempts a run under faults that keep a quorum must grant. Measured on the
/// development box (2 shared cores, load average 24 during the run): every run of this binary
/// granted 93-100% of its attempts (`redlock-default` 95 of 102, `redlock-rwlock` 83 of 87,
/// the others 97-100%). A failed attempt waits 5 TTLs before it counts, so a lock that is
/// unavailable for seconds at a time shows as few attempts more than as a low share: a 30 s
/// `flushall` run whose staged episodes cut a minority off while an earlier episode's node was
/// still in quarantine granted 33 of 63 (1 of 30 before the nodes were marked new).
const GRANT_FLOOR: f64 = 0.75;

/// The run granted at least [`GRANT_FLOOR`] of its attempts, and some: a lock that refuses
/// everything is safe and useless, and a run that grants nothing checks nothing.
fn assert_grants_floor(m: &Value) {
    let (grants, attempts) = (n(m, "grants"), n(m, "attempts"));
    assert!(
        grants >= 20 && grants as f64 >= GRANT_FLOOR * attempts as f64,
        "{grants} of {attempts} attempts granted, under the floor of {GRANT_FLOOR}: {m:#}"
    );
}

/// The `fencelock` binary of the workspace's test build (see `workspace_build`: under
/// `./dev test` it is there already, with the workspace's feature set).
fn build_fencelock() -> PathBuf {
    fencelock_testkit::workspace_build().join("fencelock")
}

/// The real `fencelock run`, its commands leaving a background job and a `setsid` process that
/// outlive the shell, its supervisor killed with SIGKILL at random instants, nodes killed and
/// restarted empty: no process of one holder's command runs once another holder's has started.
/// With the guard not a subreaper (mutant `run-no-subreaper`) or sparing the command's
/// processes when the supervisor dies (`run-guard-spares-orphans`), the run fails. `flushall`
/// on the holder's nodes (up to all of them: a majority) is the CLI scenario of issue 27, item
/// 4; on the code before its fix this run found two holders' processes at once.
#[test]
fn run_never_lets_two_holders_processes_run_at_once() {
    let fencelock = build_fencelock();
    let runs = run_with(
        "run",
        "kill-supervisor,kill,clock-backward,flushall",
        "12s",
        &["--ttl", "1s", "--fencelock", fencelock.to_str().unwrap()],
    );
    let m = &runs[0];
    assert_eq!(n(m, "process_overlaps"), 0, "{m:#}");
    assert_eq!(m["uncovered_faults"], serde_json::json!([]), "{m:#}");
    let c = &m["commands"];
    assert!(n(c, "holders") > 0, "{m:#}");
    for proc in ["main", "bg", "setsid"] {
        assert!(
            c["processes"][proc].as_i64().unwrap_or(0) > 0,
            "{proc}: {m:#}"
        );
    }
    assert!(n(c, "supervisors_killed_holding") >= 1, "{m:#}");
}

/// A semaphore or election mode's own rule held, and its fenced storage (per slot for the
/// semaphore, under the term for the election) accepted no stale write.
fn assert_family_safe(m: &Value) {
    assert_fenced_data_safe(m);
    assert_eq!(n(m, "term_order"), 0, "{m:#}");
    assert_eq!(n(m, "too_many_holders_outside_clock_jumps"), 0, "{m:#}");
    assert_eq!(n(m, "exclusion_violations"), 0, "{m:#}");
    if m["permits"].is_u64() {
        // The permits were held at once: the rule had something to check.
        assert_eq!(n(m, "most_holders"), n(m, "permits"), "{m:#}");
    }
}

/// The semaphore (N = 2, three clients) and the election on 5 Redis nodes with restart
/// quarantine, under the faults fenced Redlock is claimed safe under.
#[test]
fn redis_semaphores_keep_n_holders_and_elections_one_leader_per_term() {
    let runs = run("semaphore,election", GUARANTEED, "6s");
    assert_eq!(runs.len(), 2);
    for m in &runs {
        assert_family_safe(m);
        assert!(
            m["faults"]["restart-nopersist"].as_i64().unwrap_or(0) >= 1,
            "{m:#}"
        );
    }
}

/// The same on a 3-member etcd cluster under its full fault mix.
#[test]
fn etcd_semaphores_keep_n_holders_and_elections_one_leader_per_term() {
    let runs = run("semaphore-etcd,election-etcd", ALL, "6s");
    assert_eq!(runs.len(), 2);
    for m in &runs {
        assert_family_safe(m);
        assert_eq!(n(m, "too_many_holders"), 0, "{m:#}");
    }
}
