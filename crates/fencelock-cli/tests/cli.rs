//! Drives the built `fencelock` binary against real redis-server nodes started by the testkit.
//!
//! Safety is asserted exactly (no two holders overlap, the command is stopped when the lock is
//! lost); waits for liveness are generous so that a loaded two-core box does not flake.

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use fencelock_testkit::{RedisCluster, RedisNode, RedisNodes, RedisOptions};

mod common;
use common::{fencelock, output, wait_output, with_nodes, LOOSE_NODE_TIMEOUT};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The error lines of a failed run, without the "using the dev set" notice; asserts that there
/// is exactly one and that nothing panicked.
fn one_line_error(out: &Output) -> String {
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    assert!(
        !stderr.contains("RUST_BACKTRACE"),
        "backtrace hint: {stderr}"
    );
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("fencelock: no --nodes"))
        // The library's warnings, shown by default (e.g. a node in restart quarantine).
        .filter(|l| !l.trim_start().starts_with("WARN "))
        .collect();
    assert_eq!(lines.len(), 1, "expected one error line, got: {stderr}");
    assert!(lines[0].starts_with("fencelock: error: "), "{stderr}");
    lines[0].to_owned()
}

fn wait_for_file_containing(path: &Path, needle: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if std::fs::read_to_string(path).is_ok_and(|t| t.contains(needle)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "{} did not get {needle:?} within {limit:?}: {:?}",
        path.display(),
        std::fs::read_to_string(path)
    );
}

/// Whether a PID is gone: no such process, or a zombie waiting for its reaper.
fn pid_gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                == Some('Z')
        })
        .unwrap_or(true)
}

