//! Calls cut short, on real nodes: an acquisition dropped mid-round (`tokio::time::timeout`)
//! leaves no key once its background release ran, for the mutex, `acquire_many`, the family
//! and etcd; a wait of 300 ms makes the attempts its retry delays allow, no more.

use std::time::{Duration, Instant};

use fencelock::{Client, Config, RetryPolicy};
use fencelock_testkit::RedisNodes;

fn config(nodes: &RedisNodes) -> Config {
    Config::new(nodes.urls())
        // Far longer than the polls below: a key gone within them was released, not expired.
        .with_ttl(Duration::from_secs(60))
        .with_node_timeout(Duration::from_millis(500))
        .with_quarantine(false)
}

/// The keys on `node` other than the ones that outlive a lock by design (fence counters, the
/// node set record, the ones named below): what a cancelled call may have left behind.
fn leftovers(node: &fencelock_testkit::RedisNode) -> Vec<String> {
    let keys = node.cli(&["KEYS", "*"]).unwrap();
    keys.lines()
        .map(str::trim)
        .filter(|k| !k.is_empty())
        // The TTL announcements (`announce.lua`), kept per node for any lock, not per call,
        // and a read-write lock's writer record, which a granted write lock leaves for 10 TTLs
        // by design (`write_record.lua`).
        .filter(|k| !k.starts_with("fencelock:ttls") && !k.starts_with("fencelock:writer:"))
        // A waiter's mark beside a lock key (`fencelock:waiting:*`, queue.rs) says only that
        // someone waited lately: it expires a few leases after the last wait (16 s here), and a
        // call cut short while in line leaves it to expire, as a waiter that died does. On a
        // loaded machine the last such call can come after the last release that would have
        // cleared it (seen once, on all three nodes). Its one effect: a release wakes nobody.
        .filter(|k| !k.starts_with("fencelock:waiting:"))
        .filter(|k| node.cli(&["PTTL", k]).unwrap().trim() != "-1")
        .map(str::to_owned)
        .collect()
}

