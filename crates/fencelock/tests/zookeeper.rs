//! The ZooKeeper backend (`zk://`) against real ZooKeeper 3.8 servers that the test kit starts:
//! mutual exclusion, FIFO waiters, tokens (czxid) growing in grant order, waiters that give up
//! or are cancelled leaving no node, the lost signal of a holder whose session expires before
//! the next holder is granted, a server killed under a held lock, and the refusals.
#![cfg(feature = "zookeeper")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{AutoExtend, Client, Config, ErrorKind, LostCause, RetryPolicy, VoteOutcome};
use fencelock_testkit::{DelayProxy, ZooKeeper, ZooKeeperEnsemble};

/// Generous: waits on a loaded 2-core machine.
const LONG: Duration = Duration::from_secs(60);

async fn start() -> ZooKeeper {
    tokio::task::spawn_blocking(ZooKeeper::start)
        .await
        .unwrap()
        .expect("start ZooKeeper")
}

fn config(url: &str, ttl: Duration) -> Config {
    Config::new([url])
        .with_ttl(ttl)
        .with_retry(RetryPolicy::new().with_wait(LONG))
}

fn client(url: &str, ttl: Duration) -> Client {
    Client::new(config(url, ttl)).unwrap()
}

fn token(lock: &fencelock::Lock) -> u64 {
    lock.fencing_token()
        .expect("a ZooKeeper lock has a token")
        .value()
}

/// The waiters' nodes under `dir`, read with a session of our own.
async fn nodes(hosts: &str, dir: &str) -> Vec<String> {
    let raw = zookeeper_client::Client::connect(hosts).await.unwrap();
    match raw.list_children(dir).await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {dir}: {e}"),
    }
}

