//! `fencelock reseed --above TOKEN` against real redis-server nodes started by the testkit.

use std::process::{Command, Output, Stdio};

use fencelock::protocol::FENCE_COUNTER_KEY;
use fencelock_testkit::RedisNodes;

mod common;
use common::{fencelock, wait_status, with_nodes, HUNG};

fn output(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fencelock");
    // The outputs are a few lines: they fit the pipes, so waiting first cannot block.
    wait_status(&mut child, HUNG);
    child.wait_with_output().expect("fencelock's output")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The one error line of a failed run; nothing panicked.
fn one_line_error(out: &Output) -> String {
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one error line, got: {stderr}");
    assert!(lines[0].starts_with("fencelock: error: "), "{stderr}");
    lines[0].to_owned()
}

fn counter(nodes: &RedisNodes, i: usize) -> String {
    nodes.node(i).cli(&["GET", FENCE_COUNTER_KEY]).unwrap()
}

#[test]
fn reseed_raises_every_nodes_counter_and_never_lowers_one() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    // One node already above the token: it keeps its counter.
    for (i, counter) in ["1", "1", "5000000"].iter().enumerate() {
        nodes
            .node(i)
            .cli(&["SET", FENCE_COUNTER_KEY, counter])
            .unwrap();
    }
    let out = output(with_nodes(home.path(), &nodes.urls()).args(["reseed", "--above", "1000000"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        (0..3).map(|i| counter(&nodes, i)).collect::<Vec<_>>(),
        ["1000000", "1000000", "5000000"]
    );
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "one line per node: {stdout}");
    for (i, expect) in ["1000000", "1000000", "5000000"].iter().enumerate() {
        let port = nodes.node(i).port().to_string();
        assert!(lines[i].contains(&port), "{stdout}");
        assert!(
            lines[i].ends_with(&format!("{FENCE_COUNTER_KEY} = {expect}")),
            "{stdout}"
        );
    }
    assert!(
        text(&out.stderr).contains("on 3 of 3 node(s)"),
        "{}",
        text(&out.stderr)
    );

    // A smaller token changes nothing; --json gives the counters.
    let out =
        output(with_nodes(home.path(), &nodes.urls()).args(["--json", "reseed", "--above", "7"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["granted"], 3, "{json}");
    let counters: Vec<&str> = json["counters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["counter"].as_str().unwrap())
        .collect();
    assert_eq!(counters, ["1000000", "1000000", "5000000"]);
    assert_eq!(counter(&nodes, 0), "1000000");
}

/// Issue 27 item 6: a node without a counter lost its data, and may have recorded a token above
/// TOKEN (the storage's last token can lag the last one issued); a counter created there would
/// make it trusted below what it recorded. Reseed raises the counters that exist and names the
/// nodes it left alone; it creates counters only when every node lacks one (a total loss).
/// Before the fix it set n0's counter to 1000.
#[test]
fn reseed_creates_no_counter_on_a_node_that_lost_it() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    for i in 1..3 {
        nodes.node(i).cli(&["SET", FENCE_COUNTER_KEY, "5"]).unwrap();
    }
    let lost = nodes.node(0).port().to_string();
    let out = output(with_nodes(home.path(), &nodes.urls()).args(["reseed", "--above", "1000"]));
    assert_eq!(
        counter(&nodes, 0),
        "(nil)",
        "reseed created a counter on the node that lost its own: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(counter(&nodes, 1), "1000");
    assert_eq!(counter(&nodes, 2), "1000");
    let stdout = text(&out.stdout);
    let line = stdout.lines().find(|l| l.contains(&lost)).unwrap();
    assert!(
        line.contains("not set") && line.contains("no fence counter"),
        "{stdout}"
    );
    let stderr = text(&out.stderr);
    assert!(stderr.contains("on 2 of 3 node(s)"), "{stderr}");

    // Two of three without a counter: fewer than a quorum can be raised; exit 69, one line
    // naming both, nothing created.
    nodes.node(1).cli(&["DEL", FENCE_COUNTER_KEY]).unwrap();
    let other = nodes.node(1).port().to_string();
    let out = output(with_nodes(home.path(), &nodes.urls()).args(["reseed", "--above", "2000"]));
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    let err = one_line_error(&out);
    assert!(
        err.contains(&lost) && err.contains(&other) && err.contains("no fence counter"),
        "{err}"
    );
    assert!(err.contains("every node"), "{err}");
    assert_eq!(counter(&nodes, 0), "(nil)");
    assert_eq!(counter(&nodes, 1), "(nil)");
    assert_eq!(counter(&nodes, 2), "2000");

    // Every node without one: a total loss, and reseed is the way back: it creates them all.
    nodes.node(2).cli(&["DEL", FENCE_COUNTER_KEY]).unwrap();
    let out = output(with_nodes(home.path(), &nodes.urls()).args(["reseed", "--above", "3000"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        (0..3).map(|i| counter(&nodes, i)).collect::<Vec<_>>(),
        ["3000", "3000", "3000"]
    );
}

#[test]
fn reseed_needs_a_quorum_and_names_the_nodes_that_did_not_answer() {
    let nodes = RedisNodes::start(3).unwrap();
    let home = tempfile::tempdir().unwrap();
    // Nodes that have their counters (reseed raises only those while any node has one).
    for node in nodes.iter() {
        node.cli(&["SET", FENCE_COUNTER_KEY, "1"]).unwrap();
    }
    nodes.node(0).kill().unwrap();
    let dead = nodes.node(0).port().to_string();

    // Two of three: a quorum. The dead node is named on its line and in the summary.
    let out = output(with_nodes(home.path(), &nodes.urls()).args(["reseed", "--above", "42"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let line = stdout.lines().find(|l| l.contains(&dead)).unwrap();
    assert!(line.contains("not set"), "{stdout}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("on 2 of 3 node(s)"), "{stderr}");
    assert!(
        stderr.contains("did not answer") && stderr.contains(&dead),
        "{stderr}"
    );
    assert_eq!(counter(&nodes, 1), "42");

    // One of three: no quorum, exit 69, one line naming both nodes that did not answer.
    nodes.node(1).kill().unwrap();
    let other = nodes.node(1).port().to_string();
    let out = output(with_nodes(home.path(), &nodes.urls()).args(["reseed", "--above", "43"]));
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    let err = one_line_error(&out);
    assert!(
        err.contains("raised the counter on only 1 of 3 node(s), 2 needed"),
        "{err}"
    );
    assert!(err.contains(&dead) && err.contains(&other), "{err}");
    assert!(err.contains("run the same command again"), "{err}");
    assert_eq!(counter(&nodes, 2), "43");
}

#[test]
fn reseed_refuses_a_token_the_fences_cannot_follow_and_etcd_node_sets() {
    let nodes = RedisNodes::start(1).unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = output(with_nodes(home.path(), &nodes.urls()).args([
        "reseed",
        "--above",
        &i64::MAX.to_string(),
    ]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = one_line_error(&out);
    assert!(err.contains("signed 64-bit"), "{err}");
    assert_eq!(
        nodes.node(0).cli(&["GET", FENCE_COUNTER_KEY]).unwrap(),
        "(nil)"
    );

    let out = output(fencelock(home.path()).args([
        "--nodes",
        "etcd://127.0.0.1:1",
        "reseed",
        "--above",
        "5",
    ]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = one_line_error(&out);
    assert!(err.contains("revisions"), "{err}");

    // The help says when to use it.
    let out = output(fencelock(home.path()).args(["reseed", "--help"]));
    assert!(out.status.success());
    let help = text(&out.stdout);
    assert!(help.contains("every node lost its fence counter"), "{help}");
    assert!(help.contains("--above <TOKEN>"), "{help}");
}
