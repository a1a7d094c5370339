//! The lock family on a real ZooKeeper 3.8 server that the test kit starts (one per test, each
//! test running its cases concurrently): locks of several resources (all or nothing, no
//! deadlock, the largest czxid as token), semaphores (never more than N holders, FIFO, a count
//! mismatch refused), read-write locks (readers share, writers exclude, a waiting writer goes
//! before later readers, readers see the last writer's token), elections (one leader, terms
//! that grow, observers that see each leader), waiters that give up leaving no node, and the
//! lost signal of each primitive when its session is cut off.
#![cfg(feature = "zookeeper")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{Client, Config, ErrorKind, LostCause, RetryPolicy};
use fencelock_testkit::{DelayProxy, ZooKeeper};

/// Generous: waits on a loaded 2-core machine.
const LONG: Duration = Duration::from_secs(60);

async fn start() -> ZooKeeper {
    tokio::task::spawn_blocking(ZooKeeper::start)
        .await
        .unwrap()
        .expect("start ZooKeeper")
}

fn client(url: &str, ttl: Duration) -> Client {
    let config = Config::new([url])
        .with_ttl(ttl)
        .with_retry(RetryPolicy::new().with_wait(LONG));
    Client::new(config).unwrap()
}

fn token(lock: &fencelock::Lock) -> u64 {
    lock.fencing_token().expect("a token").value()
}

/// The children of `dir`, read with a session of our own.
async fn nodes(hosts: &str, dir: &str) -> Vec<String> {
    let raw = zookeeper_client::Client::connect(hosts).await.unwrap();
    match raw.list_children(dir).await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {dir}: {e}"),
    }
}

/// Waits until `dir` holds `n` children.
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

/// The czxid of `path`.
async fn czxid(hosts: &str, path: &str) -> u64 {
    let raw = zookeeper_client::Client::connect(hosts).await.unwrap();
    let stat = raw.check_stat(path).await.unwrap().expect("node exists");
    stat.czxid as u64
}