/// Waits until `dir` holds `n` nodes.
async fn wait_nodes(hosts: &str, dir: &str, n: usize) {
    let deadline = Instant::now() + LONG;
    loop {
        let got = nodes(hosts, dir).await;
        if got.len() == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{dir} holds {got:?}, want {n} nodes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The czxid of `path`, read with a session of our own.
async fn czxid(hosts: &str, path: &str) -> u64 {
    let raw = zookeeper_client::Client::connect(hosts).await.unwrap();
    let stat = raw.check_stat(path).await.unwrap().expect("node exists");
    stat.czxid as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_client_is_refused_while_the_first_holds_then_gets_it() {
    let zk = start().await;
    let a = client(&zk.url(), Duration::from_secs(6));
    let b = client(&zk.url(), Duration::from_secs(6));
    let votes = a.connect().await;
    assert_eq!(votes.len(), 1);
    assert_eq!(votes.granted(), 1, "{votes}");

    let lock = a.try_acquire("order:42").await.unwrap();
    assert_eq!(lock.votes().as_slice()[0].outcome, VoteOutcome::Granted);
    // The token is the node's creation zxid, as the server tells it to anyone.
    let dir = "/fencelock/locks/order:42";
    assert_eq!(
        nodes(&zk.host_port(), dir).await,
        [lock.owner().to_string()]
    );
    let path = format!("{dir}/{}", lock.owner());
    assert_eq!(token(&lock), czxid(&zk.host_port(), &path).await);

    let err = b.try_acquire("order:42").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    // The refused try took its node out of the line again.
    assert_eq!(nodes(&zk.host_port(), dir).await.len(), 1);
    // Another resource is free.
    b.try_acquire("order:43")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let first = token(&lock);
    lock.release().await.unwrap();
    assert!(nodes(&zk.host_port(), dir).await.is_empty());
    let again = b.try_acquire("order:42").await.unwrap();
    assert!(token(&again) > first);
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chroot_holds_the_locks_and_odd_resource_names_stay_one_node() {
    let zk = start().await;
    let c = client(
        &format!("{}/apps/billing", zk.url()),
        Duration::from_secs(6),
    );
    let lock = c.try_acquire("a/b").await.unwrap();
    let got = nodes(&zk.host_port(), "/apps/billing/fencelock/locks/a%2Fb").await;
    assert_eq!(got, [lock.owner().to_string()]);
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_granted_in_the_order_they_came_with_growing_tokens() {
    let zk = start().await;
    let url = zk.url();
    let hosts = zk.host_port();
    let dir = "/fencelock/locks/queue";
    let holder = client(&url, Duration::from_secs(6));
    let first = holder.acquire("queue").await.unwrap();
    let first_token = token(&first);

    // Waiters join one after another (each once the previous one's node is in line), each on
    // its own client: the order they came is the order of their nodes.
    let grants = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let c = client(&url, Duration::from_secs(6));
        let grants = grants.clone();
        tasks.push(tokio::spawn(async move {
            let lock = c.acquire("queue").await.unwrap();
            grants.lock().unwrap().push((i, token(&lock)));
            tokio::time::sleep(Duration::from_millis(50)).await;
            lock.release().await.unwrap();
        }));
        wait_nodes(&hosts, dir, i + 2).await;
    }
    first.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(LONG, t).await.unwrap().unwrap();
    }
    let grants = grants.lock().unwrap().clone();
    let order: Vec<usize> = grants.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 1, 2, 3], "grant order");
    let mut last = first_token;
    for (i, t) in &grants {
        assert!(*t > last, "waiter {i}'s token {t} is not above {last}");
        last = *t;
    }
    wait_nodes(&hosts, dir, 0).await;
}

/// The paths under `dir` that the server says are watched, each with how many sessions watch
/// it (the `wchp` four-letter word: a path, then its sessions indented).
fn watched(zk: &ZooKeeper, dir: &str) -> Vec<(String, usize)> {
    let text = zk.four_letter("wchp").unwrap();
    let mut out: Vec<(String, usize)> = Vec::new();
    for line in text.lines() {
        if line.starts_with('/') {
            out.push((line.trim().to_string(), 0));
        } else if line.trim().starts_with("0x") {
            if let Some(last) = out.last_mut() {
                last.1 += 1;
            }
        }
    }
    out.retain(|(p, _)| p.starts_with(dir));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_waiter_watches_only_the_node_just_before_it() {
    let zk = start().await;
    let url = zk.url();
    let hosts = zk.host_port();
    let dir = "/fencelock/locks/herd";
    let holder = client(&url, Duration::from_secs(6));
    let lock = holder.acquire("herd").await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let c = client(&url, Duration::from_secs(6));
        tasks.push(tokio::spawn(async move {
            c.acquire("herd").await.unwrap().release().await.unwrap();
        }));
        wait_nodes(&hosts, dir, i + 2).await;
    }
    // Three waiters, three watches once each has set its own.
    let deadline = Instant::now() + LONG;
    let seen = loop {
        let seen = tokio::task::block_in_place(|| watched(&zk, dir));
        if seen.iter().map(|(_, n)| n).sum::<usize>() == 3 {
            break seen;
        }
        assert!(Instant::now() < deadline, "watches: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Each on another node, by one session: the holder's and the first two waiters'. A release
    // wakes one waiter, not the herd.
    let mut line = nodes(&hosts, dir).await;
    line.sort_by_key(|n| n.rsplit('-').next().unwrap().to_string());
    let mut paths: Vec<String> = seen.iter().map(|(p, _)| p.clone()).collect();
    paths.sort();
    let mut want: Vec<String> = line[..3].iter().map(|n| format!("{dir}/{n}")).collect();
    want.sort();
    assert_eq!(paths, want, "{seen:?}");
    assert!(seen.iter().all(|(_, n)| *n == 1), "{seen:?}");
    lock.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(LONG, t).await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_racing_for_one_resource_never_overlap_and_tokens_grow_in_grant_order() {
    let zk = start().await;
    let url = zk.url();
    let inside = Arc::new(Mutex::new(false));
    let grants = Arc::new(Mutex::new(Vec::<u64>::new()));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let c = client(&url, Duration::from_secs(6));
        let (inside, grants) = (inside.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let lock = c.acquire("counter").await.unwrap();
                {
                    let mut flag = inside.lock().unwrap();
                    assert!(!*flag, "two holders at once");
                    *flag = true;
                    grants.lock().unwrap().push(token(&lock));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                *inside.lock().unwrap() = false;
                lock.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(LONG, t).await.unwrap().unwrap();
    }
    let grants = grants.lock().unwrap().clone();
    assert_eq!(grants.len(), 20);
    assert!(
        grants.windows(2).all(|w| w[0] < w[1]),
        "tokens in grant order: {grants:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_or_is_cancelled_leaves_no_node_behind() {
    let zk = start().await;
    let url = zk.url();
    let hosts = zk.host_port();
    let dir = "/fencelock/locks/job";
    let a = client(&url, Duration::from_secs(6));
    let lock = a.acquire("job").await.unwrap();

    // A wait that times out deletes its node in the call.
    let b = Client::new(
        config(&url, Duration::from_secs(6))
            .with_retry(RetryPolicy::new().with_wait(Duration::from_millis(500))),
    )
    .unwrap();
    let err = b.acquire("job").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert_eq!(nodes(&hosts, dir).await.len(), 1);

    // A wait cut short (its future dropped) has its node deleted in the background, while its
    // client and session live on: it must not block the waiters behind it.
    let c = client(&url, Duration::from_secs(6));
    {
        let waiting = c.acquire("job");
        tokio::pin!(waiting);
        let cut = tokio::select! {
            r = &mut waiting => panic!("granted while held: {:?}", r.map(|l| l.owner().to_string())),
            () = wait_nodes(&hosts, dir, 2) => true,
        };
        assert!(cut);
    }
    wait_nodes(&hosts, dir, 1).await;

    // With the lock released, the next waiter gets it at once: nothing left in line before it.
    let d = client(&url, Duration::from_secs(6));
    lock.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), d.acquire("job"))
        .await
        .expect("granted without waiting for a stale node's session")
        .unwrap();
    next.release().await.unwrap();
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_extension_holds_the_lock_past_the_session_timeout() {
    let zk = start().await;
    let ttl = Duration::from_secs(3);
    let a = client(&zk.url(), ttl);
    let b = client(&zk.url(), ttl);
    let mut lock = a.try_acquire("daemon").await.unwrap();
    let before = lock.validity_deadline();
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.extend().await.unwrap();
    assert!(
        lock.validity_deadline() > before,
        "the extension moved the deadline"
    );
    let guard = lock.auto_extend(AutoExtend::new());
    tokio::time::sleep(ttl * 2 + Duration::from_secs(1)).await;
    assert!(!guard.is_lost());
    assert_eq!(
        b.try_acquire("daemon").await.unwrap_err().kind(),
        ErrorKind::Contention
    );
    guard.release().await.unwrap();
}

/// A holder whose process stalls (its runtime blocked: no heartbeat, no extension) past its
/// session timeout: the server expires the session, deletes the node, and the next waiter is
/// granted. The holder's validity deadline (so its lost signal) came before that grant, and once
/// it runs again its signal fires for the node gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_lost_signal_comes_before_the_next_grant() {
    let zk = start().await;
    let url = zk.url();
    let ttl = Duration::from_secs(2);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let holder_url = url.clone();
    let holder = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let c = client(&holder_url, ttl);
            let guard = c
                .acquire("stall")
                .await
                .unwrap()
                .auto_extend(AutoExtend::new());
            let lost = guard.lost();
            held_tx
                .send((guard.validity_deadline(), token_of(&guard)))
                .unwrap();
            go_rx.recv().unwrap();
            // The whole runtime stalls (a blocking call in async code): the session's
            // heartbeats and the lock's extensions stop.
            let stalled_from = Instant::now();
            std::thread::sleep(ttl * 4);
            let stalled_deadline = guard.validity_deadline();
            let fired = tokio::time::timeout(LONG, lost.fired()).await.is_ok();
            (stalled_from, stalled_deadline, fired, lost.cause(), guard)
        })
    });
    let (first_deadline, first_token) = held_rx.recv().unwrap();
    let b = client(&url, ttl);
    go_tx.send(()).unwrap();
    let next = b.acquire("stall").await.unwrap();
    let granted_at = Instant::now();
    let (stalled_from, stalled_deadline, fired, cause, guard) = holder.join().unwrap();
    assert!(
        granted_at > stalled_from,
        "granted before the holder stalled"
    );
    // Nothing extended the lock while stalled: the deadline it had is the one that counts,
    // and it (less nothing: the margin only makes the signal earlier) came before the grant.
    assert!(stalled_deadline >= first_deadline);
    assert!(
        stalled_deadline <= granted_at,
        "the next holder was granted {:?} before the stalled holder's validity deadline",
        stalled_deadline - granted_at
    );
    assert!(
        fired,
        "the stalled holder's lost signal fires once it runs again"
    );
    // By the clock (the deadline passed while it stalled) or by the node found gone, whichever
    // the engine sees first when it runs again.
    assert!(
        matches!(cause, Some(LostCause::Expired | LostCause::NotHeld)),
        "{cause:?}"
    );
    assert!(token(&next) > first_token);
    drop(guard);
    next.release().await.unwrap();
}