/// Polls until no node has a key with a TTL left, for at most `bound`; the keys left otherwise.
fn wait_for_no_keys(nodes: &RedisNodes, bound: Duration) -> Vec<(String, Vec<String>)> {
    let until = Instant::now() + bound;
    loop {
        let left: Vec<(String, Vec<String>)> = nodes
            .iter()
            .map(|n| (n.url(), leftovers(n)))
            .filter(|(_, keys)| !keys.is_empty())
            .collect();
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---- the attempts of a wait follow the documented delays ----

/// A 300 ms wait behind a held lock, three times: the first refusal is retried at once (in
/// line, listening); then every delay is at least the 50 ms base, so no more than
/// 2 + took / 50 ms attempts fit, however late the loaded machine wakes us (it only makes
/// fewer). `partial`: the holder's key is gone from one node, so each attempt is granted there
/// and its release wakes the line, first of all this waiter (that made 374 attempts).
async fn attempts_within_a_300ms_wait(partial: bool) {
    let nodes = RedisNodes::start(3).unwrap();
    let holder = Client::new(config(&nodes)).unwrap();
    let waiter = Client::new(config(&nodes)).unwrap();
    let lock = holder.acquire("held").await.unwrap();
    if partial {
        // Once every node holds it: the grant returns at a majority, and the last node's write
        // may still be on its way on a loaded machine.
        let until = Instant::now() + Duration::from_secs(10);
        while !nodes
            .iter()
            .all(|n| n.cli(&["EXISTS", "held"]).unwrap().trim() == "1")
        {
            assert!(
                Instant::now() < until,
                "the holder's key is not on every node"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(nodes.node(2).cli(&["DEL", "held"]).unwrap(), "1");
    }
    let policy = RetryPolicy::new()
        .with_wait(Duration::from_millis(300))
        .with_base_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_millis(500));
    for _ in 0..3 {
        let started = Instant::now();
        let err = waiter.acquire_with("held", &policy).await.unwrap_err();
        let took = started.elapsed();
        let fencelock::Error::Timeout { attempts, .. } = &err else {
            panic!("expected a timeout, got {err}");
        };
        let most = 2 + (took.as_millis() / 50) as u32;
        assert!(
            (2..=most).contains(attempts),
            "{attempts} attempts in {took:?} (at most {most} with delays of 50 ms or more): {err}"
        );
    }
    let _ = lock.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300ms_wait_makes_the_attempts_its_delays_allow() {
    attempts_within_a_300ms_wait(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_woken_by_its_own_release_still_follows_the_delays() {
    attempts_within_a_300ms_wait(true).await;
}

// ---- a call dropped mid-round leaves no key ----

/// Timeouts from 0 to 3 ms in steps of 250 µs: some land before the first write, many
/// mid-round (a round on loopback takes about a millisecond), some after the grant (then the
/// call returned the lock, dropped at once).
fn cut(i: usize) -> Duration {
    Duration::from_micros((i % 13) as u64 * 250)
}

const CUTS: usize = 200;

/// After the calls, the background releases had time: nothing left on any node (10 s, far
/// below the 60 s TTL: a key gone by then was released, not expired).
fn assert_all_released(nodes: &RedisNodes, what: &str, cut_short: usize) {
    let left = wait_for_no_keys(nodes, Duration::from_secs(10));
    assert!(
        left.is_empty(),
        "{what}: {cut_short} of {CUTS} calls cut short; keys left 10 s later: {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_cut_short_leave_no_key() {
    let nodes = RedisNodes::start(3).unwrap();
    for fencing in [false, true] {
        let client = Client::new(config(&nodes).with_fencing(fencing)).unwrap();
        client.connect().await;
        let mut cut_short = 0;
        let mut calls = 0;
        // At least CUTS calls, and more until enough were cut short: on a loaded machine a run
        // of quick refusals (the previous lock's background release not yet done) can answer
        // inside most cuts.
        for i in 0..CUTS * 5 {
            if i >= CUTS && cut_short >= CUTS / 10 {
                break;
            }
            calls += 1;
            let call = async {
                match i % 3 {
                    0 => client.acquire("cut").await,
                    1 => client.try_acquire("cut").await,
                    _ => client.acquire_many(&["cut", "cut:b"]).await,
                }
            };
            // A lock returned is dropped at once; a refusal (the previous call's lock not yet
            // released in the background) is fine: only what is left at the end counts.
            if tokio::time::timeout(cut(i), call).await.is_err() {
                cut_short += 1;
            }
        }
        assert!(
            cut_short >= CUTS / 20,
            "only {cut_short} of {calls} calls were cut short"
        );
        eprintln!("mutex, fencing {fencing}: {cut_short} of {calls} calls cut short");
        assert_all_released(&nodes, &format!("mutex, fencing {fencing}"), cut_short);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_familys_calls_cut_short_leave_no_key() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(&nodes).with_fencing(true)).unwrap();
    client.connect().await;
    let sem = client.semaphore("cut:sem", 2).unwrap();
    let rw = client.rwlock("cut:rw").unwrap();
    let election = client.election("cut:elect").unwrap();
    let mut cut_short = 0;
    for i in 0..CUTS {
        let call = async {
            match i % 4 {
                0 => drop(sem.acquire().await),
                1 => drop(rw.read().await),
                2 => drop(rw.write().await),
                _ => drop(election.campaign("me").await),
            }
        };
        if tokio::time::timeout(cut(i), call).await.is_err() {
            cut_short += 1;
        }
    }
    eprintln!("family: {cut_short} of {CUTS} calls cut short");
    assert_all_released(&nodes, "semaphore, rwlock, election", cut_short);
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_acquisitions_cut_short_leave_no_key() {
    let etcd = fencelock_testkit::Etcd::start().unwrap();
    let endpoints = etcd.endpoints();
    let urls: Vec<String> = endpoints
        .iter()
        .map(|e| e.replacen("http://", "etcd://", 1))
        .collect();
    let client = Client::new(Config::new(urls).with_ttl(Duration::from_secs(60))).unwrap();
    // Connected before the cuts, so that they land in the calls' own requests.
    drop(client.acquire("warm-up").await.unwrap().release().await);
    let mut cut_short = 0;
    for i in 0..CUTS {
        let call = async {
            match i % 2 {
                0 => drop(client.acquire("cut").await),
                _ => drop(client.acquire_many(&["cut", "cut:b"]).await),
            }
        };
        if tokio::time::timeout(cut(i) * 4, call).await.is_err() {
            cut_short += 1;
        }
    }
    eprintln!("etcd: {cut_short} of {CUTS} calls cut short");
    let mut raw = etcd_client::Client::connect(&endpoints, None)
        .await
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let left = loop {
        let resp = raw
            .get(
                "fencelock/cut",
                Some(etcd_client::GetOptions::new().with_prefix()),
            )
            .await
            .unwrap();
        let keys: Vec<String> = resp
            .kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect();
        if keys.is_empty() || Instant::now() >= until {
            break keys;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        left.is_empty(),
        "{cut_short} of {CUTS} calls cut short; keys left 10 s later: {left:?}"
    );
}

/// A campaign cut short after its append but before it returned did not lead: its entry is
/// withdrawn from the log of leaders (as a campaign that fails there withdraws it), so an
/// observer never reports it. Only the campaigns that returned a leadership stay in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_cut_short_leaves_no_entry_in_the_log() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(&nodes).with_fencing(true)).unwrap();
    client.connect().await;
    let election = client.election("cut:log").unwrap();
    let mut led = Vec::new();
    let mut cut_short = 0;
    for i in 0..CUTS {
        let value = format!("c{i}");
        match tokio::time::timeout(cut(i) * 2, election.campaign(&value)).await {
            Ok(Ok(leadership)) => {
                led.push(value);
                leadership.resign().await.unwrap();
            }
            Ok(Err(e)) => eprintln!("campaign {i}: {e}"),
            Err(_) => cut_short += 1,
        }
    }
    eprintln!(
        "campaigns: {cut_short} of {CUTS} cut short, {} led",
        led.len()
    );
    assert_all_released(&nodes, "campaigns", cut_short);
    // `election.rs`'s `leaders_key`.
    let log = "fencelock:leaders:cut:log";
    for node in nodes.iter() {
        let entries = node.cli(&["ZRANGE", log, "0", "-1"]).unwrap();
        for entry in entries.lines().map(str::trim).filter(|e| !e.is_empty()) {
            let value = entry.split_once(' ').map_or(entry, |(_, v)| v);
            assert!(
                led.iter().any(|l| l == value),
                "{}: the log holds {entry:?}, a campaign that never returned a leadership",
                node.url()
            );
        }
    }
}

/// Polls `fut` at most `polls` times, then drops it: `None` when it was cut short that way. A
/// cut counted in polls lands at the same step of the call however fast the machine is (a
/// release on an idle loopback finished inside even a 0 ms `timeout`: 16 of 2,000 were cut).
async fn within_polls<F: std::future::Future>(polls: usize, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut left = polls;
    std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
        std::task::Poll::Pending if left <= 1 => std::task::Poll::Ready(None),
        std::task::Poll::Pending => {
            left -= 1;
            std::task::Poll::Pending
        }
    })
    .await
}

/// A release cut short leaves the lock to the background release of a dropped lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_cut_short_leave_no_key() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(config(&nodes)).unwrap();
    client.connect().await;
    let mut cut_short = 0;
    // More rounds until enough were cut short (a release that finished within its polls was
    // not).
    for i in 0..CUTS * 10 {
        if cut_short >= CUTS / 10 {
            break;
        }
        let lock = client
            .acquire_with(&format!("rel:{i}"), &RetryPolicy::new())
            .await
            .unwrap();
        // Cut after its first poll (its requests just sent), its second or its third.
        if within_polls(1 + i % 3, lock.release()).await.is_none() {
            cut_short += 1;
        }
    }
    eprintln!("releases: {cut_short} cut short");
    assert!(
        cut_short >= CUTS / 10,
        "only {cut_short} releases were cut short"
    );
    assert_all_released(&nodes, "releases", cut_short);
}

/// etcd's cut calls are counted by `close` (issue 29): a wait cut short hands the revoke of its
/// lease to a background task, and `close` returns only once that revoke ran (within twice the
/// node timeout, as on Redis). Checked from another thread right after `close`, while this
/// test's only runtime thread is blocked: nothing can run in the background then, so what the
/// cluster holds is what `close` waited for.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "current_thread")]
async fn etcd_close_waits_for_the_revokes_of_calls_cut_short() {
    let etcd = fencelock_testkit::Etcd::start().unwrap();
    let endpoints = etcd.endpoints();
    let urls: Vec<String> = endpoints
        .iter()
        .map(|e| e.replacen("http://", "etcd://", 1))
        .collect();
    let config = Config::new(urls)
        .with_ttl(Duration::from_secs(60))
        .with_node_timeout(Duration::from_secs(2));
    let holder = Client::new(config.clone()).unwrap();
    let held = holder.acquire("held").await.unwrap();
    /// The keys under the resource's line and the live leases, read on a thread of its own.
    fn cluster_state(endpoints: Vec<String>) -> (Vec<String>, Vec<i64>) {
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let mut raw = etcd_client::Client::connect(&endpoints, None)
                    .await
                    .unwrap();
                let resp = raw
                    .get(
                        fencelock::protocol::etcd_queue_prefix("held"),
                        Some(etcd_client::GetOptions::new().with_prefix()),
                    )
                    .await
                    .unwrap();
                let keys = resp
                    .kvs()
                    .iter()
                    .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
                    .collect();
                let mut leases: Vec<i64> = raw
                    .leases()
                    .await
                    .unwrap()
                    .leases()
                    .iter()
                    .map(|l| l.id())
                    .collect();
                leases.sort_unstable();
                (keys, leases)
            })
        })
        .join()
        .unwrap()
    }
    let before = cluster_state(endpoints.clone());
    assert_eq!(before.0.len(), 1, "{before:?}");
    let waiter = Client::new(config).unwrap();
    let policy = RetryPolicy::new().with_wait(Duration::from_secs(30));
    for _ in 0..3 {
        // Long enough to be in line (its key written) on a loaded machine, far short of the
        // holder's 60 s.
        let cut =
            tokio::time::timeout(Duration::from_secs(3), waiter.acquire_with("held", &policy))
                .await;
        assert!(cut.is_err(), "the wait was not cut short: {cut:?}");
        waiter.close().await;
        let after = cluster_state(endpoints.clone());
        assert_eq!(
            after, before,
            "right after close: the cut wait's key or lease is still there (before the wait: {before:?})"
        );
    }
    held.release().await.unwrap();
}
