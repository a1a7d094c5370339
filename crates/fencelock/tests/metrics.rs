//! The metrics a client records (feature `metrics`), read back through a test recorder
//! (metrics-util's `DebuggingRecorder`, installed once for this binary) against real nodes, with
//! exact counts where the case makes them exact; and docs/guide/operating.md's table, which must list every
//! name. Each test uses its own resources (the client labels metrics with them on request) or
//! its own nodes (the `node` label), so that tests running side by side do not count each
//! other's locks.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use fencelock::fence::SqliteFence;
use fencelock::telemetry as names;
use fencelock::{AutoExtend, Client, Config, ErrorKind, LostCause, RetryPolicy};
use fencelock_testkit::RedisNodes;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this binary");
        snapshotter
    })
}

/// One recorded series: its name, labels and value.
#[derive(Debug)]
struct Series {
    name: String,
    labels: HashMap<String, String>,
    count: u64,
}

/// Everything recorded so far (counters: their value; histograms: how many values). A
/// snapshot drains the recorder, and tests run side by side: every snapshot is added to one
/// running total, which each test reads.
fn recorded() -> Vec<Series> {
    type Totals = HashMap<(String, BTreeMap<String, String>), u64>;
    static TOTALS: Mutex<Option<Totals>> = Mutex::new(None);
    let mut totals = TOTALS.lock().unwrap();
    let totals = totals.get_or_insert_with(HashMap::new);
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let (_kind, key) = key.into_parts();
        let (name, labels) = key.into_parts();
        let n = match value {
            DebugValue::Counter(n) => n,
            DebugValue::Histogram(values) => values.len() as u64,
            DebugValue::Gauge(delta) => {
                // A snapshot swaps a gauge to 0 too: what it returns is the change since the
                // last one, which the running total of gauges adds up.
                let labels = labels
                    .iter()
                    .map(|l| (l.key().to_string(), l.value().to_string()))
                    .collect();
                *gauges()
                    .lock()
                    .unwrap()
                    .entry((name.as_str().to_string(), labels))
                    .or_default() += delta.into_inner();
                continue;
            }
        };
        let labels = labels
            .into_iter()
            .map(|l| (l.key().to_string(), l.value().to_string()))
            .collect();
        *totals
            .entry((name.as_str().to_string(), labels))
            .or_default() += n;
    }
    totals
        .iter()
        .map(|((name, labels), count)| Series {
            name: name.clone(),
            labels: labels.clone().into_iter().collect(),
            count: *count,
        })
        .collect()
}

type GaugeTotals = Mutex<HashMap<(String, BTreeMap<String, String>), f64>>;

/// Each gauge series' value, as the snapshots so far add up to.
fn gauges() -> &'static GaugeTotals {
    static GAUGES: OnceLock<GaugeTotals> = OnceLock::new();
    GAUGES.get_or_init(GaugeTotals::default)
}

/// The current value of the gauge `name` summed over the series whose resource label starts with
/// `resource` (a permit's series is labelled with its slot's key).
fn gauge(name: &str, resource: &str) -> f64 {
    recorded();
    gauges()
        .lock()
        .unwrap()
        .iter()
        .filter(|((n, labels), _)| {
            n == name
                && labels
                    .get("resource")
                    .is_some_and(|r| r.starts_with(resource))
        })
        .map(|(_, v)| v)
        .sum()
}

/// The sum over the series of `name` whose labels include all of `want`.
fn count(all: &[Series], name: &str, want: &[(&str, &str)]) -> u64 {
    all.iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            want.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.count)
        .sum()
}

fn config(nodes: &RedisNodes) -> Config {
    Config::new(nodes.urls())
        .with_ttl(Duration::from_secs(5))
        .with_node_timeout(Duration::from_millis(500))
        .with_quarantine(false)
        .with_metrics_resource_label(true)
}