const TTL: Duration = Duration::from_secs(6);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_of_several_resources_is_all_or_nothing_without_deadlock() {
    let zk = start().await;
    let (url, hosts) = (zk.url(), zk.host_port());
    let a = client(&url, TTL);
    let b = client(&url, TTL);

    // The token is the largest czxid of the lock's nodes.
    let both = a.try_acquire_many(&["m:a", "m:b"]).await.unwrap();
    let na = nodes(&hosts, "/fencelock/locks/m:a").await;
    let nb = nodes(&hosts, "/fencelock/locks/m:b").await;
    assert_eq!((na.len(), nb.len()), (1, 1));
    let za = czxid(&hosts, &format!("/fencelock/locks/m:a/{}", na[0])).await;
    let zb = czxid(&hosts, &format!("/fencelock/locks/m:b/{}", nb[0])).await;
    assert_eq!(token(&both), za.max(zb));
    // One of them held: refused, and nothing of the refused try stays in either line.
    let err = b.try_acquire_many(&["m:c", "m:b"]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    assert!(nodes(&hosts, "/fencelock/locks/m:c").await.is_empty());
    // A waiter cut short while it holds one resource and waits for the other leaves nothing.
    let cut =
        tokio::time::timeout(Duration::from_millis(1500), b.acquire_many(&["m:c", "m:b"])).await;
    assert!(cut.is_err(), "granted while m:b was held");
    // Deleted in the background: m:c's node goes, m:b keeps only the holder's.
    wait_nodes(&hosts, "/fencelock/locks/m:c", 0).await;
    assert_eq!(nodes(&hosts, "/fencelock/locks/m:b").await.len(), 1);
    let first = token(&both);
    both.release().await.unwrap();
    wait_nodes(&hosts, "/fencelock/locks/m:a", 0).await;
    wait_nodes(&hosts, "/fencelock/locks/m:b", 0).await;

    // Two clients asking for {x, y} and {y, x} over and over: no deadlock, never both inside,
    // tokens growing.
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(vec![first]));
    let mut tasks = Vec::new();
    for order in [["m:x", "m:y"], ["m:y", "m:x"]] {
        for _ in 0..2 {
            let c = client(&url, TTL);
            let (inside, tokens) = (inside.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let lock = c.acquire_many(&order).await.unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    tokens.lock().unwrap().push(token(&lock));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    lock.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(LONG, t)
            .await
            .expect("no deadlock")
            .unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

const PERMITS: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_has_more_than_n_holders_and_admits_in_order() {
    let zk = start().await;
    let (url, hosts) = (zk.url(), zk.host_port());

    let under_load = {
        let url = url.clone();
        async move {
            let inside = Arc::new(AtomicUsize::new(0));
            let most = Arc::new(AtomicUsize::new(0));
            let tokens: Arc<Mutex<Vec<Vec<u64>>>> =
                Arc::new(Mutex::new(vec![Vec::new(); PERMITS as usize]));
            let mut tasks = Vec::new();
            for _ in 0..8 {
                let c = client(&url, TTL);
                let (inside, most, tokens) = (inside.clone(), most.clone(), tokens.clone());
                tasks.push(tokio::spawn(async move {
                    let sem = c.semaphore("sem:jobs", PERMITS).unwrap();
                    for _ in 0..3 {
                        let permit = sem.acquire().await.unwrap();
                        let slot: usize = permit
                            .resource()
                            .strip_prefix("sem:jobs:permit:")
                            .unwrap()
                            .parse()
                            .unwrap();
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokens.lock().unwrap()[slot].push(token(&permit));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        permit.release().await.unwrap();
                    }
                }));
            }
            for t in tasks {
                tokio::time::timeout(LONG, t).await.unwrap().unwrap();
            }
            let most = most.load(Ordering::SeqCst);
            assert!(most <= PERMITS as usize, "{most} holders at once");
            let tokens = tokens.lock().unwrap().clone();
            assert_eq!(tokens.iter().map(Vec::len).sum::<usize>(), 24);
            for (slot, t) in tokens.iter().enumerate() {
                assert!(t.windows(2).all(|w| w[0] < w[1]), "slot {slot}: {t:?}");
            }
        }
    };

    let in_order = {
        let (url, hosts) = (url.clone(), hosts.clone());
        async move {
            let dir = "/fencelock/semaphores/sem:fifo";
            let holder = client(&url, TTL);
            let sem = holder.semaphore("sem:fifo", 2).unwrap();
            let a = sem.try_acquire().await.unwrap();
            let b = sem.try_acquire().await.unwrap();
            assert_ne!(a.resource(), b.resource());
            // Two places in line and two slots.
            assert_eq!(nodes(&hosts, dir).await.len(), 4);
            let err = client(&url, TTL)
                .semaphore("sem:fifo", 2)
                .unwrap()
                .try_acquire()
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
            // Another count for the same semaphore is refused while it is in use.
            let err = client(&url, TTL)
                .semaphore("sem:fifo", 3)
                .unwrap()
                .try_acquire()
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
            assert!(err.to_string().contains("permits"), "{err}");
            assert_eq!(nodes(&hosts, dir).await.len(), 4);
            // A waiter cut short leaves no node.
            let quitter = client(&url, TTL);
            let sem_q = quitter.semaphore("sem:fifo", 2).unwrap();
            assert!(
                tokio::time::timeout(Duration::from_millis(1000), sem_q.acquire())
                    .await
                    .is_err()
            );
            wait_nodes(&hosts, dir, 4).await;
            // Waiters join one after another; each release admits the one that came first.
            let order = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = Vec::new();
            for i in 0..3 {
                let c = client(&url, TTL);
                let order = order.clone();
                tasks.push(tokio::spawn(async move {
                    let p = c.semaphore("sem:fifo", 2).unwrap().acquire().await.unwrap();
                    order.lock().unwrap().push(i);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    p.release().await.unwrap();
                }));
                wait_nodes(&hosts, dir, 5 + i).await;
            }
            a.release().await.unwrap();
            b.release().await.unwrap();
            for t in tasks {
                tokio::time::timeout(LONG, t).await.unwrap().unwrap();
            }
            assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
            wait_nodes(&hosts, dir, 0).await;
        }
    };
    tokio::join!(under_load, in_order);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_writers_exclude_and_a_waiting_writer_goes_before_later_readers() {
    let zk = start().await;
    let (url, hosts) = (zk.url(), zk.host_port());

    let order = {
        let (url, hosts) = (url.clone(), hosts.clone());
        async move {
            let dir = "/fencelock/locks/doc";
            let (r1, r2, w, r3) = (
                client(&url, TTL),
                client(&url, TTL),
                client(&url, TTL),
                client(&url, TTL),
            );
            // A first writer records its token for later readers.
            let first = w.rwlock("doc").unwrap().try_write().await.unwrap();
            let first_token = token(&first);
            // A reader cut short while the writer holds leaves no node.
            let cut =
                tokio::time::timeout(Duration::from_millis(800), r1.rwlock("doc").unwrap().read())
                    .await;
            assert!(cut.is_err(), "a reader beside the writer");
            wait_nodes(&hosts, dir, 1).await;
            first.release().await.unwrap();
            let a = r1.rwlock("doc").unwrap().try_read().await.unwrap();
            let b = r2.rwlock("doc").unwrap().try_read().await.unwrap();
            assert!(a.fencing_token().is_none());
            assert_eq!(a.last_writer_token(), Some(first_token));
            let err = w.rwlock("doc").unwrap().try_write().await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
            // A writer waits behind the readers; a reader that comes after it waits for it.
            let writer = tokio::spawn(async move {
                let lock = w.rwlock("doc").unwrap().write().await.unwrap();
                let t = token(&lock);
                tokio::time::sleep(Duration::from_millis(200)).await;
                lock.release().await.unwrap();
                t
            });
            wait_nodes(&hosts, dir, 3).await;
            let err = r3.rwlock("doc").unwrap().try_read().await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
            let later = tokio::spawn(async move {
                let lock = r3.rwlock("doc").unwrap().read().await.unwrap();
                let seen = lock.last_writer_token();
                lock.release().await.unwrap();
                seen
            });
            wait_nodes(&hosts, dir, 4).await;
            a.release().await.unwrap();
            b.release().await.unwrap();
            let written = tokio::time::timeout(LONG, writer).await.unwrap().unwrap();
            assert!(written > first_token);
            // The later reader was granted after the writer, and sees its token.
            let seen = tokio::time::timeout(LONG, later).await.unwrap().unwrap();
            assert_eq!(seen, Some(written));
            wait_nodes(&hosts, dir, 0).await;
        }
    };

    let mixed = {
        let url = url.clone();
        async move {
            // Readers and writers at random: a writer is always alone, readers overlap.
            let readers = Arc::new(AtomicUsize::new(0));
            let writers = Arc::new(AtomicUsize::new(0));
            let most_readers = Arc::new(AtomicUsize::new(0));
            let mut tasks = Vec::new();
            for i in 0..6 {
                let c = client(&url, TTL);
                let (readers, writers, most_readers) =
                    (readers.clone(), writers.clone(), most_readers.clone());
                tasks.push(tokio::spawn(async move {
                    let rw = c.rwlock("mixed").unwrap();
                    for round in 0..4 {
                        if (i + round) % 3 == 0 {
                            let lock = rw.write().await.unwrap();
                            assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0);
                            assert_eq!(readers.load(Ordering::SeqCst), 0);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            writers.fetch_sub(1, Ordering::SeqCst);
                            lock.release().await.unwrap();
                        } else {
                            let lock = rw.read().await.unwrap();
                            let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                            most_readers.fetch_max(now, Ordering::SeqCst);
                            assert_eq!(writers.load(Ordering::SeqCst), 0);
                            tokio::time::sleep(Duration::from_millis(60)).await;
                            readers.fetch_sub(1, Ordering::SeqCst);
                            lock.release().await.unwrap();
                        }
                    }
                }));
            }
            for t in tasks {
                tokio::time::timeout(LONG, t).await.unwrap().unwrap();
            }
            assert!(
                most_readers.load(Ordering::SeqCst) > 1,
                "readers never overlapped"
            );
        }
    };
    tokio::join!(order, mixed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_with_growing_terms_and_observers_see_each_leader() {
    let zk = start().await;
    let url = zk.url();
    let observer_client = client(&url, TTL);
    let mut observer = observer_client.election("svc").unwrap().observe();
    let (a, b) = (client(&url, TTL), client(&url, TTL));
    let lead_a = a.election("svc").unwrap().campaign("node-a").await.unwrap();
    let seen = tokio::time::timeout(LONG, observer.next()).await.unwrap();
    assert_eq!((seen.term(), seen.value()), (lead_a.term(), "node-a"));
    // B waits while A leads.
    let b_campaign = tokio::spawn(async move {
        let l = b.election("svc").unwrap().campaign("node-b").await.unwrap();
        (l.term(), l)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!b_campaign.is_finished(), "two leaders");
    let term_a = lead_a.term();
    lead_a.resign().await.unwrap();
    let (term_b, lead_b) = tokio::time::timeout(LONG, b_campaign)
        .await
        .unwrap()
        .unwrap();
    assert!(term_b > term_a, "{term_b} <= {term_a}");
    let seen = tokio::time::timeout(LONG, observer.next()).await.unwrap();
    assert_eq!((seen.term(), seen.value()), (term_b, "node-b"));
    // A late observer sees the current leader first.
    let mut late = observer_client.election("svc").unwrap().observe();
    let seen = tokio::time::timeout(LONG, late.next()).await.unwrap();
    assert_eq!(seen.term(), term_b);
    lead_b.resign().await.unwrap();
}

/// The holder of a permit, a read lock, a leadership and a lock of two resources, all cut off
/// from the server (a proxy that holds back everything they send): the server expires their
/// sessions and grants the next waiters, and each holder's lost signal fired before its
/// successor's grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_holders_lost_signal_comes_before_the_next_grant_for_each_primitive() {
    let zk = start().await;
    let url = zk.url();
    let proxy = DelayProxy::start(zk.port()).unwrap();
    let ttl = Duration::from_secs(2);
    let far = format!("zk://127.0.0.1:{}", proxy.port());
    let (c1, c2, c3, c4) = (
        client(&far, ttl),
        client(&far, ttl),
        client(&far, ttl),
        client(&far, ttl),
    );
    let permit = c1
        .semaphore("cut:sem", 1)
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .auto_extend(fencelock::AutoExtend::new());
    let reader = c2
        .rwlock("cut:doc")
        .unwrap()
        .read()
        .await
        .unwrap()
        .auto_extend(fencelock::AutoExtend::new());
    let leader = c3.election("cut").unwrap().campaign("far").await.unwrap();
    let pair = c4
        .acquire_many(&["cut:a", "cut:b"])
        .await
        .unwrap()
        .auto_extend(fencelock::AutoExtend::new());
    let first = [
        permit.fencing_token().unwrap().value(),
        leader.term(),
        pair.fencing_token().unwrap().value(),
    ];
    let signals = [permit.lost(), reader.lost(), leader.lost(), pair.lost()];
    let fired: Vec<_> = signals
        .iter()
        .map(|s| {
            let s = s.clone();
            tokio::spawn(async move {
                s.fired().await;
                Instant::now()
            })
        })
        .collect();
    proxy.set_delay(Duration::from_secs(600));
    let cut_at = Instant::now();
    let (n1, n2, n3, n4) = (
        client(&url, ttl),
        client(&url, ttl),
        client(&url, ttl),
        client(&url, ttl),
    );
    let (next_permit, writer, next_leader, next_pair) = tokio::join!(
        async {
            let p = n1.semaphore("cut:sem", 1).unwrap().acquire().await.unwrap();
            (Instant::now(), p)
        },
        async {
            let w = n2.rwlock("cut:doc").unwrap().write().await.unwrap();
            (Instant::now(), w)
        },
        async {
            let l = n3.election("cut").unwrap().campaign("near").await.unwrap();
            (Instant::now(), l)
        },
        async {
            let l = n4.acquire_many(&["cut:b", "cut:a"]).await.unwrap();
            (Instant::now(), l)
        },
    );
    let granted = [next_permit.0, writer.0, next_leader.0, next_pair.0];
    for (i, f) in fired.into_iter().enumerate() {
        let fired_at = tokio::time::timeout(Duration::from_secs(1), f)
            .await
            .expect("the lost signal fired before the next grant")
            .unwrap();
        assert!(fired_at > cut_at, "primitive {i}: fired before the cut");
        assert!(
            fired_at <= granted[i],
            "primitive {i}: the signal fired {:?} after the next grant",
            fired_at - granted[i]
        );
    }
    assert_eq!(signals[0].cause(), Some(LostCause::Unreachable));
    assert!(token(&next_permit.1) > first[0]);
    assert!(next_leader.1.term() > first[1]);
    assert!(token(&next_pair.1) > first[2]);
    next_pair.1.release().await.unwrap();
    next_permit.1.release().await.unwrap();
    writer.1.release().await.unwrap();
    next_leader.1.resign().await.unwrap();
    drop((permit, reader, leader, pair));
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

/// A semaphore of 1 with three waiters: the first waiter watches the directory (any release
/// lets it in), each other waiter the waiter just before it (no one watches the holder). A release wakes one waiter, not
/// the herd; the next waiters follow in order as each is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_waiters_each_watch_one_node_not_the_herd() {
    let zk = start().await;
    let (url, hosts) = (zk.url(), zk.host_port());
    let dir = "/fencelock/semaphores/herd";
    let holder = client(&url, TTL);
    let permit = holder
        .semaphore("herd", 1)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let c = client(&url, TTL);
        tasks.push(tokio::spawn(async move {
            let p = c.semaphore("herd", 1).unwrap().acquire().await.unwrap();
            p.release().await.unwrap();
        }));
        // The holder's place and slot, and one node per waiter.
        wait_nodes(&hosts, dir, 3 + i).await;
    }
    // `wchp` lists the nodes' watches (the first waiter's watch of the directory's children is
    // not among them): two, the first and the second waiter's nodes.
    let deadline = Instant::now() + LONG;
    let seen = loop {
        let seen = tokio::task::block_in_place(|| watched(&zk, dir));
        if seen.iter().map(|(_, n)| n).sum::<usize>() == 2 {
            break seen;
        }
        assert!(Instant::now() < deadline, "watches: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut line: Vec<String> = nodes(&hosts, dir)
        .await
        .into_iter()
        .filter(|n| n.contains("-lock-"))
        .collect();
    line.sort_by_key(|n| n.rsplit('-').next().unwrap().to_string());
    // line[0] is the holder's place, line[1] the first waiter.
    let mut want = vec![format!("{dir}/{}", line[1]), format!("{dir}/{}", line[2])];
    want.sort();
    let mut paths: Vec<String> = seen.iter().map(|(p, _)| p.clone()).collect();
    paths.sort();
    assert_eq!(paths, want, "{seen:?}");
    assert!(seen.iter().all(|(_, n)| *n == 1), "{seen:?}");
    permit.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(LONG, t).await.unwrap().unwrap();
    }
    wait_nodes(&hosts, dir, 0).await;
}
