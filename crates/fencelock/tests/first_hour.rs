//! The first hour with the library, on real nodes: the crate docs' quick start is the example
//! program (and it runs), scoped long work that ends late or loses its keys, and a process that drops a
//! lock on its error path.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fencelock::{Client, Config, ErrorKind, LostCause, NodeVote, VoteOutcome};
use fencelock_testkit::RedisNodes;

fn config(nodes: &RedisNodes, ttl_ms: u64) -> Config {
    Config::new(nodes.urls())
        .with_ttl(Duration::from_millis(ttl_ms))
        .with_node_timeout(Duration::from_millis(ttl_ms / 4))
        .with_quarantine(false)
}

fn assert_no_key(nodes: &RedisNodes, key: &str) {
    for node in nodes.iter() {
        assert_eq!(
            node.cli(&["EXISTS", key]).unwrap(),
            "0",
            "{key} is still held on {}",
            node.url()
        );
    }
}

// ---- the crate docs show the example program, which runs ----

fn repo_file(path: &str) -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let path = path.canonicalize().unwrap_or(path);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    (path, text)
}

/// The regions of `examples/quickstart.rs` (`// region: NAME` .. `// endregion: NAME`), with
/// their common indentation removed.
fn regions() -> Vec<(String, String)> {
    let (_, text) = repo_file("examples/quickstart.rs");
    let mut regions = Vec::new();
    let mut open: Option<(String, Vec<&str>)> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("// region: ") {
            assert!(open.is_none(), "region {name} opens inside another");
            open = Some((name.to_owned(), Vec::new()));
        } else if let Some(name) = trimmed.strip_prefix("// endregion: ") {
            let (open_name, lines) = open.take().expect("endregion without region");
            assert_eq!(open_name, name, "regions must not interleave");
            let indent = lines
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| l.len() - l.trim_start().len())
                .min()
                .unwrap_or(0);
            let body: Vec<&str> = lines
                .iter()
                .map(|l| if l.len() >= indent { &l[indent..] } else { "" })
                .collect();
            regions.push((name.to_owned(), body.join("\n")));
        } else if let Some((_, lines)) = open.as_mut() {
            lines.push(line);
        }
    }
    assert!(open.is_none(), "a region is not closed");
    regions
}

fn region(name: &str) -> String {
    regions()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("examples/quickstart.rs has no region {name}"))
        .1
}

/// Panics naming the block and its first differing line when `shown` is not `region`.
fn assert_same(place: &str, name: &str, shown: &str, region: &str) {
    if shown == region {
        return;
    }
    let (mut a, mut b) = (shown.lines(), region.lines());
    let mut line = 1;
    loop {
        match (a.next(), b.next()) {
            (Some(x), Some(y)) if x == y => line += 1,
            (x, y) => panic!(
                "{place} is not region {name} of examples/quickstart.rs any more: line {line} \
                 of the block reads {x:?}, the example {y:?}. Change the example (it is compiled \
                 and run) and copy the region over the block."
            ),
        }
    }
}

#[test]
fn the_crate_docs_quick_start_is_the_example() {
    let (path, lib) = repo_file("src/lib.rs");
    let docs: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let heading = docs
        .iter()
        .position(|l| *l == "# Quick start")
        .expect("the crate docs have a quick start");
    let start = heading
        + docs[heading..]
            .iter()
            .position(|l| l.starts_with("```"))
            .expect("the quick start has a code block")
        + 1;
    let end = start + docs[start..].iter().position(|l| *l == "```").unwrap();
    // Lines rustdoc hides (`# ...`) are not shown to the reader.
    let shown: Vec<&str> = docs[start..end]
        .iter()
        .copied()
        .filter(|l| *l != "#" && !l.starts_with("# "))
        .collect();
    let place = format!("the quick start in {}", path.display());
    assert_same(&place, "main", &shown.join("\n"), &region("main"));
}

