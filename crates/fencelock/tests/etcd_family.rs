//! The semaphore and the election on real etcd: never more than N permit holders under 16
//! concurrent clients, waiters admitted in the order they came, each slot's tokens growing, a
//! dead holder's permit freed by its lease; one leader at a time, observers that see every
//! change in order, and a dead leader succeeded after the lease's TTL with a larger term.
#![cfg(feature = "etcd")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{Client, Config, ErrorKind, Leader, RetryPolicy};
use fencelock_testkit::{Etcd, EtcdCluster};

/// Generous: liveness waits on a loaded 2-core machine.
const LONG: Duration = Duration::from_secs(60);

fn config(etcd: &Etcd, ttl: Duration) -> Config {
    let urls: Vec<String> = etcd
        .endpoints()
        .iter()
        .map(|e| e.replacen("http://", "etcd://", 1))
        .collect();
    Config::new(urls)
        .with_ttl(ttl)
        .with_retry(RetryPolicy::new().with_wait(LONG))
}

fn client(etcd: &Etcd, ttl: Duration) -> Client {
    Client::new(config(etcd, ttl)).unwrap()
}

/// How many keys live under `prefix`, read with a client of its own.
async fn count(etcd: &Etcd, prefix: &str) -> i64 {
    let mut raw = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .unwrap();
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    raw.get(prefix, Some(options)).await.unwrap().count()
}