#[tokio::test]
async fn a_grant_a_contention_and_a_release_are_counted_with_every_nodes_vote() {
    snapshotter();
    let nodes = RedisNodes::start(3).unwrap();
    let a = Client::new(config(&nodes)).unwrap();
    let b = Client::new(config(&nodes)).unwrap();
    let lock = a.try_acquire("metrics:one").await.unwrap();
    let refused = b.try_acquire("metrics:one").await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Contention);
    let voters: Vec<String> = lock.votes().iter().map(|v| v.node.to_string()).collect();
    lock.release().await.unwrap();
    a.close().await;

    let all = recorded();
    let r = ("resource", "metrics:one");
    let acquired = |outcome| {
        count(
            &all,
            names::ACQUIRE_SECONDS,
            &[r, ("outcome", outcome), ("mode", "try")],
        )
    };
    assert_eq!(acquired("granted"), 1);
    assert_eq!(acquired("contention"), 1);
    assert_eq!(
        count(&all, names::RELEASES_TOTAL, &[r, ("outcome", "released")]),
        1
    );
    for node in &voters {
        let n = ("node", node.as_str());
        let votes = |op, outcome| {
            count(
                &all,
                names::NODE_VOTES_TOTAL,
                &[n, ("op", op), ("outcome", outcome)],
            )
        };
        // A grant returns at a quorum: a node still answering is not counted (its request
        // finishes in the background). A refusal waits for every node.
        assert!(votes("acquire", "granted") <= 1, "{node}");
        assert_eq!(votes("acquire", "held_by_other"), 1, "{node}");
        assert!(votes("release", "granted") <= 1, "{node}");
        assert_eq!(
            count(&all, names::NODE_VOTE_SECONDS, &[n, ("op", "acquire")]),
            1 + votes("acquire", "granted"),
            "{node}"
        );
    }
    let granted: u64 = voters
        .iter()
        .map(|node| {
            let want = [
                ("node", node.as_str()),
                ("op", "acquire"),
                ("outcome", "granted"),
            ];
            count(&all, names::NODE_VOTES_TOTAL, &want)
        })
        .sum();
    assert!(granted >= 2, "a quorum of 3 granted: {granted}");
    // No resource label unless asked: the same metrics without it.
    let plain = Client::new(config(&nodes).with_metrics_resource_label(false)).unwrap();
    plain
        .try_acquire("metrics:plain")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let all = recorded();
    assert_eq!(
        count(
            &all,
            names::ACQUIRE_SECONDS,
            &[("resource", "metrics:plain")]
        ),
        0
    );
    assert!(all
        .iter()
        .filter(|s| s.name.starts_with("fencelock_") && !s.labels.contains_key("node"))
        .any(|s| !s.labels.contains_key("resource")));
}