/// The example binary of the workspace's test build (`cargo test` builds the examples; see
/// `workspace_build`: under `./dev test` it is there already).
fn quickstart_bin() -> PathBuf {
    fencelock_testkit::workspace_build()
        .join("examples")
        .join("quickstart")
}

#[test]
fn the_quickstart_runs_against_real_nodes_and_leaves_no_lock() {
    let nodes = RedisNodes::start(3).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let bin = quickstart_bin();
    for (run, left) in [(1, 999), (2, 998)] {
        let out = Command::new(&bin)
            .env("FENCELOCK_NODES", nodes.urls().join(","))
            // Fresh nodes: nothing to protect by waiting out the restart quarantine.
            .env("FENCELOCK_QUARANTINE", "off")
            .env("TMPDIR", tmp.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "run {run}: {stdout}{stderr}");
        for expected in [
            "holding report:daily for ".to_owned(),
            format!("; {left} left"),
            "reserved one of sku:42 with fencing token ".to_owned(),
            "nightly report wrote 3 row(s) under the lock".to_owned(),
        ] {
            assert!(stdout.contains(&expected), "run {run}: {stdout}");
        }
    }
    for key in ["report:daily", "sku:42", "report:nightly"] {
        assert_no_key(&nodes, key);
    }
}

#[test]
fn without_nodes_the_quickstart_says_what_to_set() {
    let out = Command::new(quickstart_bin())
        .env_remove("FENCELOCK_NODES")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("FENCELOCK_NODES"), "{stderr}");
    assert!(stderr.contains("fencelock up"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
}

// ---- Scoped long work ----

/// Work that blocks its thread inside one poll keeps the timer of the lost signal from
/// running; the lock expires meanwhile, and a late completion must not come back as `Ok`.
#[tokio::test]
async fn work_that_blocks_its_thread_past_the_ttl_is_lost() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = Client::new(config(&nodes, 1_000)).unwrap();
    let result = c
        .with_lock("blocked", async |_lock| {
            std::thread::sleep(Duration::from_millis(1_600));
            7
        })
        .await;
    let err = result.expect_err("the lock expired while the work ran");
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    assert!(err.to_string().contains("validity ran out"), "{err}");
    let result: Result<u32, fencelock::Error> = c
        .try_with_lock("blocked", async |_lock| {
            std::thread::sleep(Duration::from_millis(1_600));
            Ok(7)
        })
        .await;
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Lost);
}

/// The keys deleted by someone else: the error says so, not that the validity ran out.
#[tokio::test]
async fn a_lost_lock_names_the_cause_that_happened() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = Client::new(config(&nodes, 900)).unwrap();
    let n = &nodes;
    let result = c
        .with_lock("deleted", async move |lock| {
            for node in n.iter() {
                node.cli(&["DEL", "deleted"]).unwrap();
            }
            assert_eq!(lock.resource(), "deleted");
            tokio::time::sleep(Duration::from_secs(20)).await;
        })
        .await;
    let err = result.expect_err("the keys were deleted");
    match &err {
        fencelock::Error::Lost { cause, .. } => assert_eq!(*cause, LostCause::NotHeld),
        other => panic!("expected Lost, got {other}"),
    }
    let text = err.to_string();
    assert!(text.contains("keys are gone"), "{text}");
    assert!(!text.contains("validity ran out"), "{text}");
}

/// A majority of nodes gone: the error says the nodes did not answer, with their votes.
#[tokio::test]
async fn a_lock_lost_to_dead_nodes_says_they_did_not_answer() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = Client::new(config(&nodes, 900)).unwrap();
    let n = &nodes;
    let result = c
        .with_lock("unreachable", async move |_lock| {
            n.node(0).kill().unwrap();
            n.node(1).kill().unwrap();
            tokio::time::sleep(Duration::from_secs(20)).await;
        })
        .await;
    let err = result.expect_err("a majority of the nodes died");
    match &err {
        fencelock::Error::Lost { cause, votes, .. } => {
            assert_eq!(*cause, LostCause::Unreachable, "{err}");
            assert!(votes.failed() >= 2, "{err}");
        }
        other => panic!("expected Lost, got {other}"),
    }
    assert!(err.to_string().contains("failed to answer"), "{err}");
}

