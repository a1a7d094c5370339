//! The family (semaphore, read-write lock, election, locks of several resources) on a 3-server
//! ZooKeeper 3.8 ensemble under faults, on one ensemble that the test kit starts once: the
//! leader killed and a follower stopped (SIGSTOP) while clients of each primitive take and
//! release in a loop, and holders whose process stalls past their session timeout. The cases
//! run concurrently, so the faults strike them all.
//!
//! Each holder notes when it was granted and when its hold ended: when it began its release,
//! or its validity deadline if that came first (a holder whose lock was lost believes it holds
//! until then, and no later). The checks are on those spans.
#![cfg(feature = "zookeeper")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{AutoExtend, Client, Config, ErrorKind, LostCause, RetryPolicy};
use fencelock_testkit::ZooKeeperEnsemble;

/// Generous: waits on a loaded 2-core machine.
const LONG: Duration = Duration::from_secs(60);
/// The workloads' session timeout: long enough that a session usually rides out an election.
const TTL: Duration = Duration::from_secs(6);
/// The stalled holders' session timeout: short, so that the stall outlasts it soon.
const SHORT_TTL: Duration = Duration::from_secs(2);

fn client(url: &str, ttl: Duration) -> Client {
    let config = Config::new([url])
        .with_ttl(ttl)
        .with_retry(RetryPolicy::new().with_wait(LONG));
    Client::new(config).unwrap()
}

/// One hold as its holder saw it.
#[derive(Debug, Clone)]
struct Span {
    who: String,
    /// A writer, a leader, a lock: alone. A reader shares with readers.
    shared: bool,
    /// The token (the term for a leader; 0 for a reader).
    token: u64,
    from: Instant,
    to: Instant,
}

/// The spans of one primitive's holders.
#[derive(Debug, Default, Clone)]
struct Spans(Arc<Mutex<Vec<Span>>>);

impl Spans {
    fn push(&self, who: &str, shared: bool, token: u64, from: Instant, deadline: Instant) {
        // The hold ends when its release begins, or at its validity deadline if that came first.
        let to = Instant::now().min(deadline);
        self.0.lock().unwrap().push(Span {
            who: who.to_string(),
            shared,
            token,
            from,
            to,
        });
    }

    fn all(&self) -> Vec<Span> {
        let mut spans = self.0.lock().unwrap().clone();
        spans.sort_by_key(|s| s.from);
        spans
    }

    /// The most spans that overlap at one instant (a span ends before one that starts where it
    /// ends).
    fn most_at_once(&self) -> usize {
        let mut edges: Vec<(Instant, i32)> = Vec::new();
        for s in self.all() {
            edges.push((s.from, 1));
            edges.push((s.to, -1));
        }
        edges.sort();
        let (mut now, mut most) = (0i32, 0i32);
        for (_, d) in edges {
            now += d;
            most = most.max(now);
        }
        most as usize
    }

    /// Two spans that overlap where one of them is not shared.
    fn exclusive_overlap(&self) -> Option<(Span, Span)> {
        let spans = self.all();
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                if b.from >= a.to {
                    continue;
                }
                if !(a.shared && b.shared) {
                    return Some((a.clone(), b.clone()));
                }
            }
        }
        None
    }

    fn granted_after(&self, t: Instant) -> usize {
        self.all().iter().filter(|s| s.from > t).count()
    }
}

/// What the fault driver did, and when.
#[derive(Debug, Default)]
struct Faults {
    done: AtomicBool,
    killed_at: Mutex<Option<Instant>>,
    over_at: Mutex<Option<Instant>>,
    /// The stalled holders' case is over: the faults strike after it, so that an election
    /// does not postpone the expiry of their sessions (a new leader gives every session a
    /// fresh timeout) and the successors' grants stay close to their deadlines.
    stalls_done: AtomicBool,
}