#[tokio::test]
async fn a_wait_ends_in_one_hand_over() {
    snapshotter();
    let nodes = RedisNodes::start(3).unwrap();
    // Retry delays far longer than the test: only the release's wake-up can end the wait soon.
    let retry = RetryPolicy::new()
        .with_wait(Duration::from_secs(30))
        .with_base_delay(Duration::from_secs(20))
        .with_max_delay(Duration::from_secs(20));
    let a = Client::new(config(&nodes)).unwrap();
    let b = Client::new(config(&nodes).with_retry(retry)).unwrap();
    let lock = a.try_acquire("metrics:wait").await.unwrap();
    let waiter = tokio::spawn(async move {
        let lock = b.acquire("metrics:wait").await;
        (b, lock)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.release().await.unwrap();
    let (b, lock) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the wake-up came")
        .unwrap();
    lock.unwrap().release().await.unwrap();
    b.close().await;

    let all = recorded();
    let r = ("resource", "metrics:wait");
    assert_eq!(
        count(&all, names::WAIT_SECONDS, &[r, ("outcome", "granted")]),
        1
    );
    assert_eq!(count(&all, names::HANDOVER_SECONDS, &[r]), 1);
    assert_eq!(
        count(
            &all,
            names::ACQUIRE_SECONDS,
            &[r, ("outcome", "granted"), ("mode", "wait")]
        ),
        1
    );
}

#[tokio::test]
async fn extensions_and_a_lost_lock_are_counted_by_cause() {
    snapshotter();
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(&nodes).with_ttl(Duration::from_millis(900))).unwrap();
    let mut lock = client.try_acquire("metrics:lost").await.unwrap();
    lock.extend().await.unwrap();
    let guard = lock.auto_extend(AutoExtend::new().with_interval(Duration::from_millis(100)));
    tokio::time::sleep(Duration::from_millis(350)).await;
    // Someone else's hand deletes the key everywhere: the next extension finds it gone.
    for node in &nodes {
        node.cli(&["DEL", "metrics:lost"]).unwrap();
    }
    let lost = guard.lost();
    tokio::time::timeout(Duration::from_secs(5), lost.fired())
        .await
        .expect("the lost signal fired");
    assert_eq!(lost.cause(), Some(LostCause::NotHeld));
    let _ = guard.release().await;
    client.close().await;

    let all = recorded();
    let r = ("resource", "metrics:lost");
    let ext = |outcome, how| {
        count(
            &all,
            names::EXTENSIONS_TOTAL,
            &[r, ("outcome", outcome), ("how", how)],
        )
    };
    assert_eq!(ext("extended", "manual"), 1);
    assert!(ext("extended", "auto") >= 1);
    assert_eq!(ext("failed", "auto"), 1);
    assert_eq!(
        count(&all, names::LOCKS_LOST_TOTAL, &[r, ("cause", "not_held")]),
        1
    );
    assert_eq!(count(&all, names::LOCKS_LOST_TOTAL, &[r]), 1);
}

#[tokio::test]
async fn fenced_writes_are_counted_accepted_and_stale() {
    snapshotter();
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(&nodes).with_fencing(true)).unwrap();
    let brief = Client::new(
        config(&nodes)
            .with_fencing(true)
            .with_ttl(Duration::from_millis(1000))
            .with_node_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fence = SqliteFence::open(dir.path().join("m.db")).unwrap();
    // Fresh nodes start an epoch, which needs every node's grant: the patient client does
    // that, so that a loaded machine's late reply cannot fail the brief client's first grant.
    client
        .acquire("metrics:warm")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // A holder whose lock runs out (a paused holder): its token is stale once the next wrote.
    let first = brief.acquire("metrics:fence").await.unwrap();
    let old = first.fencing_token().unwrap();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    drop(first);
    let second = client.try_acquire("metrics:fence").await.unwrap();
    fence
        .write("metrics:fence", second.fencing_token().unwrap(), |_| Ok(()))
        .unwrap();
    let stale = fence.write("metrics:fence", old, |_| Ok(())).unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::StaleToken);
    fence
        .write("metrics:fence", second.fencing_token().unwrap(), |_| Ok(()))
        .unwrap();
    second.release().await.unwrap();

    // Only this test writes through a fence in this binary: the counts are exact.
    let all = recorded();
    let s = ("storage", "sqlite");
    assert_eq!(
        count(
            &all,
            names::FENCED_WRITES_TOTAL,
            &[s, ("outcome", "accepted")]
        ),
        2
    );
    assert_eq!(
        count(&all, names::FENCED_WRITES_TOTAL, &[s, ("outcome", "stale")]),
        1
    );
}

/// Each fencing token is counted by the path that made it: an epoch on fresh nodes, one round
/// where the nodes take the proposal, and the derived path (largest counter + 1, written back)
/// where the counters are above the client's clock, as they are above a client whose clock is
/// behind. Only this test's client issues derived tokens in this binary; the fence test's
/// client issues an epoch and one-round tokens too, so those two are counted from below.
#[tokio::test]
async fn fencing_tokens_are_counted_by_the_path_that_made_them() {
    snapshotter();
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(&nodes).with_fencing(true)).unwrap();
    let derived = |all: &[Series]| count(all, names::FENCING_TOKENS_TOTAL, &[("path", "derived")]);
    let before = derived(&recorded());
    for _ in 0..2 {
        client
            .acquire("metrics:path")
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    // Counters far above any clock in microseconds: the next proposals miss.
    let high = "4000000000000000000";
    for n in nodes.iter() {
        n.cli(&["SET", "fencelock:fence", high]).unwrap();
    }
    let mut last = 0;
    for _ in 0..2 {
        let lock = client.acquire("metrics:path").await.unwrap();
        last = lock.fencing_token().unwrap().value();
        lock.release().await.unwrap();
    }
    assert!(last > 4_000_000_000_000_000_000, "{last}");
    client.close().await;
    let all = recorded();
    assert!(count(&all, names::FENCING_TOKENS_TOTAL, &[("path", "epoch")]) >= 1);
    assert!(count(&all, names::FENCING_TOKENS_TOTAL, &[("path", "one-round")]) >= 1);
    // The first proposal above the raised counters misses; the client then proposes one
    // above what it read, which the nodes take in one round.
    assert!(derived(&all) - before >= 1, "no derived token counted");
}