#[test]
fn a_vote_the_round_did_not_wait_for_shows_no_duration() {
    let vote = NodeVote::new(
        "redis://127.0.0.1:7001",
        VoteOutcome::Pending,
        Duration::ZERO,
    );
    let text = vote.to_string();
    assert!(
        text.contains("no answer needed: the round had decided"),
        "{text}"
    );
    assert!(!text.contains("0ns"), "{text}");
}

#[tokio::test]
async fn scoped_work_gets_the_lock_context_and_its_error_comes_back_flat() {
    let nodes = RedisNodes::start(3).unwrap();
    let c = Client::new(config(&nodes, 1_000).with_fencing(true)).unwrap();
    let (resource, token) = c
        .with_lock("ctx", async |lock| {
            assert!(!lock.is_lost());
            assert!(lock.remaining() > Duration::ZERO);
            (
                lock.resource().to_owned(),
                lock.fencing_token().map(|t| t.value()),
            )
        })
        .await
        .unwrap();
    assert_eq!(resource, "ctx");
    assert!(token.is_some_and(|t| t > 0));

    #[derive(Debug, PartialEq)]
    enum AppError {
        OutOfStock,
        Lock(ErrorKind),
    }
    impl From<fencelock::Error> for AppError {
        fn from(e: fencelock::Error) -> AppError {
            AppError::Lock(e.kind())
        }
    }
    let result: Result<(), AppError> = c
        .try_with_lock("ctx", async |_lock| Err(AppError::OutOfStock))
        .await;
    assert_eq!(result, Err(AppError::OutOfStock));
    assert_no_key(&nodes, "ctx");
    let value = c
        .try_with_lock("ctx", async |lock| {
            Ok::<_, AppError>(lock.fencing_token().unwrap().value())
        })
        .await
        .unwrap();
    assert!(value > token.unwrap());
}

// ---- A lock dropped on the error path ----

const CHILD: &str = "FENCELOCK_FIRST_HOUR_CHILD";

/// Run by [`a_lock_dropped_on_the_error_path_is_released_before_exit`] in a process of its own
/// (with the node URLs in `FENCELOCK_NODES`): acquires, fails with `?` before the release
/// (dropping the lock), closes the client and returns, as `main` does; the runtime then stops.
#[test]
fn child_drops_a_lock_and_returns() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = Client::new(Config::from_env().unwrap()).unwrap();
        let result: Result<(), Box<dyn std::error::Error>> = async {
            let lock = client.acquire("dropped").await?;
            println!("acquired {}", lock.resource());
            "not a number".parse::<u32>()?;
            lock.release().await?;
            Ok(())
        }
        .await;
        client.close().await;
        assert!(result.is_err());
    });
}

/// As [`child_drops_a_lock_and_returns`], as `#[tokio::main]` runs `main` (a multi-thread
/// runtime), and without `close`: dropping the last client handle flushes the release.
#[test]
fn child_drops_a_lock_and_returns_without_close() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    drop_on_an_early_return(tokio::runtime::Builder::new_multi_thread());
}

/// As [`child_drops_a_lock_and_returns_without_close`] on a current-thread runtime
/// (`#[tokio::main(flavor = "current_thread")]`), which never runs the background release
/// once `main`'s future is done: the drop of the last handle sends it from a thread of its own.
#[test]
fn child_on_one_thread_drops_a_lock_without_close() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    drop_on_an_early_return(tokio::runtime::Builder::new_current_thread());
}