/// A holder cut off from the server (a proxy that holds back everything it sends, so no
/// heartbeat arrives) while its process runs on: the server expires the session and grants the
/// next waiter, and the holder's lost signal fired before that grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_from_the_server_is_told_before_the_next_grant() {
    let zk = start().await;
    let proxy = DelayProxy::start(zk.port()).unwrap();
    let ttl = Duration::from_secs(2);
    let a = client(&format!("zk://127.0.0.1:{}", proxy.port()), ttl);
    let guard = a
        .acquire("cut")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    let first = token_of(&guard);
    let lost = guard.lost();
    let fired = tokio::spawn({
        let lost = lost.clone();
        async move {
            lost.fired().await;
            Instant::now()
        }
    });
    let b = client(&zk.url(), ttl);
    // Longer than the test: nothing the holder sends reaches the server any more.
    proxy.set_delay(Duration::from_secs(600));
    let cut_at = Instant::now();
    let next = tokio::time::timeout(LONG, b.acquire("cut"))
        .await
        .expect("the server expires the cut-off session and grants the next waiter")
        .unwrap();
    let granted_at = Instant::now();
    let fired_at = tokio::time::timeout(Duration::from_secs(1), fired)
        .await
        .expect("the holder's lost signal fired before the grant")
        .unwrap();
    assert!(
        fired_at <= granted_at,
        "the signal fired {:?} after the next grant",
        fired_at - granted_at
    );
    assert!(fired_at > cut_at, "fired before the cut");
    assert_eq!(lost.cause(), Some(LostCause::Unreachable));
    assert!(token(&next) > first);
    next.release().await.unwrap();
    drop(guard);
}