impl Faults {
    fn done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    async fn stalls_done(&self) {
        while !self.stalls_done.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Checks that a workload's clients are all done soon after the faults: none waits in
    /// line behind a node that a release cut off by the faults left.
    fn over(&self, workload: &str) {
        let over_at = self.over_at.lock().unwrap().expect("the faults are over");
        let late = over_at.elapsed();
        assert!(
            late < TTL * 3,
            "the {workload} workload ended {late:?} after the faults: a client waited in line that long"
        );
    }

    fn killed_at(&self) -> Instant {
        self.killed_at
            .lock()
            .unwrap()
            .expect("the leader was killed")
    }
}

/// Kills the leader, waits for the next one and restarts the killed member; then stops a
/// follower for longer than a session timeout and resumes it.
async fn drive_faults(ens: Arc<ZooKeeperEnsemble>, faults: Arc<Faults>) {
    // Let every workload get going first, and the stalled holders' case end.
    faults.stalls_done().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::spawn_blocking(move || {
        let leader = ens.leader().unwrap();
        ens.member(leader).kill().unwrap();
        *faults.killed_at.lock().unwrap() = Some(Instant::now());
        eprintln!("killed the leader, member {leader}");
        let next = ens.leader().unwrap();
        eprintln!("member {next} leads now");
        std::thread::sleep(Duration::from_secs(3));
        ens.member(leader).restart().unwrap();
        let follower = (0..3).find(|i| *i != ens.leader().unwrap()).unwrap();
        ens.member(follower).pause().unwrap();
        eprintln!("stopped member {follower}, a follower");
        std::thread::sleep(TTL + Duration::from_secs(2));
        ens.member(follower).resume().unwrap();
        eprintln!("resumed member {follower}");
        std::thread::sleep(Duration::from_secs(2));
        *faults.over_at.lock().unwrap() = Some(Instant::now());
        faults.done.store(true, Ordering::SeqCst);
    })
    .await
    .unwrap();
}

/// Tolerated while the ensemble fails: an acquisition that timed out or found it unavailable is
/// tried again; anything else fails the test.
fn ensemble_failure(e: &fencelock::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Timeout | ErrorKind::Unavailable | ErrorKind::TooSlow | ErrorKind::Lost
    )
}

