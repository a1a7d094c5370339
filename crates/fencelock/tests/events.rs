//! The events an operator acts on, emitted through `tracing` at `warn` in every build: a lost
//! lock (with its cause and what to do), a node or an etcd cluster that stops answering (once,
//! and at `info` when it answers again), a node in restart quarantine. A capturing subscriber of the test's own
//! (set as the default of the test's thread, where its current-thread runtime runs every task)
//! reads them from a client on real nodes.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock::{AutoExtend, Client, Config, ErrorKind};
use fencelock_testkit::RedisNodes;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Every event: its level and text (the message, then the other fields).
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(Level, String)>>>);

impl Capture {
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(self.clone())
    }

    fn at(&self, level: Level, needle: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(l, text)| *l == level && text.contains(needle))
            .map(|(_, text)| text.clone())
            .collect()
    }
}

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut text = Text(String::new());
        event.record(&mut text);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), text.0));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn config(nodes: &RedisNodes) -> Config {
    Config::new(nodes.urls())
        .with_ttl(Duration::from_millis(900))
        .with_node_timeout(Duration::from_millis(300))
        .with_connect_timeout(Duration::from_millis(300))
        .with_quarantine(false)
}

/// Locks and releases `resource` until the `info` that a node answers again shows up (up to
/// 20 tries, 100 ms apart); those infos.
async fn answers_again(capture: &Capture, client: &Client, resource: &str) -> Vec<String> {
    let mut back = Vec::new();
    for _ in 0..20 {
        if let Ok(lock) = client.try_acquire(resource).await {
            lock.release().await.unwrap();
        }
        back = capture.at(Level::INFO, "answers again");
        if !back.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    back
}

#[tokio::test]
async fn a_lost_lock_is_a_warning_that_says_what_to_do() {
    let capture = Capture::default();
    let _default = capture.install();
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(&nodes)).unwrap();
    let guard = client
        .try_acquire("events:lost")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new().with_interval(Duration::from_millis(100)));
    for node in &nodes {
        node.cli(&["DEL", "events:lost"]).unwrap();
    }
    tokio::time::timeout(Duration::from_secs(5), guard.lost().fired())
        .await
        .expect("the lost signal fired");
    let _ = guard.release().await;
    let warnings = capture.at(Level::WARN, "events:lost");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("lost"), "{}", warnings[0]);
    assert!(warnings[0].contains("stop the work"), "{}", warnings[0]);
    // A lock released in time is no event.
    let lock = client.try_acquire("events:kept").await.unwrap();
    let guard = lock.auto_extend(AutoExtend::new());
    guard.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(capture.at(Level::WARN, "events:kept").is_empty());
}

#[tokio::test]
async fn a_node_that_stops_answering_is_one_warning_and_its_return_is_noted() {
    let capture = Capture::default();
    let _default = capture.install();
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(&nodes)).unwrap();
    client
        .try_acquire("events:a")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Every node has answered once (connecting waits for each): node 2 is known to be up.
    let votes = client.connect().await;
    assert_eq!(votes.granted(), 3, "{votes}");
    nodes.node(2).pause().unwrap();
    for resource in ["events:b", "events:c", "events:d"] {
        // Two of three still grant.
        client
            .try_acquire(resource)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    // A round returns at its quorum; the paused node's requests time out in the background,
    // a node timeout later.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let name = client.nodes()[2].redacted();
    let warnings = capture.at(Level::WARN, "did not answer");
    assert_eq!(
        warnings.len(),
        1,
        "one warning while it stays down: {warnings:?}"
    );
    assert!(warnings[0].contains(&name), "{} names {name}", warnings[0]);
    assert!(warnings[0].contains("fencelock doctor"), "{}", warnings[0]);
    nodes.node(2).resume().unwrap();
    let back = answers_again(&capture, &client, "events:e").await;
    assert_eq!(back.len(), 1, "{back:?}");
    assert!(back[0].contains(&name));
}

#[tokio::test]
async fn a_node_that_never_answered_is_left_to_the_errors_that_name_it() {
    // A one-shot command that meets a dead node prints one error line naming it, not a
    // warning besides: only a node that answered before "stops answering".
    let capture = Capture::default();
    let _default = capture.install();
    let nodes = RedisNodes::start(3).unwrap();
    nodes.node(2).kill().unwrap();
    let client = Client::new(config(&nodes)).unwrap();
    client
        .try_acquire("events:dead")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(capture.at(Level::WARN, "did not answer").is_empty());
}