/// A program's `main` on `runtime` without `close`: it takes "dropped" and returns early by
/// `?` before its release, so the lock is dropped unreleased.
fn drop_on_an_early_return(mut runtime: tokio::runtime::Builder) {
    let runtime = runtime.enable_all().build().unwrap();
    let result: Result<(), Box<dyn std::error::Error>> = runtime.block_on(async {
        let client = Client::new(Config::from_env().unwrap()).unwrap();
        let lock = client.acquire("dropped").await?;
        println!("acquired {}", lock.resource());
        "not a number".parse::<u32>()?;
        lock.release().await?;
        Ok(())
    });
    assert!(result.is_err());
}

/// Runs `child` in a process of its own and finds no key once it has exited.
/// `latency`: what each request takes to reach its node (through a proxy), as on a network;
/// a release still on its way when the process exits is lost.
fn a_child_leaves_no_key(child: &str, latency: Duration) {
    let nodes = RedisNodes::start(3).unwrap();
    let proxies: Vec<fencelock_testkit::DelayProxy> = nodes
        .iter()
        .map(|n| fencelock_testkit::DelayProxy::start(n.port()).unwrap())
        .collect();
    for p in &proxies {
        p.set_delay(latency);
    }
    let urls: Vec<String> = proxies
        .iter()
        .map(|p| format!("redis://127.0.0.1:{}/0", p.port()))
        .collect();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child, "--nocapture"])
        .env(CHILD, "1")
        .env("FENCELOCK_NODES", urls.join(","))
        .env("FENCELOCK_QUARANTINE", "off")
        .env("FENCELOCK_NODE_TIMEOUT", "2s")
        // Long enough that a key gone within the wait below was released, not expired.
        .env("FENCELOCK_TTL", "60s")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("acquired dropped"), "{stdout}");
    // The release was sent before the process exited; a loaded node may apply it a moment
    // after the exit. A generous wait, far below the 60 s TTL.
    let gone_by = std::time::Instant::now() + Duration::from_secs(5);
    while nodes
        .iter()
        .any(|n| n.cli(&["EXISTS", "dropped"]).unwrap() != "0")
        && std::time::Instant::now() < gone_by
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_no_key(&nodes, "dropped");
}

#[test]
fn a_lock_dropped_on_the_error_path_is_released_before_exit() {
    a_child_leaves_no_key("child_drops_a_lock_and_returns", Duration::ZERO);
}

#[test]
fn a_lock_dropped_on_one_thread_is_released_without_close() {
    a_child_leaves_no_key(
        "child_on_one_thread_drops_a_lock_without_close",
        Duration::from_millis(200),
    );
}

#[test]
fn a_lock_dropped_on_the_error_path_is_released_without_close() {
    a_child_leaves_no_key(
        "child_drops_a_lock_and_returns_without_close",
        Duration::from_millis(200),
    );
}

/// Scoped work, `close` and releases can run in spawned tasks; locks, guards and the context
/// move into them.
#[test]
fn scoped_futures_and_the_context_are_send() {
    fn is_send<T: Send>(_: &T) {}
    fn is_send_sync_static<T: Send + Sync + 'static>() {}
    is_send_sync_static::<fencelock::LockContext>();
    is_send_sync_static::<LostCause>();
    let c = Client::new(Config::new(["redis://127.0.0.1:1"])).unwrap();
    is_send(&c.with_lock("r", async |lock| lock.fencing_token().map(|t| t.value())));
    is_send(&c.try_with_lock("r", async |_lock| Ok::<_, fencelock::Error>(1)));
    is_send(&c.close());
    // A guard moves into a task, and so do the futures of releasing and of scoped work.
    is_send_sync_static::<fencelock::Lock>();
    is_send_sync_static::<fencelock::LockGuard>();
    is_send(&c.with_lock("r", async |_lock| ()));
    #[allow(dead_code)]
    fn releases_are_send(lock: fencelock::Lock, guard: fencelock::LockGuard) {
        is_send(&lock.release());
        is_send(&guard.release());
    }
}