/// Four clients take permits of a semaphore of 2 in a loop: never more than 2 hold.
async fn semaphore_workload(url: String, faults: Arc<Faults>) -> Spans {
    let spans = Spans::default();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let (url, faults, spans) = (url.clone(), faults.clone(), spans.clone());
        tasks.push(tokio::spawn(async move {
            let c = client(&url, TTL);
            let sem = c.semaphore("f:sem", 2).unwrap();
            while !faults.done() {
                let permit = match sem.acquire().await {
                    Ok(p) => p.auto_extend(AutoExtend::new()),
                    Err(e) if ensemble_failure(&e) => continue,
                    Err(e) => panic!("permit {i}: {e}"),
                };
                let from = Instant::now();
                let token = permit.fencing_token().unwrap().value();
                tokio::time::sleep(Duration::from_millis(150)).await;
                spans.push(
                    &format!("permit {i}"),
                    false,
                    token,
                    from,
                    permit.validity_deadline(),
                );
                let _ = permit.release().await;
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(LONG * 2, t).await.unwrap().unwrap();
    }
    faults.over("semaphore");
    spans
}

/// Four clients read and write one resource in a loop: no writer beside anyone.
async fn rwlock_workload(url: String, faults: Arc<Faults>) -> Spans {
    let spans = Spans::default();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let (url, faults, spans) = (url.clone(), faults.clone(), spans.clone());
        tasks.push(tokio::spawn(async move {
            let c = client(&url, TTL);
            let rw = c.rwlock("f:doc").unwrap();
            let mut round = 0;
            while !faults.done() {
                round += 1;
                let write = (i + round) % 3 == 0;
                let taken = if write {
                    rw.write().await
                } else {
                    rw.read().await
                };
                let lock = match taken {
                    Ok(l) => l.auto_extend(AutoExtend::new()),
                    Err(e) if ensemble_failure(&e) => continue,
                    Err(e) => panic!("rwlock client {i}: {e}"),
                };
                let from = Instant::now();
                let token = lock.fencing_token().map(|t| t.value()).unwrap_or_default();
                tokio::time::sleep(Duration::from_millis(if write { 60 } else { 150 })).await;
                let who = format!("{} {i}", if write { "writer" } else { "reader" });
                spans.push(&who, !write, token, from, lock.validity_deadline());
                let _ = lock.release().await;
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(LONG * 2, t).await.unwrap().unwrap();
    }
    faults.over("rwlock");
    spans
}

/// Three candidates campaign, lead a moment and resign, in a loop, and an observer follows:
/// one leader at a time, terms growing, the observer seeing leaders elected after the kill.
async fn election_workload(url: String, faults: Arc<Faults>) -> (Spans, Vec<(Instant, u64)>) {
    let spans = Spans::default();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (url, faults, spans) = (url.clone(), faults.clone(), spans.clone());
        tasks.push(tokio::spawn(async move {
            let c = client(&url, TTL);
            let election = c.election("f:elect").unwrap();
            while !faults.done() {
                let leader = match election.campaign(&format!("node-{i}")).await {
                    Ok(l) => l,
                    Err(e) if ensemble_failure(&e) => continue,
                    Err(e) => panic!("candidate {i}: {e}"),
                };
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(150)).await;
                spans.push(
                    &format!("leader node-{i}"),
                    false,
                    leader.term(),
                    from,
                    leader.validity_deadline(),
                );
                let _ = leader.resign().await;
            }
        }));
    }
    let observer = {
        let faults = faults.clone();
        tokio::spawn(async move {
            let c = client(&url, TTL);
            let mut observer = c.election("f:elect").unwrap().observe();
            let mut seen = Vec::new();
            while !faults.done() {
                if let Ok(leader) =
                    tokio::time::timeout(Duration::from_millis(500), observer.next()).await
                {
                    seen.push((Instant::now(), leader.term()));
                }
            }
            seen
        })
    };
    for t in tasks {
        tokio::time::timeout(LONG * 2, t).await.unwrap().unwrap();
    }
    faults.over("election");
    let seen = tokio::time::timeout(LONG, observer).await.unwrap().unwrap();
    (spans, seen)
}

/// Two clients take the same two resources (named in opposite orders) in a loop: never both
/// at once. Besides, a lock of two resources held across the kill keeps both nodes or loses
/// both, and a lock of several resources that gives up on its second resource while the
/// leader is killed leaves nothing held of its first.
async fn multi_workload(url: String, hosts: String, faults: Arc<Faults>) -> Spans {
    let spans = Spans::default();
    let mut tasks = Vec::new();
    for i in 0..2 {
        let (url, faults, spans) = (url.clone(), faults.clone(), spans.clone());
        tasks.push(tokio::spawn(async move {
            let c = client(&url, TTL);
            let names: [&str; 2] = if i == 0 {
                ["f:x", "f:y"]
            } else {
                ["f:y", "f:x"]
            };
            while !faults.done() {
                let lock = match c.acquire_many(&names).await {
                    Ok(l) => l.auto_extend(AutoExtend::new()),
                    Err(e) if ensemble_failure(&e) => continue,
                    Err(e) => panic!("multi {i}: {e}"),
                };
                let from = Instant::now();
                let token = lock.fencing_token().unwrap().value();
                tokio::time::sleep(Duration::from_millis(100)).await;
                spans.push(
                    &format!("multi {i}"),
                    false,
                    token,
                    from,
                    lock.validity_deadline(),
                );
                let _ = lock.release().await;
            }
        }));
    }

    // All or nothing while the leader is killed: a holds f:b; another asks for f:a and f:b with a
    // short wait spanning the kill, takes f:a, gives up on f:b, and must leave f:a free.
    let (a, z) = (client(&url, TTL), client(&url, TTL));
    let held_b = a
        .acquire("f:b")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    let pair = a
        .acquire_many(&["f:c", "f:d"])
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    let pair_token = pair.fencing_token().unwrap().value();
    let impatient = Client::new(
        Config::new([url.as_str()])
            .with_ttl(TTL)
            .with_retry(RetryPolicy::new().with_wait(Duration::from_secs(8))),
    )
    .unwrap();
    // Starts before the kill (a second after the stalled holders' case) and gives up after it.
    faults.stalls_done().await;
    match impatient.acquire_many(&["f:a", "f:b"]).await {
        Ok(both) => {
            // Only if a's session expired in the election: then f:b was free.
            assert!(held_b.is_lost(), "f:b granted to two");
            eprintln!("the holder of f:b lost it in the election; the pair took both");
            let _ = both.release().await;
        }
        Err(err) => assert!(ensemble_failure(&err), "{err}"),
    }
    // f:a is free soon: the give-up released it (or handed its delete to the background when
    // the ensemble did not answer); its session lives on, so its node would otherwise stay
    // until the client goes.
    let deadline = Instant::now() + TTL * 2 + Duration::from_secs(8);
    let free_a = loop {
        match z.try_acquire("f:a").await {
            Ok(l) => break l,
            Err(e) => assert!(
                Instant::now() < deadline,
                "f:a is still held after a lock of f:a and f:b gave up: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    free_a.release().await.unwrap();
    drop(impatient);
    let _ = held_b.release().await;

    // The pair held across the kill: both its nodes still there and its session's, or the
    // signal fired (and then both may go, but never one taken by someone else meanwhile).
    while !faults.done() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let c_nodes = nodes(&hosts, "/fencelock/locks/f:c").await;
    let d_nodes = nodes(&hosts, "/fencelock/locks/f:d").await;
    if pair.is_lost() {
        eprintln!("the pair held across the faults was lost");
    } else {
        assert_eq!(
            (c_nodes.len(), d_nodes.len()),
            (1, 1),
            "{c_nodes:?} {d_nodes:?}"
        );
        assert_eq!(c_nodes[0], pair.owner(), "f:c is held by its holder's node");
    }
    let _ = pair.release().await;
    let again = z.acquire_many(&["f:d", "f:c"]).await.unwrap();
    assert!(again.fencing_token().unwrap().value() > pair_token);
    again.release().await.unwrap();

    for t in tasks {
        tokio::time::timeout(LONG * 2, t).await.unwrap().unwrap();
    }
    faults.over("multi");
    spans
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

/// Waits until `dir` holds no node.
async fn wait_empty(hosts: &str, dir: &str) {
    let deadline = Instant::now() + LONG;
    loop {
        let got = nodes(hosts, dir).await;
        if got.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{dir} still holds {got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What a stalled holder reports: its validity deadline when it stalled, its token (the
/// term for a leader), whether its lost signal fired once it ran again, and why.
#[derive(Debug)]
struct Stalled {
    deadline: Instant,
    token: u64,
    fired: bool,
    cause: Option<LostCause>,
}

/// Holders of a leadership, a read lock and a permit on one thread whose runtime stalls (a
/// blocking call in async code: no heartbeat, no extension) past their session timeout, right
/// after the last of them was granted. The ensemble expires their sessions and grants the next
/// waiters: each holder's validity deadline came before its successor's grant, its lost signal
/// fires once it runs again, the permit goes to the next with a larger token, a new leader has
/// a larger term, and an observer that saw the stalled leader sees the new one next.
async fn stalled_holders(url: String) {
    // The observer follows the election from before the stalled leader's campaign.
    let watcher = client(&url, TTL);
    let mut observer = watcher.election("s:elect").unwrap().observe();
    let first_seen = tokio::spawn(async move {
        let first = tokio::time::timeout(LONG, observer.next()).await.unwrap();
        (first, observer)
    });
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let holder_url = url.clone();
    let holder = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (c1, c2, c3) = (
                client(&holder_url, SHORT_TTL),
                client(&holder_url, SHORT_TTL),
                client(&holder_url, SHORT_TTL),
            );
            for c in [&c1, &c2, &c3] {
                let _ = c.connect().await;
            }
            let leader = c3
                .election("s:elect")
                .unwrap()
                .campaign("old")
                .await
                .unwrap();
            let reader = c2
                .rwlock("s:doc")
                .unwrap()
                .read()
                .await
                .unwrap()
                .auto_extend(AutoExtend::new());
            let permit = c1
                .semaphore("s:sem", 1)
                .unwrap()
                .acquire()
                .await
                .unwrap()
                .auto_extend(AutoExtend::new());
            // Stalled from here, within moments of the grants: the deadlines are theirs (or
            // those of the last extensions).
            let signals = [permit.lost(), reader.lost(), leader.lost()];
            let deadlines = [
                permit.validity_deadline(),
                reader.validity_deadline(),
                leader.validity_deadline(),
            ];
            let tokens = [permit.fencing_token().unwrap().value(), 0, leader.term()];
            held_tx.send(()).unwrap();
            let stalled_from = Instant::now();
            std::thread::sleep(SHORT_TTL * 4);
            let mut out = Vec::new();
            for (i, s) in signals.iter().enumerate() {
                let fired = tokio::time::timeout(LONG, s.fired()).await.is_ok();
                out.push(Stalled {
                    deadline: deadlines[i],
                    token: tokens[i],
                    fired,
                    cause: s.cause(),
                });
            }
            // Leadership lost: resigning says so.
            let resigned = leader.resign().await;
            drop((permit, reader));
            (out, resigned.map_err(|e| e.kind()), stalled_from)
        })
    });
    tokio::task::spawn_blocking(move || held_rx.recv().unwrap())
        .await
        .unwrap();
    let (n1, n2, n3) = (client(&url, TTL), client(&url, TTL), client(&url, TTL));
    let (next_permit, writer, next_leader, observed) = tokio::join!(
        async {
            let p = n1.semaphore("s:sem", 1).unwrap().acquire().await.unwrap();
            (Instant::now(), p)
        },
        async {
            let w = n2.rwlock("s:doc").unwrap().write().await.unwrap();
            (Instant::now(), w)
        },
        async {
            // The announcement is not tried again within a campaign: a fault that cuts it off
            // fails the campaign (its lock released), and the candidate campaigns again.
            let election = n3.election("s:elect").unwrap();
            let deadline = Instant::now() + LONG;
            loop {
                match election.campaign("new").await {
                    Ok(l) => break (Instant::now(), l),
                    Err(e) if ensemble_failure(&e) && Instant::now() < deadline => {
                        eprintln!("campaign cut off by a fault: {e}");
                    }
                    Err(e) => panic!("campaign: {e}"),
                }
            }
        },
        async {
            let (first, mut observer) = first_seen.await.unwrap();
            assert_eq!(first.value(), "old");
            // Asked while the stalled leader's node is still there (its session outlives the
            // stall's first moments): the next leader reported is a new one, not it again.
            let next = tokio::time::timeout(LONG, observer.next()).await.unwrap();
            (first, next)
        },
    );
    let (stalled, resigned, stalled_from) =
        tokio::task::spawn_blocking(move || holder.join().unwrap())
            .await
            .unwrap();
    let granted = [next_permit.0, writer.0, next_leader.0];
    for (i, name) in ["permit", "reader", "leader"].iter().enumerate() {
        eprintln!(
            "stalled {name}: deadline {:?} after the stall began, successor granted {:?} after",
            stalled[i].deadline.saturating_duration_since(stalled_from),
            granted[i] - stalled_from
        );
    }
    for (i, (s, name)) in stalled
        .iter()
        .zip(["permit", "reader", "leader"])
        .enumerate()
    {
        assert!(
            s.deadline <= granted[i],
            "the stalled {name}'s successor was granted {:?} before its validity deadline",
            s.deadline - granted[i]
        );
        assert!(
            s.fired,
            "the stalled {name}'s lost signal fires once it runs again"
        );
        assert!(
            matches!(s.cause, Some(LostCause::Expired | LostCause::NotHeld)),
            "{name}: {:?}",
            s.cause
        );
    }
    assert!(next_permit.1.fencing_token().unwrap().value() > stalled[0].token);
    assert!(next_leader.1.term() > stalled[2].token);
    assert_eq!(resigned.unwrap_err(), ErrorKind::Lost);
    let (first, next) = observed;
    assert_eq!(first.term(), stalled[2].token);
    // The new leader's term, or that of a campaign of its that a fault cut off after its
    // announcement: between the stalled leader's and the new one's.
    assert_eq!(
        next.value(),
        "new",
        "the observer reported {next:?} after the stalled leader"
    );
    assert!(next.term() > stalled[2].token && next.term() <= next_leader.1.term());
    // The faults may be striking now: a release that fails leaves its node to the background.
    let _ = next_permit.1.release().await;
    let _ = writer.1.release().await;
    let _ = next_leader.1.resign().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_family_keeps_its_guarantees_when_the_leader_dies_a_follower_stops_and_holders_stall() {
    let started = Instant::now();
    let ens = tokio::task::spawn_blocking(|| ZooKeeperEnsemble::start(3))
        .await
        .unwrap()
        .expect("start a 3-server ensemble");
    eprintln!("ensemble up in {:?}", started.elapsed());
    let url = ens.url();
    let hosts = url.trim_start_matches("zk://").to_string();
    let ens = Arc::new(ens);
    let faults = Arc::new(Faults::default());

    let (_, sem, rw, (leaders, observed), multi, ()) = tokio::join!(
        drive_faults(ens.clone(), faults.clone()),
        semaphore_workload(url.clone(), faults.clone()),
        rwlock_workload(url.clone(), faults.clone()),
        election_workload(url.clone(), faults.clone()),
        multi_workload(url.clone(), hosts.clone(), faults.clone()),
        async {
            stalled_holders(url.clone()).await;
            faults.stalls_done.store(true, Ordering::SeqCst);
        },
    );
    let killed_at = faults.killed_at();
    eprintln!("cases over in {:?}", started.elapsed());

    // Semaphore: never more than 2 holders; grants after the kill.
    assert!(
        sem.most_at_once() <= 2,
        "more than 2 permits held at once: {:#?}",
        sem.all()
    );
    assert!(sem.granted_after(killed_at) > 0, "no permit after the kill");
    // Read-write lock: a writer is alone; readers did share; grants after the kill.
    if let Some((a, b)) = rw.exclusive_overlap() {
        panic!("{} and {} held f:doc at once: {a:?} {b:?}", a.who, b.who);
    }
    assert!(
        rw.most_at_once() > 1,
        "readers never shared: {:#?}",
        rw.all()
    );
    assert!(
        rw.granted_after(killed_at) > 0,
        "no rwlock grant after the kill"
    );
    // Election: one leader at a time, terms growing in the order they led, and the observer
    // saw a leader elected after the kill, terms growing.
    if let Some((a, b)) = leaders.exclusive_overlap() {
        panic!("two leaders at once: {a:?} {b:?}");
    }
    let terms: Vec<u64> = leaders.all().iter().map(|s| s.token).collect();
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "terms: {terms:?}");
    assert!(
        observed.iter().any(|(at, _)| *at > killed_at),
        "the observer saw no leader after the kill: {observed:?}"
    );
    assert!(observed.windows(2).all(|w| w[0].1 < w[1].1), "{observed:?}");
    // Several resources: never two holders, tokens growing.
    if let Some((a, b)) = multi.exclusive_overlap() {
        panic!("f:x and f:y held twice at once: {a:?} {b:?}");
    }
    let tokens: Vec<u64> = multi.all().iter().map(|s| s.token).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens: {tokens:?}");
    eprintln!(
        "permits {}, rwlock {}, leaders {}, multi {}, observed {}",
        sem.all().len(),
        rw.all().len(),
        leaders.all().len(),
        multi.all().len(),
        observed.len()
    );

    // Nothing left in any line: the nodes of calls cut short by the faults were deleted.
    for dir in [
        "/fencelock/semaphores/f:sem",
        "/fencelock/locks/f:doc",
        "/fencelock/locks/election:f:elect",
        "/fencelock/locks/f:x",
        "/fencelock/locks/f:y",
        "/fencelock/locks/f:a",
    ] {
        wait_empty(&hosts, dir).await;
    }
    eprintln!("done in {:?}", started.elapsed());
}