fn token_of(guard: &fencelock::LockGuard) -> u64 {
    guard.fencing_token().expect("a token").value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_killed_under_a_held_lock_fires_lost_by_the_deadline_and_a_restart_serves_again()
{
    let zk = start().await;
    let ttl = Duration::from_secs(3);
    let a = client(&zk.url(), ttl);
    let guard = a
        .acquire("ledger")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    let first = token_of(&guard);
    let lost = guard.lost();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let last_deadline = guard.validity_deadline();
    let zk = tokio::task::spawn_blocking(move || {
        zk.kill().unwrap();
        zk
    })
    .await
    .unwrap();
    tokio::time::timeout(LONG, lost.fired())
        .await
        .expect("the lost signal fires");
    // By the validity deadline the extensions had reached (plus scheduling slack), for the
    // ensemble's silence.
    assert!(
        Instant::now() <= guard.validity_deadline().max(last_deadline) + Duration::from_secs(1),
        "fired past the deadline"
    );
    assert_eq!(lost.cause(), Some(LostCause::Unreachable));
    drop(guard);
    drop(a);

    let zk = tokio::task::spawn_blocking(move || {
        zk.restart().unwrap();
        zk
    })
    .await
    .unwrap();
    // The old session expires on the restarted server (its node with it): a new client gets
    // the lock, with a larger token.
    let b = client(&zk.url(), ttl);
    let next = b.acquire("ledger").await.unwrap();
    assert!(token(&next) > first);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_ensemble_is_unavailable_with_the_reason() {
    let zk = start().await;
    let url = zk.url();
    tokio::task::spawn_blocking(move || zk.kill().map(|()| zk))
        .await
        .unwrap()
        .unwrap();
    let c = Client::new(Config::new([url]).with_retry(RetryPolicy::once())).unwrap();
    let votes = c.connect().await;
    assert_eq!(votes.len(), 1);
    assert_eq!(votes.failed(), 1, "{votes}");
    let err = c.try_acquire("x").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}

#[tokio::test]
async fn bad_urls_are_refused_clearly_and_the_family_is_offered() {
    // No server: every refusal here comes before any I/O.
    for (nodes, why) in [
        (vec!["zk://127.0.0.1:1", "zk://127.0.0.1:2"], "in one URL"),
        (
            vec!["zk://127.0.0.1:1", "redis://127.0.0.1:6379"],
            "are mixed",
        ),
        (vec!["zk://h:port"], "port"),
        (vec!["zk://a,,b"], "no host"),
        (vec!["zk://a/x//y"], "segment"),
        (vec!["zk://:hunter2@a"], "needs both"),
        (vec!["zk://app:hunter2@a,,b"], "no host"),
    ] {
        let err = Client::new(Config::new(nodes.clone())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{nodes:?}");
        let text = err.to_string();
        assert!(text.contains(why), "{nodes:?}: {text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
    // The family is offered: building its handles needs no server.
    let c = Client::new(Config::new(["zk://127.0.0.1:1,127.0.0.1:2/app"])).unwrap();
    assert_eq!(c.semaphore("pool", 3).unwrap().permits(), 3);
    assert!(c.rwlock("doc").is_ok());
    assert!(c.election("leader").is_ok());
    let err = c.semaphore("pool", 0).map(|_| ()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

/// How a server of the ensemble fails in [`ensemble_fault`].
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILL of the leader: an election.
    KillLeader,
    /// SIGSTOP of a follower: it keeps its connections and answers nothing; a session on it
    /// must move to another server.
    PauseFollower,
}

/// A lock held on a 3-server ensemble when `fault` strikes: the holder's session moves to
/// another server within its timeout, or its lost signal fires first; either way no second
/// holder is granted before the first one's validity deadline.
async fn ensemble_fault(fault: Fault) {
    let ens = tokio::task::spawn_blocking(|| ZooKeeperEnsemble::start(3))
        .await
        .unwrap()
        .expect("start a 3-server ensemble");
    let url = ens.url();
    let ttl = Duration::from_secs(6);
    let a = client(&url, ttl);
    let guard = a
        .acquire("ens")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    let first = token_of(&guard);
    let (ens, struck) = tokio::task::spawn_blocking(move || {
        let leader = ens.leader().unwrap();
        let struck = match fault {
            Fault::KillLeader => {
                ens.member(leader).kill().unwrap();
                leader
            }
            Fault::PauseFollower => {
                let follower = (leader + 1) % 3;
                ens.member(follower).pause().unwrap();
                follower
            }
        };
        (ens, struck)
    })
    .await
    .unwrap();
    let b = client(&url, ttl);
    let lost = guard.lost();
    // b waits in line; it is granted only if a's lock is lost.
    let waited = tokio::time::timeout(Duration::from_secs(20), b.acquire("ens")).await;
    match waited {
        Err(_) => {
            // a kept its lock through the fault (its session stayed or moved): still valid.
            eprintln!("{fault:?} of server {struck}: the holder kept its lock");
            assert!(!guard.is_lost(), "a lost its lock, yet b was not granted");
            guard.release().await.unwrap();
            let next = tokio::time::timeout(LONG, b.acquire("ens"))
                .await
                .expect("b is granted after a's release")
                .unwrap();
            assert!(token(&next) > first);
            next.release().await.unwrap();
        }
        Ok(next) => {
            let granted_at = Instant::now();
            eprintln!("{fault:?} of server {struck}: the holder lost its lock, b was granted");
            let next = next.unwrap();
            assert!(lost.is_fired() || guard.is_lost(), "two holders");
            assert!(guard.validity_deadline() <= granted_at);
            assert!(token(&next) > first);
            next.release().await.unwrap();
        }
    }
    if let Fault::PauseFollower = fault {
        ens.member(struck).resume().unwrap();
    }
    drop(ens);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_under_a_held_lock_grants_no_one_before_the_holders_deadline() {
    ensemble_fault(Fault::KillLeader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_paused_under_a_held_lock_grants_no_one_before_the_holders_deadline() {
    ensemble_fault(Fault::PauseFollower).await;
}

/// The end-to-end case of fencing: a holder cut off from the server writes late with its token,
/// after the next holder (granted once the session expired) wrote with its own: the fence
/// refuses the late write.
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_holders_late_write_is_rejected_by_the_fence() {
    use fencelock::fence::SqliteFence;

    let dir = tempfile::tempdir().unwrap();
    let fence = SqliteFence::open(dir.path().join("shop.db")).unwrap();
    fence
        .unfenced(|conn| {
            conn.execute_batch(
                "CREATE TABLE inventory (sku TEXT PRIMARY KEY, stock INTEGER NOT NULL);
                 INSERT INTO inventory VALUES ('apple', 10);",
            )
        })
        .unwrap();

    let zk = start().await;
    let proxy = DelayProxy::start(zk.port()).unwrap();
    let ttl = Duration::from_secs(2);
    let a = client(&format!("zk://127.0.0.1:{}", proxy.port()), ttl);
    let b = client(&zk.url(), ttl);
    let a_lock = a.acquire("sku:apple").await.unwrap();
    let a_token = token(&a_lock);
    proxy.set_delay(Duration::from_secs(600));
    let b_lock = b.acquire("sku:apple").await.unwrap();
    let b_token = token(&b_lock);
    assert!(b_token > a_token);
    assert!(!a_lock.is_valid(), "a's validity ran out before b's grant");
    fence
        .write_async("sku:apple", b_token, |tx| {
            tx.execute(
                "UPDATE inventory SET stock = stock - 3 WHERE sku = 'apple'",
                [],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    let err = fence
        .write_async("sku:apple", a_token, |tx| {
            tx.execute("UPDATE inventory SET stock = 0 WHERE sku = 'apple'", [])?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    assert_eq!(fence.last_token("sku:apple").unwrap(), Some(b_token));
    b_lock.release().await.unwrap();
    drop(a_lock);
}

/// The blocking API on `zk://`: its own runtime thread holds the session, and two blocking
/// clients exclude each other.
#[cfg(feature = "blocking")]
#[test]
fn the_blocking_client_takes_and_releases_a_zookeeper_lock() {
    let zk = ZooKeeper::start().unwrap();
    let config = || {
        Config::new([zk.url()])
            .with_ttl(Duration::from_secs(6))
            .with_retry(RetryPolicy::once())
    };
    let a = fencelock::blocking::Client::new(config()).unwrap();
    let b = fencelock::blocking::Client::new(config()).unwrap();
    let lock = a.try_acquire("blocking").unwrap();
    let first = lock.fencing_token().unwrap().value();
    let err = b.try_acquire("blocking").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    lock.release().unwrap();
    let next = b.try_acquire("blocking").unwrap();
    assert!(next.fencing_token().unwrap().value() > first);
    next.release().unwrap();
}

/// Digest authentication: a `zk://user:password@` URL authenticates its session and makes its
/// nodes with an ACL for that identity only. A client of the same identity is refused the held
/// lock and gets it after the release; a client with a wrong password (another identity) or
/// without a user is refused at once (`InvalidConfig`, naming the URL without its password),
/// not after its wait; a session without the identity cannot read the lock's nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_authentication_keeps_the_nodes_to_its_identity_and_refuses_others_clearly() {
    let zk = start().await;
    let hosts = zk.host_port();
    let url = |auth: &str| format!("zk://{auth}{hosts}/authed");
    let a = client(&url("app:s3cret@"), Duration::from_secs(6));
    let b = client(&url("app:s3cret@"), Duration::from_secs(6));
    let lock = a.try_acquire("job").await.unwrap();
    let first = token(&lock);
    let err = b.try_acquire("job").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");

    // The nodes carry the identity's ACL, and a session without it cannot read them.
    let raw = zookeeper_client::Client::connect(&hosts).await.unwrap();
    let authed = zookeeper_client::Client::connector()
        .with_auth("digest", b"app:s3cret")
        .connect(&hosts)
        .await
        .unwrap();
    let dir = "/authed/fencelock/locks/job";
    let (acls, _) = authed.get_acl(dir).await.unwrap();
    assert!(
        acls.iter()
            .all(|acl| acl.scheme() == "digest" && acl.id().starts_with("app:")),
        "{acls:?}"
    );
    assert!(
        matches!(
            raw.list_children(dir).await,
            Err(zookeeper_client::Error::NoAuth)
        ),
        "a session without the identity listed the lock's line"
    );

    // Another identity, or none: refused at once, clearly, without the password.
    for (auth, says) in [
        ("app:wrong@", "a wrong password is another identity"),
        ("", "has no user"),
    ] {
        let other = client(&url(auth), Duration::from_secs(6));
        let started = Instant::now();
        let err = other.acquire("job").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{auth}: {err}");
        let text = err.to_string();
        assert!(text.contains(says) && text.contains("job"), "{text}");
        assert!(
            !text.contains("wrong@") && !text.contains("s3cret"),
            "{text}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{auth}: refused only after {:?}",
            started.elapsed()
        );
    }

    // The family's nodes carry the same ACL: a permit's slot and place, a writer's record.
    let permit = a.semaphore("pool", 1).unwrap().try_acquire().await.unwrap();
    let writer = a.rwlock("doc").unwrap().try_write().await.unwrap();
    for path in [
        "/authed/fencelock/semaphores/pool",
        "/authed/fencelock/semaphores/pool/slot-0",
        "/authed/fencelock/writers/doc",
    ] {
        let (acls, _) = authed.get_acl(path).await.unwrap();
        assert!(
            acls.iter().all(|acl| acl.scheme() == "digest"),
            "{path}: {acls:?}"
        );
    }
    permit.release().await.unwrap();
    writer.release().await.unwrap();

    lock.release().await.unwrap();
    let next = b.try_acquire("job").await.unwrap();
    assert!(token(&next) > first);
    next.release().await.unwrap();
}