fn wait_pid_gone(pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if pid_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn home() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn two_runs_on_one_resource_never_overlap() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = home();
    let log = home.path().join("marks.log");
    let script = format!(
        "echo \"start $ID\" >> {log}; sleep 0.2; echo \"end $ID\" >> {log}",
        log = log.display()
    );
    let children: Vec<Child> = (0..4)
        .map(|id| {
            with_nodes(home.path(), &nodes.urls())
                .args(["run", "--wait", "120s", "shared", "--", "sh", "-c", &script])
                .env("ID", id.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = wait_output(child, Duration::from_secs(180));
        assert!(
            out.status.success(),
            "{:?}: {}",
            out.status,
            text(&out.stderr)
        );
    }
    let marks = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = marks.lines().collect();
    assert_eq!(lines.len(), 8, "{marks}");
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ").expect(&marks);
        let end = pair[1].strip_prefix("end ").expect(&marks);
        assert_eq!(start, end, "runs interleaved:\n{marks}");
    }
}

#[test]
fn no_wait_fails_with_75_while_the_lock_is_held_and_the_command_does_not_run() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = home();
    let acquired =
        output(with_nodes(home.path(), &nodes.urls()).args(["--ttl", "60s", "acquire", "job"]));
    assert!(acquired.status.success(), "{}", text(&acquired.stderr));
    let token = text(&acquired.stdout).trim().to_owned();
    // The owner value (32 hex digits, then the holder label the command stores by default:
    // host and pid), then the TTL the lock was taken with.
    let (hex, rest) = token.split_at(32);
    assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    assert!(
        rest.starts_with(" host=") && rest.contains(" pid="),
        "{token}"
    );
    assert!(token.ends_with(".ttl60000ms"), "{token}");

    let marker = home.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let out = output(with_nodes(home.path(), &nodes.urls()).args([
        "run",
        "--no-wait",
        "job",
        "--",
        "sh",
        "-c",
        &touch,
    ]));
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    let err = one_line_error(&out);
    assert!(err.contains("held by another client"), "{err}");
    assert!(!marker.exists(), "the command ran without the lock");

    let released =
        output(with_nodes(home.path(), &nodes.urls()).args(["release", "job", "--owner", &token]));
    assert!(released.status.success(), "{}", text(&released.stderr));
    let out = output(with_nodes(home.path(), &nodes.urls()).args([
        "run",
        "--no-wait",
        "job",
        "--",
        "sh",
        "-c",
        &touch,
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(marker.exists());
}

#[test]
fn run_passes_the_environment_and_the_exit_status() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = home();
    let out = output(with_nodes(home.path(), &nodes.urls()).args([
        "run",
        "--fencing",
        "env-job",
        "--",
        "sh",
        "-c",
        "echo \"$FENCELOCK_RESOURCE $FENCELOCK_TOKEN\"; exit 3",
    ]));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut words = stdout.split_whitespace();
    assert_eq!(words.next(), Some("env-job"));
    let token: u64 = words.next().and_then(|t| t.parse().ok()).expect(&stdout);
    assert!(token >= 1);

    // Killed by a signal: 128 + N, like a shell.
    let out = output(with_nodes(home.path(), &nodes.urls()).args([
        "run",
        "env-job",
        "--",
        "sh",
        "-c",
        "kill -9 $$",
    ]));
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));

    // The lock was released after each run.
    let out = output(with_nodes(home.path(), &nodes.urls()).args(["--json", "inspect", "env-job"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["summary"]["holder"].is_null(), "{json}");
    // The nodes' fence counter (one per node) is the token the fenced run got: only that run
    // was fenced.
    assert_eq!(json["fence_counter_key"], "fencelock:fence", "{json}");
    assert_eq!(json["summary"]["max_fence_counter"], token, "{json}");
}

/// `run --metrics-file`: the run's metrics land in the file when it ends (the grant, the
/// release, the nodes' votes), whatever the command's status; a path that cannot be written is
/// refused before the command runs.
#[test]
fn run_writes_its_metrics_to_the_metrics_file() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = home();
    let path = home.path().join("run.prom");
    let out = output(with_nodes(home.path(), &nodes.urls()).args([
        "run",
        "--metrics-file",
        path.to_str().unwrap(),
        "metrics-job",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let prom = std::fs::read_to_string(&path).unwrap();
    assert!(!path.with_extension("prom.tmp").exists());
    let line = |prefix: &str| -> f64 {
        prom.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in:\n{prom}"))
    };
    // Uncontended, `run` is granted at its first attempt (mode "try").
    assert_eq!(
        line("fencelock_acquire_seconds_count{outcome=\"granted\","),
        1.0
    );
    assert_eq!(line("fencelock_releases_total{outcome=\"released\"}"), 1.0);
    let granted_votes = prom
        .lines()
        .filter(|l| {
            l.starts_with("fencelock_node_votes_total")
                && l.contains("op=\"acquire\"")
                && l.contains("outcome=\"granted\"")
        })
        .count();
    // A round returns at its quorum; an answer it did not wait for is not counted.
    assert!(granted_votes >= 2, "{prom}");

    let marker = home.path().join("ran");
    let out = output(with_nodes(home.path(), &nodes.urls()).args([
        "run",
        "--metrics-file",
        home.path().join("no/such/dir/run.prom").to_str().unwrap(),
        "metrics-job",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]));
    assert!(!out.status.success());
    let err = one_line_error(&out);
    assert!(err.contains("--metrics-file"), "{err}");
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn the_command_is_stopped_when_the_majority_is_paused() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = home();
    let marks = home.path().join("marks");
    // The command ignores SIGTERM, so only SIGKILL stops it.
    let script = format!(
        "trap 'echo term >> {m}' TERM; echo $$ > {m}.pid; echo started >> {m}; while :; do sleep 0.05; done",
        m = marks.display()
    );
    let child = fencelock(home.path())
        .arg("--nodes")
        .arg(nodes.urls().join(","))
        .args([
            "--ttl",
            "2s",
            "--node-timeout",
            LOOSE_NODE_TIMEOUT,
            "--no-quarantine",
            "run",
            "paused",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file_containing(&marks, "started", Duration::from_secs(30));
    let pid: i32 = std::fs::read_to_string(marks.with_extension("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nodes.node(0).pause().unwrap();
    nodes.node(1).pause().unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    nodes.node(0).resume().unwrap();
    nodes.node(1).resume().unwrap();

    assert_eq!(out.status.code(), Some(76), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("was lost"), "{stderr}");
    let marks_text = std::fs::read_to_string(&marks).unwrap();
    assert!(
        marks_text.contains("term"),
        "SIGTERM came first: {marks_text}"
    );
    assert!(
        wait_pid_gone(pid, Duration::from_secs(10)),
        "the command survived SIGKILL"
    );
}

#[test]
fn sigterm_to_fencelock_is_forwarded_to_the_command() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = home();
    let marks = home.path().join("marks");
    let script = format!(
        "trap 'echo got-term >> {m}; exit 7' TERM; echo started >> {m}; while :; do sleep 0.05; done",
        m = marks.display()
    );
    let child = with_nodes(home.path(), &nodes.urls())
        .args(["run", "signals", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file_containing(&marks, "started", Duration::from_secs(30));
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: signals our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let out = wait_output(child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(std::fs::read_to_string(&marks)
        .unwrap()
        .contains("got-term"));

    // The lock was released: a --no-wait run gets it at once.
    let out = output(with_nodes(home.path(), &nodes.urls()).args([
        "run",
        "--no-wait",
        "signals",
        "--",
        "true",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn doctor_json(home: &Path, urls: &[String]) -> (Option<i32>, serde_json::Value) {
    let out = output(fencelock(home).arg("--nodes").arg(urls.join(",")).args([
        "--node-timeout",
        "1s",
        "--ttl",
        "1s",
        "--json",
        "doctor",
    ]));
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", text(&out.stdout), text(&out.stderr)));
    (out.status.code(), json)
}

fn failed_checks(json: &serde_json::Value) -> Vec<String> {
    json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["check"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn doctor_passes_a_clean_set_and_fails_replicas_and_eviction() {
    let home = home();
    let clean = RedisNodes::start(3).unwrap();
    let (code, json) = doctor_json(home.path(), &clean.urls());
    assert_eq!(code, Some(0), "{json:#}");
    assert!(failed_checks(&json).is_empty(), "{json:#}");

    let master = RedisNode::start().unwrap();
    let replica = RedisNode::start_with(RedisOptions::default().replica_of(master.port())).unwrap();
    let other = RedisNode::start().unwrap();
    let (code, json) = doctor_json(home.path(), &[master.url(), replica.url(), other.url()]);
    assert_eq!(code, Some(1), "{json:#}");
    let failed = failed_checks(&json);
    assert_eq!(
        failed.iter().filter(|c| *c == "replication").count(),
        2,
        "both the master with a replica and the replica fail: {json:#}"
    );

    let lru = RedisNode::start_with(
        RedisOptions::default().maxmemory_policy(Some("allkeys-lru".to_owned())),
    )
    .unwrap();
    let (code, json) = doctor_json(
        home.path(),
        &[clean.node(0).url(), clean.node(1).url(), lru.url()],
    );
    assert_eq!(code, Some(1), "{json:#}");
    assert_eq!(failed_checks(&json), ["eviction"], "{json:#}");

    // The human table says the same, with a hint.
    let out = output(fencelock(home.path()).arg("--nodes").arg(lru.url()).args([
        "--node-timeout",
        "1s",
        "doctor",
    ]));
    assert_eq!(out.status.code(), Some(1));
    let table = text(&out.stdout);
    assert!(table.contains("fail  eviction"), "{table}");
    assert!(
        table.contains("hint: set maxmemory-policy noeviction"),
        "{table}"
    );
}

/// `doctor` and `inspect` on a `redis+cluster://` URL (issue 31): the checks run on the primary
/// that owns the tag's slot; the cluster passes while every slot is served, and fails once a
/// shard is gone. The same node named with `redis://` still fails its `cluster` check (it is
/// not a standalone node). `inspect` reads the tagged keys there: the holder, its label, TTL and
/// the counter, with the slot and the primary it read them on.
#[test]
fn doctor_and_inspect_read_a_cluster_url_at_the_shard_of_its_tag() {
    let home = home();
    let cluster = RedisCluster::start().unwrap();
    let (code, json) = doctor_json(home.path(), &[cluster.url()]);
    assert_eq!(code, Some(0), "{json:#}");
    assert!(failed_checks(&json).is_empty(), "{json:#}");
    let slot = cluster.key_slot("{fencelock}").unwrap();
    let owner = cluster.slot_owner(slot).unwrap();
    let shard = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "cluster")
        .unwrap_or_else(|| panic!("no cluster check: {json:#}"));
    assert_eq!(shard["status"], "pass", "{json:#}");
    let detail = shard["detail"].as_str().unwrap_or_default().to_owned();
    let at = format!("slot {slot} on 127.0.0.1:{}", cluster.node(owner).port());
    assert!(detail.contains(&at), "{detail}");
    // The shard's primary takes writes cut off from its replica (min-replicas-to-write 0, the
    // default): a warning; with 1, a pass.
    let split = |json: &serde_json::Value| {
        json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "split brain")
            .unwrap_or_else(|| panic!("no split brain check: {json:#}"))["status"]
            .clone()
    };
    assert_eq!(split(&json), "warn", "{json:#}");
    cluster
        .node(owner)
        .cli(&["CONFIG", "SET", "min-replicas-to-write", "1"])
        .unwrap();
    let (code, json) = doctor_json(home.path(), &[cluster.url()]);
    assert_eq!(code, Some(0), "{json:#}");
    assert_eq!(split(&json), "pass", "{json:#}");

    let urls = [cluster.url()];
    let out = output(with_nodes(home.path(), &urls).args([
        "--label",
        "cluster job",
        "acquire",
        "--fencing",
        "report",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let owner_value = text(&out.stdout).trim().to_string();
    let stored = owner_value
        .split_once(".ttl")
        .map_or(owner_value.as_str(), |(o, _)| o)
        .to_string();
    let out = output(with_nodes(home.path(), &urls).args(["inspect", "report"]));
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{}\n{shown}", text(&out.stderr));
    assert!(
        shown.contains(&format!("held by owner {stored}")),
        "{shown}"
    );
    assert!(shown.contains("\"cluster job\""), "{shown}");
    let primary = format!("127.0.0.1:{}", cluster.node(owner).port());
    assert!(
        shown.contains(&format!(
            "keys tagged {{fencelock}} in slot {slot}, read on its primary {primary}"
        )),
        "{shown}"
    );
    let out = output(with_nodes(home.path(), &urls).args(["--json", "inspect", "report"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let node = &json["nodes"][0];
    assert_eq!(node["owner"], stored.as_str(), "{json:#}");
    assert_eq!(node["cluster"]["slot"], slot, "{json:#}");
    assert_eq!(node["cluster"]["primary"], primary.as_str(), "{json:#}");
    assert!(node["pttl_ms"].as_i64().is_some_and(|t| t > 0), "{json:#}");
    // The counter inspect shows is the one on the owner, under the tag.
    let counter = cluster
        .node(owner)
        .cli(&["GET", "{fencelock}fencelock:fence"])
        .unwrap();
    assert_eq!(node["fence_counter"], counter.as_str(), "{json:#}");
    let out =
        output(with_nodes(home.path(), &urls).args(["release", "--owner", &owner_value, "report"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = output(with_nodes(home.path(), &urls).args(["inspect", "report"]));
    assert!(
        text(&out.stdout).contains("not held"),
        "{}",
        text(&out.stdout)
    );

    let (code, json) = doctor_json(home.path(), &[cluster.node(owner).url()]);
    assert_eq!(code, Some(1), "{json:#}");
    assert!(
        failed_checks(&json).contains(&"cluster".to_owned()),
        "{json:#}"
    );

    // Another shard gone, primary and replica: its slots are not served, the cluster is down.
    let other = (0..6)
        .find(|n| {
            *n != owner
                && cluster
                    .node(*n)
                    .cli(&["ROLE"])
                    .unwrap()
                    .starts_with("master")
        })
        .unwrap();
    let replica = cluster.replica_of(other).unwrap();
    cluster.node(replica).kill().unwrap();
    cluster.node(other).kill().unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let (code, json) = doctor_json(home.path(), &[cluster.url()]);
        if failed_checks(&json).contains(&"cluster".to_owned()) {
            assert_eq!(code, Some(1), "{json:#}");
            break;
        }
        assert!(Instant::now() < deadline, "never failed: {json:#}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Issue 27, item 5 through the CLI: a client of nodes 4-8 is refused where one of nodes 1-5
/// recorded its set, `doctor` fails the `node set` check, and `nodes --record` moves the
/// recorded set to the new list, after which the old list is the one refused.
#[test]
fn overlapping_lists_are_refused_and_doctor_and_record_say_so() {
    let home = home();
    let nodes = RedisNodes::start(8).unwrap();
    let urls = nodes.urls();
    let (old, new) = (&urls[0..5], &urls[3..8]);
    let acquire = |list: &[String], resource: &str| {
        output(with_nodes(home.path(), list).args(["acquire", resource]))
    };
    let out = acquire(old, "a");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = acquire(new, "b");
    assert!(
        !out.status.success(),
        "a client of nodes 4-8 took a lock beside nodes 1-5"
    );
    let err = text(&out.stderr);
    assert!(err.contains("another node set"), "{err}");
    let (code, json) = doctor_json(home.path(), new);
    assert_eq!(code, Some(1), "{json:#}");
    assert!(
        failed_checks(&json).contains(&"node set".to_owned()),
        "{json:#}"
    );
    let (_, json) = doctor_json(home.path(), old);
    assert!(
        !failed_checks(&json).contains(&"node set".to_owned()),
        "{json:#}"
    );

    let out = output(with_nodes(home.path(), new).args(["nodes", "--record"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = acquire(new, "b");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = acquire(old, "c");
    assert!(!out.status.success(), "the old list still took a lock");
    assert!(
        text(&out.stderr).contains("another node set"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn doctor_reports_an_unreachable_node_as_a_failing_check() {
    let nodes = RedisNodes::start(2).unwrap();
    let home = home();
    let mut urls = nodes.urls();
    urls.push(format!("redis://127.0.0.1:{}", free_port()));
    let (code, json) = doctor_json(home.path(), &urls);
    assert_eq!(code, Some(1), "{json:#}");
    assert!(
        failed_checks(&json).contains(&"reachable".to_owned()),
        "{json:#}"
    );
}

#[test]
fn up_and_down_leave_no_process_behind() {
    let home = home();
    let out = output(fencelock(home.path()).args(["up", "--nodes", "3", "--json"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pids: Vec<i32> = json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| i32::try_from(n["pid"].as_i64().unwrap()).unwrap())
        .collect();
    assert_eq!(pids.len(), 3);
    let state = PathBuf::from(json["state_file"].as_str().unwrap());
    assert!(state.starts_with(home.path()), "{}", state.display());

    // Make sure `down` runs even if an assertion below fails.
    struct Down<'a>(&'a Path);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = output(fencelock(self.0).arg("down"));
        }
    }
    let guard = Down(home.path());

    assert!(pids.iter().all(|pid| !pid_gone(*pid)));
    // `up` marks its nodes new at birth: a client given their URLs, with restart quarantine on
    // (the default), counts them at once (before, it kept them out for a TTL: issue 12).
    let urls: Vec<&str> = json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["url"].as_str().unwrap())
        .collect();
    let fresh = output(
        fencelock(home.path())
            .env("FENCELOCK_NODES", urls.join(","))
            .args(["--node-timeout", LOOSE_NODE_TIMEOUT, "acquire", "dev-fresh"]),
    );
    assert!(fresh.status.success(), "{}", text(&fresh.stderr));
    let again = output(fencelock(home.path()).arg("up"));
    assert!(again.status.success());
    assert!(
        text(&again.stdout).contains("already up"),
        "{}",
        text(&again.stdout)
    );

    // Programs built on the library find the dev set through `nodes`.
    let nodes = output(fencelock(home.path()).args(["nodes", "--export"]));
    assert!(nodes.status.success(), "{}", text(&nodes.stderr));
    let urls: Vec<String> = json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["url"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        text(&nodes.stdout).trim(),
        format!("export FENCELOCK_NODES={}", urls.join(","))
    );

    // Without --nodes, commands use the dev set and say so.
    let run = output(fencelock(home.path()).args([
        "--node-timeout",
        LOOSE_NODE_TIMEOUT,
        "run",
        "--wait",
        "30s",
        "dev-job",
        "--",
        "true",
    ]));
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(
        text(&run.stderr).contains("using the dev set"),
        "{}",
        text(&run.stderr)
    );

    drop(guard);
    for pid in pids {
        assert!(
            wait_pid_gone(pid, Duration::from_secs(10)),
            "redis-server {pid} left behind"
        );
    }
    assert!(!state.exists(), "state file left behind");
    let down_again = output(fencelock(home.path()).arg("down"));
    assert!(down_again.status.success());
    assert!(text(&down_again.stdout).contains("no dev set"));
}

#[test]
fn bad_input_gives_one_line_errors_and_documented_codes() {
    let home = home();

    // A bad URL.
    let out = output(fencelock(home.path()).args([
        "--nodes",
        "localhost:6379",
        "run",
        "x",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(2));
    let err = one_line_error(&out);
    assert!(err.contains("localhost:6379"), "{err}");

    // No nodes anywhere.
    let out = output(fencelock(home.path()).args(["inspect", "x"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line_error(&out).contains("fencelock up"));

    // A duration without a unit is a clap usage error.
    let out = output(fencelock(home.path()).args(["--ttl", "30", "doctor"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("30s"), "{}", text(&out.stderr));

    // Unreachable nodes.
    let dead: Vec<String> = (0..3)
        .map(|_| format!("redis://127.0.0.1:{}", free_port()))
        .collect();
    let out = output(with_nodes(home.path(), &dead).args(["acquire", "x"]));
    assert_eq!(out.status.code(), Some(69));
    assert!(
        one_line_error(&out).contains("connection refused (is the node running?) on all 3 nodes")
    );

    let nodes = RedisNodes::start(3).unwrap();
    let urls = nodes.urls();

    // Nodes up for less than a TTL are in restart quarantine by default: 69, with the way out.
    let out = output(
        fencelock(home.path())
            .arg("--nodes")
            .arg(urls.join(","))
            .args(["--ttl", "60s", "acquire", "fresh"]),
    );
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    assert!(one_line_error(&out).contains("--no-quarantine"));

    // A wrong token: 76, and the key is untouched.
    let acquired = output(with_nodes(home.path(), &urls).args(["--ttl", "60s", "acquire", "held"]));
    assert!(acquired.status.success(), "{}", text(&acquired.stderr));
    let token = text(&acquired.stdout).trim().to_owned();
    // What the nodes store: the owner value, without the TTL the printed token carries.
    let token = token
        .split_once(".ttl")
        .map_or(token.as_str(), |(owner, _)| owner)
        .to_owned();
    for op in ["release", "extend"] {
        let out =
            output(with_nodes(home.path(), &urls).args([op, "held", "--owner", "not-the-token"]));
        assert_eq!(out.status.code(), Some(76), "{op}: {}", text(&out.stderr));
        assert!(one_line_error(&out).contains("does not hold the lock"));
    }
    // A node whose SET timed out on a loaded machine may lack the key; none may hold another.
    let values: Vec<String> = nodes
        .iter()
        .map(|n| n.cli(&["GET", "held"]).unwrap())
        .collect();
    assert!(
        values.iter().filter(|v| **v == token).count() >= 2,
        "{values:?}"
    );
    assert!(
        values.iter().all(|v| *v == token || v == "(nil)"),
        "{values:?}"
    );

    // A key of the wrong type at the resource name.
    for node in nodes.iter() {
        node.cli(&["RPUSH", "a-list", "x"]).unwrap();
    }
    for args in [
        &["acquire", "a-list"][..],
        &["run", "--no-wait", "a-list", "--", "true"][..],
        &["release", "a-list", "--owner", "t"][..],
    ] {
        let out = output(with_nodes(home.path(), &urls).args(args));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(one_line_error(&out).contains("not a lock key"), "{args:?}");
    }
    let out = output(with_nodes(home.path(), &urls).args(["inspect", "a-list"]));
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("wrong type: list"),
        "{}",
        text(&out.stdout)
    );

    // A command that does not exist.
    let out = output(with_nodes(home.path(), &urls).args(["run", "x", "--", "/no/such/command"]));
    assert_eq!(out.status.code(), Some(127));
    one_line_error(&out);
}

#[test]
fn inspect_shows_the_waiting_line_and_run_waits_in_it() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = home();
    let urls = nodes.urls();
    let acquired = output(with_nodes(home.path(), &urls).args(["--ttl", "60s", "acquire", "q"]));
    assert!(acquired.status.success(), "{}", text(&acquired.stderr));
    let token = text(&acquired.stdout).trim().to_owned();

    // `run` waits for the lock: in line.
    let mut waiter = with_nodes(home.path(), &urls)
        .args(["run", "q", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let waiting = |home: &Path| -> Vec<u64> {
        let out = output(with_nodes(home, &urls).args(["--json", "inspect", "q"]));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["waiting"].as_u64().unwrap())
            .collect()
    };
    let started = Instant::now();
    while waiting(home.path()) != [1, 1, 1] {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the waiter never stood in line: {:?}",
            waiting(home.path())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let table = output(with_nodes(home.path(), &urls).args(["inspect", "q"]));
    assert!(
        text(&table.stdout).contains("WAITING"),
        "{}",
        text(&table.stdout)
    );

    let released = output(with_nodes(home.path(), &urls).args(["release", "q", "--owner", &token]));
    assert!(released.status.success(), "{}", text(&released.stderr));
    let status = waiter.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(waiting(home.path()), [0, 0, 0]);
}

#[test]
fn inspect_shows_who_holds_a_lock_with_its_label() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = home();
    let urls = nodes.urls();
    let out = output(with_nodes(home.path(), &urls).args([
        "--label",
        "nightly report",
        "acquire",
        "held-job",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let token = text(&out.stdout).trim().to_string();
    // The lock key keeps the owner value, the label after the token; the printed token adds
    // the lock's TTL after it (`.ttl10000ms`), which stays with the user. The command exits at
    // a quorum, so one node may not have the key.
    let stored: Vec<String> = (0..3)
        .map(|i| {
            nodes
                .node(i)
                .cli(&["GET", "held-job"])
                .unwrap()
                .trim()
                .to_string()
        })
        .filter(|v| v.contains(" label=nightly report"))
        .collect();
    assert!(stored.len() >= 2, "{stored:?}");
    for value in stored {
        assert_eq!(format!("{value}.ttl10000ms"), token);
    }
    let out = output(with_nodes(home.path(), &urls).args(["inspect", "held-job"]));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("holder: \"nightly report\" (process "),
        "{shown}"
    );
    let out = output(with_nodes(home.path(), &urls).args(["--json", "inspect", "held-job"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let label = json["summary"]["holder_label"].as_str().unwrap();
    assert!(
        label.starts_with("host=") && label.ends_with(" label=nightly report"),
        "{json}"
    );
    // Released with the token: the label goes with the lock.
    let out =
        output(with_nodes(home.path(), &urls).args(["release", "held-job", "--owner", &token]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = output(with_nodes(home.path(), &urls).args(["--json", "inspect", "held-job"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["summary"]["holder_label"].is_null(), "{json}");
}