#[tokio::test]
async fn nodes_in_restart_quarantine_are_counted_as_excluded() {
    snapshotter();
    let nodes = RedisNodes::start(3).unwrap();
    // Fresh nodes have no marker: in quarantine for a TTL, none of them counts.
    let client = Client::new(config(&nodes).with_quarantine(true)).unwrap();
    let err = client.try_acquire("metrics:quarantine").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let voters: Vec<String> = err
        .votes()
        .unwrap()
        .iter()
        .map(|v| v.node.to_string())
        .collect();
    let all = recorded();
    for node in &voters {
        let want = [
            ("node", node.as_str()),
            ("op", "acquire"),
            ("outcome", "excluded"),
        ];
        assert_eq!(count(&all, names::NODE_VOTES_TOTAL, &want), 1, "{node}");
    }
    assert_eq!(
        count(
            &all,
            names::ACQUIRE_SECONDS,
            &[
                ("resource", "metrics:quarantine"),
                ("outcome", "unavailable")
            ]
        ),
        1
    );
}

/// The gauge of locks held rises at each grant and falls at each release, drop and guard's end,
/// whatever the lock is (a mutex, a read lock, a permit, a guard).
#[tokio::test]
async fn locks_held_rise_with_each_grant_and_fall_with_each_release_or_drop() {
    snapshotter();
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(&nodes)).unwrap();
    let held = |r: &str| gauge(names::LOCKS_HELD, r);
    let a = client.try_acquire("metrics:held:a").await.unwrap();
    let b = client.try_acquire("metrics:held:b").await.unwrap();
    assert_eq!(held("metrics:held:a"), 1.0);
    assert_eq!(held("metrics:held:b"), 1.0);
    a.release().await.unwrap();
    assert_eq!(held("metrics:held:a"), 0.0);
    drop(b);
    assert_eq!(held("metrics:held:b"), 0.0);
    let guard = client
        .try_acquire("metrics:held:g")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    assert_eq!(held("metrics:held:g"), 1.0);
    guard.release().await.unwrap();
    assert_eq!(held("metrics:held:g"), 0.0);
    let permits = client.semaphore("metrics:held:s", 2).unwrap();
    let (p1, p2) = (
        permits.try_acquire().await.unwrap(),
        permits.try_acquire().await.unwrap(),
    );
    assert_eq!(held("metrics:held:s"), 2.0);
    drop((p1, p2));
    assert_eq!(held("metrics:held:s"), 0.0);
    client.close().await;
}

#[test]
fn the_operating_guides_table_lists_every_metric_with_its_kind() {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/guide/operating.md"
    ))
    .unwrap();
    for name in names::ALL {
        let row = readme
            .lines()
            .find(|l| l.starts_with('|') && l.contains(&format!("`{name}`")))
            .unwrap_or_else(|| panic!("docs/guide/operating.md has no table row for {name}"));
        let kind = if name.ends_with("_total") {
            "counter"
        } else if name.ends_with("_seconds") {
            "histogram"
        } else {
            "gauge"
        };
        assert!(row.contains(kind), "{name}: {row}");
    }
    // And nothing in the table that the library does not record.
    for line in readme.lines().filter(|l| l.starts_with("| `fencelock_")) {
        let name = line.split('`').nth(1).unwrap();
        assert!(
            names::ALL.contains(&name),
            "docs/guide/operating.md lists {name}, which is not recorded"
        );
    }
}