async fn wait_count(etcd: &Etcd, prefix: &str, want: i64) {
    let deadline = Instant::now() + LONG;
    loop {
        let n = count(etcd, prefix).await;
        if n == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{prefix} stayed at {n}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const PERMITS: u32 = 3;
const CLIENTS: usize = 16;
const ROUNDS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_n_permit_holders_under_sixteen_clients() {
    let etcd = Etcd::start().unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    // Per slot, the tokens in the order the slot was held.
    let tokens: Arc<Mutex<Vec<Vec<u64>>>> =
        Arc::new(Mutex::new(vec![Vec::new(); PERMITS as usize]));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        // One client each: separate connections, as separate processes would have.
        let client = client(&etcd, Duration::from_secs(10));
        let (inside, most, tokens) = (inside.clone(), most.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let sem = client.semaphore("sem:jobs", PERMITS).unwrap();
            for _ in 0..ROUNDS {
                let permit = sem.acquire().await.unwrap();
                let slot: usize = permit
                    .resource()
                    .strip_prefix("sem:jobs:permit:")
                    .unwrap()
                    .parse()
                    .unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokens.lock().unwrap()[slot].push(permit.fencing_token().unwrap().value());
                tokio::time::sleep(Duration::from_millis(fastrand::u64(5..30))).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    let tokens = tokens.lock().unwrap().clone();
    let grants: usize = tokens.iter().map(Vec::len).sum();
    println!(
        "{grants} grants to {CLIENTS} clients, at most {most} holders at once (N = {PERMITS})"
    );
    assert_eq!(grants, CLIENTS * ROUNDS);
    assert!(
        most <= PERMITS as usize,
        "{most} holders at once, N = {PERMITS}"
    );
    for (slot, t) in tokens.iter().enumerate() {
        // A slot's holders follow one another: each token above the one before.
        assert!(t.windows(2).all(|w| w[0] < w[1]), "slot {slot}: {t:?}");
    }
    // Every lease was revoked: nothing is left in the line or the slots.
    assert_eq!(count(&etcd, "fencelock/").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_admitted_in_the_order_they_came() {
    let etcd = Etcd::start().unwrap();
    let holder = client(&etcd, Duration::from_secs(10));
    let sem = holder.semaphore("sem:fifo", 2).unwrap();
    let a = sem.try_acquire().await.unwrap();
    let b = sem.try_acquire().await.unwrap();
    assert_ne!(a.resource(), b.resource());
    // The task holds every permit: refused at once, not a wait on itself.
    let err = sem.acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
    let other = client(&etcd, Duration::from_secs(10));
    let err = other
        .semaphore("sem:fifo", 2)
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    assert!(err.to_string().contains("\"sem:fifo\""), "{err}");

    // Four waiters, each in line before the next starts.
    let order: Arc<Mutex<Vec<usize>>> = Arc::default();
    let mut waiters = Vec::new();
    for i in 0..4 {
        let c = client(&etcd, Duration::from_secs(10));
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let p = c.semaphore("sem:fifo", 2).unwrap().acquire().await.unwrap();
            order.lock().unwrap().push(i);
            // Holds of different lengths: two waiters are never let in by one moment's
            // releases, so the order of their grants is the order of their admission.
            tokio::time::sleep(Duration::from_millis(500 * (i as u64 + 1))).await;
            p.release().await.unwrap();
        }));
        // The holders' two keys and one per waiter so far.
        wait_count(&etcd, "fencelock/fencelock:permits:sem:fifo/", 3 + i as i64).await;
    }
    // One release at a time: the first in line is let in, then the next.
    a.release().await.unwrap();
    let deadline = Instant::now() + LONG;
    while order.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "nobody was let in");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    b.release().await.unwrap();
    for w in waiters {
        tokio::time::timeout(LONG, w).await.unwrap().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_permit_is_freed_by_its_lease() {
    let etcd = Etcd::start().unwrap();
    let ttl = Duration::from_secs(2);
    let cfg = config(&etcd, ttl);
    // The holder lives in a runtime of its own, which then stops: no release, no renewal.
    let (token, died_at) = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let token = rt.block_on(async {
            let client = Client::new(cfg).unwrap();
            let p = client
                .semaphore("sem:dead", 1)
                .unwrap()
                .acquire()
                .await
                .unwrap();
            let token = p.fencing_token().unwrap().value();
            std::mem::forget(p);
            token
        });
        drop(rt);
        (token, Instant::now())
    })
    .join()
    .unwrap();
    let c = client(&etcd, ttl);
    let p = c.semaphore("sem:dead", 1).unwrap().acquire().await.unwrap();
    let took = died_at.elapsed();
    assert!(p.fencing_token().unwrap().value() > token);
    assert!(took >= Duration::from_millis(1500), "freed after {took:?}");
    println!("permit freed after {took:?} (TTL {ttl:?})");
    p.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_on_a_slots_resource_and_the_permit_in_that_slot_exclude_each_other() {
    let etcd = Etcd::start().unwrap();
    let a = client(&etcd, Duration::from_secs(10));
    let b = client(&etcd, Duration::from_secs(10));
    let lock = a.try_acquire("sem:mix:permit:0").await.unwrap();
    let p = b.semaphore("sem:mix", 1).unwrap().try_acquire().await;
    assert_eq!(p.unwrap_err().kind(), ErrorKind::Contention);
    lock.release().await.unwrap();
    let p = b
        .semaphore("sem:mix", 1)
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    assert_eq!(p.resource(), "sem:mix:permit:0");
    let err = a.try_acquire("sem:mix:permit:0").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contention, "{err}");
    p.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_is_kept_alive_past_its_ttl_and_its_loss_is_signalled() {
    let etcd = Etcd::start().unwrap();
    let c = client(&etcd, Duration::from_secs(1));
    let permit = c
        .semaphore("sem:alive", 2)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let token = permit.fencing_token().map(|t| t.value());
    let key = permit.owner().to_string();
    let guard = permit.auto_extend(fencelock::AutoExtend::new());
    // Three TTLs later: still held, by the same slot key.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!guard.is_lost(), "lost while extended");
    assert_eq!(count(&etcd, &key).await, 1, "{key} expired");
    // Its lease revoked behind its back (as when an operator deletes it): the signal fires.
    let lease = i64::from_str_radix(key.rsplit('/').next().unwrap(), 16).unwrap();
    let mut raw = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .unwrap();
    raw.lease_revoke(lease).await.unwrap();
    tokio::time::timeout(LONG, guard.lost().fired())
        .await
        .expect("the lost signal fires");
    assert_eq!(guard.lost().cause(), Some(fencelock::LostCause::NotHeld));
    assert_eq!(guard.context().fencing_token().map(|t| t.value()), token);
}

/// Collects `n` leaders from a fresh observer.
fn observe(client: &Client, name: &str, n: usize) -> tokio::task::JoinHandle<Vec<Leader>> {
    let mut observer = client.election(name).unwrap().observe();
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while seen.len() < n {
            seen.push(observer.next().await);
        }
        seen
    })
}

const CANDIDATES: usize = 4;
const TERMS_EACH: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_observers_see_every_change_in_order() {
    let etcd = Etcd::start().unwrap();
    let ttl = Duration::from_secs(10);
    let watcher = client(&etcd, ttl);
    let observers = [
        observe(&watcher, "e:jobs", CANDIDATES * TERMS_EACH),
        observe(&client(&etcd, ttl), "e:jobs", CANDIDATES * TERMS_EACH),
    ];
    // Let the observers make their first read.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let current: Arc<Mutex<Option<u64>>> = Arc::default();
    let elected: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let mut tasks = Vec::new();
    for i in 0..CANDIDATES {
        let client = client(&etcd, ttl);
        let (current, elected) = (current.clone(), elected.clone());
        tasks.push(tokio::spawn(async move {
            let election = client.election("e:jobs").unwrap();
            for k in 0..TERMS_EACH {
                let value = format!("candidate-{i}-{k}");
                let leadership = election.campaign(&value).await.unwrap();
                {
                    let mut cur = current.lock().unwrap();
                    assert!(
                        cur.is_none(),
                        "two leaders at once: {cur:?} and {}",
                        leadership.term()
                    );
                    *cur = Some(leadership.term());
                }
                elected.lock().unwrap().push((leadership.term(), value));
                assert_eq!(
                    leadership.context().fencing_token().map(|t| t.value()),
                    Some(leadership.term())
                );
                tokio::time::sleep(Duration::from_millis(fastrand::u64(20..80))).await;
                *current.lock().unwrap() = None;
                leadership.resign().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elected = elected.lock().unwrap().clone();
    assert!(elected.windows(2).all(|w| w[0].0 < w[1].0), "{elected:?}");
    for o in observers {
        let seen = tokio::time::timeout(LONG, o)
            .await
            .expect("the observer reports every leader")
            .unwrap();
        let seen: Vec<(u64, String)> = seen
            .iter()
            .map(|l| (l.term(), l.value().to_string()))
            .collect();
        assert_eq!(seen, elected, "every change, in order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leaders_successor_takes_over_after_the_ttl_with_a_larger_term() {
    let etcd = Etcd::start().unwrap();
    let ttl = Duration::from_secs(2);
    let cfg = config(&etcd, ttl);
    let (first, died_at) = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let term = rt.block_on(async {
            let client = Client::new(cfg).unwrap();
            let leadership = client
                .election("e:dead")
                .unwrap()
                .campaign("first")
                .await
                .unwrap();
            let term = leadership.term();
            std::mem::forget(leadership);
            term
        });
        drop(rt);
        (term, Instant::now())
    })
    .join()
    .unwrap();

    let c = client(&etcd, ttl);
    let mut observer = c.election("e:dead").unwrap().observe();
    let seen_first = tokio::time::timeout(LONG, observer.next()).await.unwrap();
    assert_eq!((seen_first.term(), seen_first.value()), (first, "first"));
    // A candidate waiting meanwhile is not a leader: observers do not report it.
    let second = c
        .election("e:dead")
        .unwrap()
        .campaign("second")
        .await
        .unwrap();
    let took = died_at.elapsed();
    assert!(second.term() > first, "{} after {first}", second.term());
    assert!(
        took >= Duration::from_millis(1500),
        "took over after {took:?}"
    );
    let seen_second = tokio::time::timeout(LONG, observer.next()).await.unwrap();
    assert_eq!(
        (seen_second.term(), seen_second.value()),
        (second.term(), "second")
    );
    println!(
        "successor after {took:?} (TTL {ttl:?}), term {} > {first}",
        second.term()
    );
    second.resign().await.unwrap();
}

/// An observer whose watch runs on a member that stops (`kill -STOP`, the follower listed
/// first) sees the next leader through another member: its watch asks for progress every
/// request timeout and moves on when the member is silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_whose_member_stops_sees_the_next_leader_through_another() {
    let cluster = EtcdCluster::start(3).unwrap();
    let (follower, endpoints) = cluster.follower_first(LONG).unwrap();
    let urls: Vec<String> = endpoints
        .iter()
        .map(|e| e.replacen("http://", "etcd://", 1))
        .collect();
    let ttl = Duration::from_secs(30);
    let watching = Client::new(Config::new(urls.clone()).with_ttl(ttl)).unwrap();
    let mut observer = watching.election("e:silent").unwrap().observe();
    // The observer's first read and its watch, on the follower.
    let first = tokio::time::timeout(Duration::from_millis(1500), observer.next()).await;
    assert!(first.is_err(), "no leader yet: {first:?}");
    cluster.member(follower).pause().unwrap();
    let candidate = Client::new(Config::new(urls[1..].to_vec()).with_ttl(ttl)).unwrap();
    let leadership = candidate
        .election("e:silent")
        .unwrap()
        .campaign("after")
        .await
        .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(8), observer.next()).await;
    cluster.member(follower).resume().unwrap();
    let seen = seen.expect("the observer did not see the leader within 8 s");
    assert_eq!(seen.value(), "after");
    leadership.resign().await.unwrap();
}

/// Issue 35, item 2: a take of a slot ("if our line key lives and the slot is free, create our
/// key there") whose answer is lost, as when the waiter's member stops at the take, may have
/// been applied: the waiter's lease then holds the slot without the waiter knowing it. Here
/// that take is applied from outside, with the waiter's lease, in the transaction that frees
/// the slot, writing what the waiter's own request writes (its slot key, and its line key
/// again, which marks the take); a pause cannot be timed from outside between the waiter's look
/// and its take. With one permit, the waiter must find the slot its lease holds and take the
/// permit there, with that key's revision as its token. Before the fix it went on renewing the
/// lease that kept the slot, blocking itself (and everyone) until its wait ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_finds_the_slot_a_take_without_an_answer_gave_it() {
    use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

    let etcd = Etcd::start().unwrap();
    let x = client(&etcd, Duration::from_secs(10));
    // A mutex on the slot's resource holds the only slot: the waiter, admitted, waits for it.
    let blocker = x.try_acquire("sem:orphan:permit:0").await.unwrap();
    let config = config(&etcd, Duration::from_secs(10))
        .with_retry(RetryPolicy::new().with_wait(Duration::from_secs(8)));
    let w = Client::new(config).unwrap();
    let waiter = tokio::spawn(async move {
        let sem = w.semaphore("sem:orphan", 1).unwrap();
        sem.acquire().await.map(|p| (p.resource().to_string(), p))
    });
    let line = "fencelock/fencelock:permits:sem:orphan/";
    wait_count(&etcd, line, 1).await;
    let mut raw = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .unwrap();
    let listed = raw
        .get(line, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let mine = listed.kvs()[0].clone();
    let (line_key, lease) = (mine.key().to_vec(), mine.lease());
    let slot_key = format!("fencelock/sem:orphan:permit:0/{:016x}", lease as u64);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let taken = raw
        .txn(
            Txn::new()
                .when([Compare::create_revision(
                    line_key.clone(),
                    CompareOp::Equal,
                    mine.create_revision(),
                )])
                .and_then([
                    TxnOp::delete(blocker.owner(), None),
                    TxnOp::put(
                        slot_key.clone(),
                        Vec::<u8>::new(),
                        Some(PutOptions::new().with_lease(lease)),
                    ),
                    TxnOp::put(
                        line_key,
                        mine.value().to_vec(),
                        Some(PutOptions::new().with_lease(lease)),
                    ),
                ]),
        )
        .await
        .unwrap();
    assert!(taken.succeeded(), "the waiter's line key was gone");
    let revision = taken.header().unwrap().revision();
    let (slot, permit) = match waiter.await.unwrap() {
        Ok(held) => held,
        Err(e) => panic!("the waiter did not find the slot its lease held: {e}"),
    };
    assert_eq!(slot, "sem:orphan:permit:0");
    assert_eq!(permit.owner(), slot_key);
    assert_eq!(
        permit.fencing_token().map(|t| t.value()),
        Some(revision as u64)
    );
    let _ = blocker.release().await;
    permit.release().await.unwrap();
    assert_eq!(count(&etcd, "fencelock/sem:orphan:permit:").await, 0);
}