#[tokio::test]
async fn a_node_in_restart_quarantine_is_a_warning_that_says_what_to_do() {
    let capture = Capture::default();
    let _default = capture.install();
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(&nodes).with_quarantine(true)).unwrap();
    let err = client.try_acquire("events:q").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let warnings = capture.at(Level::WARN, "restart quarantine");
    assert_eq!(warnings.len(), 3, "one per node: {warnings:?}");
    assert!(
        warnings.iter().all(|w| w.contains("appendfsync always")),
        "{warnings:?}"
    );
}

/// A client of the etcd members at `endpoints` (`http://` URLs) with quick timeouts, after one
/// lock on `resource` taken and released (the cluster answered).
#[cfg(feature = "etcd")]
async fn etcd_client_that_answered(endpoints: &[String], resource: &str) -> Client {
    let urls: Vec<String> = endpoints
        .iter()
        .map(|e| e.replacen("http://", "etcd://", 1))
        .collect();
    // The shortest request timeout etcd gets (a write waits for a raft round): 1 s.
    let client = Client::new(
        Config::new(urls)
            .with_ttl(Duration::from_secs(2))
            .with_node_timeout(Duration::from_millis(300))
            .with_connect_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    client
        .try_acquire(resource)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    client
}

/// The etcd client sends a request to one member at a time, and every call gets one answer,
/// the cluster's: a cluster that stops answering (here its only member, stopped with
/// `kill -STOP`) is one warning that says what to do, however many calls meet it, and its
/// return is noted at `info`.
#[cfg(feature = "etcd")]
#[tokio::test]
async fn an_etcd_cluster_that_stops_answering_is_one_warning_and_its_return_is_noted() {
    let capture = Capture::default();
    let _default = capture.install();
    let etcd = fencelock_testkit::Etcd::start().unwrap();
    let client = etcd_client_that_answered(&etcd.endpoints(), "events:etcd").await;
    assert!(capture.at(Level::WARN, "did not answer").is_empty());
    etcd.pause().unwrap();
    for _ in 0..2 {
        let err = client.try_acquire("events:etcd").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    }
    let warnings = capture.at(Level::WARN, "did not answer");
    etcd.resume().unwrap();
    assert_eq!(
        warnings.len(),
        1,
        "one warning while it stays down: {warnings:?}"
    );
    let name = client.nodes()[0].redacted();
    assert!(warnings[0].contains(&name), "{} names {name}", warnings[0]);
    assert!(warnings[0].contains("majority"), "{}", warnings[0]);
    assert!(warnings[0].contains("fencelock doctor"), "{}", warnings[0]);
    let back = answers_again(&capture, &client, "events:etcd").await;
    assert_eq!(back.len(), 1, "{back:?}");
    assert!(back[0].contains(&name), "{}", back[0]);
    assert_eq!(capture.at(Level::WARN, "did not answer").len(), 1);
}

/// A member of three that stops (`kill -STOP`) while the cluster keeps a majority: the client
/// moves on to the next member, and says so once, naming both; the cluster's own warning does
/// not come, since the cluster answers.
#[cfg(feature = "etcd")]
#[tokio::test]
async fn an_etcd_member_that_stops_answering_is_one_warning_naming_the_member_used_next() {
    let capture = Capture::default();
    let _default = capture.install();
    let cluster = fencelock_testkit::EtcdCluster::start(3).unwrap();
    // The follower first: the client starts on it.
    let (follower, endpoints) = cluster.follower_first(Duration::from_secs(30)).unwrap();
    let client = etcd_client_that_answered(&endpoints, "events:member").await;
    cluster.member(follower).pause().unwrap();
    let mut failed = 0;
    for _ in 0..4 {
        match client.try_acquire("events:member").await {
            Ok(lock) => {
                lock.release().await.unwrap();
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
                failed += 1;
            }
        }
    }
    let warnings = capture.at(Level::WARN, "did not answer");
    cluster.member(follower).resume().unwrap();
    assert!(failed <= 1, "{failed} of 4 calls failed: {warnings:?}");
    assert_eq!(
        warnings.len(),
        1,
        "one warning for one member: {warnings:?}"
    );
    let stopped = client.nodes()[0].redacted();
    let next = client.nodes()[1].redacted();
    assert!(
        warnings[0].contains(&format!("etcd member {stopped} did not answer")),
        "{} names {stopped}",
        warnings[0]
    );
    assert!(
        warnings[0].contains(&format!("using {next}")),
        "{}",
        warnings[0]
    );
}
