//! A Sentinel-managed primary as one node (`redis+sentinel://`, issue 31) on real processes: a
//! primary, two replicas and three Sentinels (`fencelock_testkit::SentinelGroup`).

use std::time::{Duration, Instant};

use fencelock::protocol::{new_node_marker, NODE_MARKER_KEY};
use fencelock::{Client, Config, ErrorKind};
use fencelock_testkit::SentinelGroup;

/// Generous: a Sentinel calls a node down after 1 s, and the machine may be loaded.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(60);

/// Marks the primary as new (as `fencelock up` does): it never held a lock. Waits until both
/// replicas have the marker, as replication brings it.
fn mark_new(group: &SentinelGroup) {
    let p = group.primary().unwrap();
    let marker = new_node_marker(&group.node(p).run_id().unwrap());
    group
        .node(p)
        .cli(&["SET", NODE_MARKER_KEY, &marker])
        .unwrap();
    wait_for_replicas(group, p, NODE_MARKER_KEY, &marker);
}

/// Waits until every replica of `primary` holds `value` at `key`.
fn wait_for_replicas(group: &SentinelGroup, primary: usize, key: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for r in (0..3).filter(|r| *r != primary) {
        while group.node(r).cli(&["GET", key]).unwrap() != value {
            assert!(
                Instant::now() < deadline,
                "replica {r} never got {key}={value}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Waits until `node` holds `value` at `key`.
fn wait_for_key(node: &fencelock_testkit::RedisNode, key: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.cli(&["GET", key]).unwrap() != value {
        assert!(
            Instant::now() < deadline,
            "{key} never reached port {}",
            node.port()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn client(group: &SentinelGroup, ttl: Duration, fencing: bool) -> Client {
    Client::new(
        Config::new([group.url()])
            .with_ttl(ttl)
            .with_node_timeout(Duration::from_millis(1500))
            .with_connect_timeout(Duration::from_secs(5))
            .with_fencing(fencing),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_and_a_fenced_lock_through_a_sentinel_url() {
    let group = SentinelGroup::start().unwrap();
    mark_new(&group);
    let p = group.primary().unwrap();

    let a = client(&group, Duration::from_secs(5), false);
    let b = client(&group, Duration::from_secs(5), false);
    let lock = a.try_acquire("sentinel-plain").await.unwrap();
    // The key is on the primary the Sentinels name.
    assert_eq!(
        group.node(p).cli(&["GET", "sentinel-plain"]).unwrap(),
        lock.owner()
    );
    let refused = b.try_acquire("sentinel-plain").await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Contention, "{refused}");
    lock.release().await.unwrap();
    b.try_acquire("sentinel-plain")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let f = client(&group, Duration::from_secs(5), true);
    let first = f.try_acquire("sentinel-fenced").await.unwrap();
    let t1 = first
        .fencing_token()
        .expect("a fenced lock has a token")
        .value();
    first.release().await.unwrap();
    let g = client(&group, Duration::from_secs(5), true);
    let second = g.try_acquire("sentinel-fenced").await.unwrap();
    let t2 = second.fencing_token().unwrap().value();
    assert!(t2 > t1, "token {t2} after {t1}");
    second.release().await.unwrap();
}

/// A failover may lose the last writes: replication is asynchronous, and the old primary may
/// die with a lock's key and its counter raise not yet sent. No real failover loses a chosen
/// write on demand, so the loss is made by hand on the replicas (a real process state: the
/// key and the raise of A's one script call gone, as if its replication had not left the
/// primary), then the primary is killed (SIGKILL) and the Sentinels promote a replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_lost_a_held_lock_keeps_it_out_of_reach_and_tokens_in_order() {
    let group = SentinelGroup::start().unwrap();
    mark_new(&group);
    let p = group.primary().unwrap();

    // A counter exists before A's grant (a warm node), so the loss leaves a stale one.
    let warm = client(&group, Duration::from_secs(2), true);
    warm.try_acquire("warm-up")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let before = group.node(p).cli(&["GET", "fencelock:fence"]).unwrap();
    wait_for_replicas(&group, p, "fencelock:fence", &before);

    let a_ttl = Duration::from_secs(12);
    let a = client(&group, a_ttl, true);
    let mut held = a.try_acquire("job").await.unwrap();
    let ta = held.fencing_token().unwrap().value();
    wait_for_replicas(&group, p, "job", held.owner());
    for r in (0..3).filter(|r| *r != p) {
        let node = group.node(r);
        node.cli(&["CONFIG", "SET", "replica-read-only", "no"])
            .unwrap();
        node.cli(&["DEL", "job"]).unwrap();
        node.cli(&["SET", "fencelock:fence", &before]).unwrap();
        node.cli(&["CONFIG", "SET", "replica-read-only", "yes"])
            .unwrap();
    }

    group.node(p).kill().unwrap();
    let killed = Instant::now();
    let new = group.wait_for_failover(p, FAILOVER_DEADLINE).unwrap();
    eprintln!("failover to node {new} in {:?}", killed.elapsed());
    assert_eq!(group.node(new).cli(&["GET", "job"]).unwrap(), "(nil)");

    // B, a client with a shorter TTL, tries while A's lock is valid: never granted. Its own
    // TTL passes meanwhile, so the quarantine must last as long as A's (read from the TTLs the
    // node replicated), not B's.
    let b = client(&group, Duration::from_secs(2), true);
    let mut tries = 0;
    while held.remaining() > Duration::from_millis(1500) {
        match b.try_acquire("job").await {
            Ok(stolen) => panic!(
                "B took the lock while A's is valid for {:?} more: {}",
                held.remaining(),
                stolen.votes()
            ),
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Contention),
                "{e}"
            ),
        }
        tries += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        tries >= 3,
        "the test ran too slowly to show anything ({tries} tries)"
    );
    // A is told its lock is gone (the promoted node lacks its key), not extended.
    let extended = held.extend().await;
    assert!(
        extended.is_err(),
        "A's lock was extended on a node without its key"
    );

    // Once A's lock has expired, B gets it, with a token above A's.
    let deadline = Instant::now() + Duration::from_secs(40);
    tokio::time::sleep(held.remaining() + Duration::from_millis(100)).await;
    let granted = loop {
        match b.try_acquire("job").await {
            Ok(lock) => break lock,
            Err(e) => assert!(Instant::now() < deadline, "B never got the lock: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let tb = granted.fencing_token().unwrap().value();
    eprintln!("counter before A: {before}; A's token {ta}; B's token {tb}");
    assert!(
        tb > ta,
        "B was issued {tb} after A's {ta}: the order broke across the failover"
    );
    granted.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_follows_the_primary_across_a_failover_and_never_writes_to_a_replica() {
    let group = SentinelGroup::start().unwrap();
    mark_new(&group);
    let old = group.primary().unwrap();
    let c = client(&group, Duration::from_secs(2), false);
    c.try_acquire("follow")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // A failover with the old primary alive: it becomes a replica of the promoted one, and the
    // client's connection to it stays open.
    group.failover().unwrap();
    let new = group.wait_for_failover(old, FAILOVER_DEADLINE).unwrap();
    // Until the Sentinels turn the old primary into a replica, it still takes writes that the
    // promoted one never sees: the split-brain window a failover with a live primary opens
    // (docs/guarantees.md: not covered). The client's next write comes after it.
    let deadline = Instant::now() + FAILOVER_DEADLINE;
    // The Sentinels reconfigure it with `CLIENT KILL TYPE normal`, which can close this very query's
    // connection: an error here means "not yet".
    while !group
        .node(old)
        .cli(&["ROLE"])
        .is_ok_and(|r| r.starts_with("slave"))
    {
        assert!(
            Instant::now() < deadline,
            "the old primary never became a replica"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut refusals = Vec::new();
    let lock = loop {
        match c.try_acquire("follow").await {
            Ok(lock) => break lock,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "the client never took the lock on the new primary: {e}; before: {refusals:?}"
                );
                refusals.push(e.to_string());
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    // The grant is on the node that is primary now.
    let primary = group.primary().unwrap();
    assert_eq!(primary, new);
    assert!(group
        .node(new)
        .cli(&["ROLE"])
        .unwrap()
        .starts_with("master"));
    assert_eq!(
        group.node(new).cli(&["GET", "follow"]).unwrap(),
        lock.owner()
    );
    lock.release().await.unwrap();
    eprintln!("refusals before the grant: {refusals:#?}");
    // The first attempt met the old primary demoted (Redis 7.0 closes its clients' connections
    // then; a connection kept open would get READONLY, which drops it too): not granted there.
    assert!(
        refusals
            .first()
            .is_some_and(|r| r.contains("connection lost") || r.contains("read-only")),
        "{refusals:#?}"
    );
}

/// A primary demoted by hand (`REPLICAOF`, not by the Sentinels, which would close its clients'
/// connections): the client's kept connection meets `READONLY`, is dropped, and the next
/// connection finds the node the Sentinels still name answering as a replica: not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_demoted_under_a_kept_connection_is_dropped_and_never_written() {
    let group = SentinelGroup::start().unwrap();
    mark_new(&group);
    let p = group.primary().unwrap();
    let other = (p + 1) % 3;
    let c = client(&group, Duration::from_secs(2), false);
    c.try_acquire("warm")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let port = group.node(other).port().to_string();
    group
        .node(p)
        .cli(&["REPLICAOF", "127.0.0.1", &port])
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !group.node(p).cli(&["ROLE"]).unwrap().starts_with("slave") {
        assert!(Instant::now() < deadline, "node {p} never became a replica");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The Sentinels still name it (they take seconds to react).
    assert_eq!(group.primary().unwrap(), p);

    let first = c.try_acquire("demoted").await.unwrap_err().to_string();
    assert!(
        first.contains("read-only") || first.contains("READONLY"),
        "{first}"
    );
    let second = c.try_acquire("demoted").await.unwrap_err().to_string();
    assert!(
        second.contains("answers ROLE \"slave\""),
        "the kept connection was not dropped, or the replica was used: {second}"
    );
    for n in 0..3 {
        assert_eq!(
            group.node(n).cli(&["GET", "demoted"]).unwrap(),
            "(nil)",
            "node {n}"
        );
    }
}

/// Redlock over three independent Sentinel groups: each group is one node of the quorum. One
/// group's primary is killed; the lock is still taken on the two others, during the failover and
/// after it (the promoted primary is in quarantine, then counts again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_three_sentinel_groups_counts_each_group_as_one_node() {
    let groups: Vec<SentinelGroup> = std::thread::scope(|s| {
        let started: Vec<_> = (0..3).map(|_| s.spawn(SentinelGroup::start)).collect();
        started
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    for g in &groups {
        mark_new(g);
    }
    let urls: Vec<String> = groups.iter().map(SentinelGroup::url).collect();
    // A TTL of 10 s: the promoted primary's quarantine (one TTL from when the client first meets
    // it, possibly during the failover) must outlast the wait for the failover on a loaded
    // machine (3 s did not, once, beside two CPU burners).
    let c = Client::new(
        Config::new(urls)
            .with_ttl(Duration::from_secs(10))
            .with_node_timeout(Duration::from_millis(1500))
            .with_connect_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let lock = c.try_acquire("multi").await.unwrap();
    // The round returns at a quorum; the third grant lands just after.
    for g in &groups {
        wait_for_key(g.node(g.primary().unwrap()), "multi", lock.owner());
    }
    lock.release().await.unwrap();

    let old = groups[0].primary().unwrap();
    groups[0].node(old).kill().unwrap();
    // During the failover: the two other groups are a quorum.
    let during = c.try_acquire("multi").await.unwrap();
    assert!(during.votes().granted() >= 2, "{}", during.votes());
    during.release().await.unwrap();
    let new = groups[0].wait_for_failover(old, FAILOVER_DEADLINE).unwrap();
    // After it: the promoted primary is in quarantine (a possible loss): not asked, the lock is
    // taken on the two others; then it counts again.
    let after = c.try_acquire("multi").await.unwrap();
    assert!(after.votes().granted() >= 2, "{}", after.votes());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(groups[0].node(new).cli(&["GET", "multi"]).unwrap(), "(nil)");
    after.release().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let lock = c.try_acquire("multi").await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let there = groups[0].node(new).cli(&["GET", "multi"]).unwrap() == lock.owner();
        lock.release().await.unwrap();
        if there {
            break;
        }
        assert!(Instant::now() < deadline, "group 0 never counted again");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(groups[0]
        .node(new)
        .cli(&["ROLE"])
        .unwrap()
        .starts_with("master"));
}

/// Fencing over three Sentinel groups when a failover loses a counter raise (the amnesia
/// guard's case): counters above the clock (as `fencelock reseed --above` leaves them), A is
/// issued a token on groups 0 and 1 (a stranger holds group 2), group 0 fails over without A's
/// raise (made by hand on its replicas, as in the single-group test), and B asks while group 1
/// does not answer. B must not be issued a token at or below A's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_lost_a_counter_raise_never_yields_a_smaller_token_over_three_groups() {
    let groups: Vec<SentinelGroup> = std::thread::scope(|s| {
        let started: Vec<_> = (0..3).map(|_| s.spawn(SentinelGroup::start)).collect();
        started
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    let high = "100000000000000000"; // 1e17: above any clock-derived token
    for g in &groups {
        mark_new(g);
        let p = g.primary().unwrap();
        g.node(p).cli(&["SET", "fencelock:fence", high]).unwrap();
        wait_for_replicas(g, p, "fencelock:fence", high);
    }
    let primaries: Vec<usize> = groups.iter().map(|g| g.primary().unwrap()).collect();
    groups[2]
        .node(primaries[2])
        .cli(&["SET", "job", "stranger", "PX", "60000"])
        .unwrap();
    let urls: Vec<String> = groups.iter().map(SentinelGroup::url).collect();
    let config = |ttl| {
        Config::new(urls.clone())
            .with_ttl(ttl)
            .with_node_timeout(Duration::from_millis(1500))
            .with_connect_timeout(Duration::from_secs(5))
            .with_fencing(true)
    };
    let a = Client::new(config(Duration::from_secs(3))).unwrap();
    let held = a.try_acquire("job").await.unwrap();
    let ta = held.fencing_token().unwrap().value();
    let raised = groups[0]
        .node(primaries[0])
        .cli(&["GET", "fencelock:fence"])
        .unwrap();
    assert_eq!(raised, ta.to_string(), "A's raise on group 0");
    wait_for_replicas(&groups[0], primaries[0], "fencelock:fence", &raised);
    for r in (0..3).filter(|r| *r != primaries[0]) {
        let node = groups[0].node(r);
        node.cli(&["CONFIG", "SET", "replica-read-only", "no"])
            .unwrap();
        node.cli(&["DEL", "job"]).unwrap();
        node.cli(&["SET", "fencelock:fence", high]).unwrap();
        node.cli(&["CONFIG", "SET", "replica-read-only", "yes"])
            .unwrap();
    }
    groups[0].node(primaries[0]).kill().unwrap();
    let promoted = groups[0]
        .wait_for_failover(primaries[0], FAILOVER_DEADLINE)
        .unwrap();
    groups[2].node(primaries[2]).cli(&["DEL", "job"]).unwrap();

    // An unfenced client sees group 0's quarantine start and end, and marks it clear, touching
    // no counter: A's lock has expired by then.
    let w = Client::new(config(Duration::from_secs(3)).with_fencing(false)).unwrap();
    w.connect().await;
    tokio::time::sleep(held.remaining().max(Duration::from_secs(3)) + Duration::from_secs(1)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(lock) = w.try_acquire("other").await {
            lock.release().await.unwrap();
        }
        let marker = groups[0]
            .node(promoted)
            .cli(&["GET", NODE_MARKER_KEY])
            .unwrap();
        if marker.ends_with(" clear") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "group 0's quarantine never ended: {marker}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // B, fenced, counts group 0 at once (its marker is clear) and cannot reach group 1.
    let b = Client::new(config(Duration::from_secs(3))).unwrap();
    groups[1].node(primaries[1]).pause().unwrap();
    // On a loaded machine B's first connection to group 0 (the Sentinels, ROLE, the scripts)
    // can outlast the node timeout: that attempt is refused as unavailable, which checks
    // nothing here, so B tries again until group 0 answers.
    let deadline = Instant::now() + Duration::from_secs(30);
    let result = loop {
        let result = b.try_acquire("job").await;
        match &result {
            Err(e) if !e.to_string().contains("no fence counter") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ => break result,
        }
    };
    groups[1].node(primaries[1]).resume().unwrap();
    match result {
        Ok(lock) => {
            let tb = lock.fencing_token().unwrap().value();
            assert!(
                tb > ta,
                "B was issued {tb} after A's {ta} across group 0's failover"
            );
        }
        // The amnesia guard: group 0 lost its counter with the failover, so its read cannot
        // count, and group 2's alone is no quorum.
        Err(e) => assert!(e.to_string().contains("no fence counter"), "{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_sentinel_url_says_what_to_fix() {
    for (url, says) in [
        (
            "redis+sentinel://127.0.0.1:26379",
            "the primary's name is missing",
        ),
        (
            "redis+sentinel://127.0.0.1:26379,,h:2/m",
            "Sentinel 2 of the list has no host",
        ),
        (
            "redis+sentinel://127.0.0.1:port/m",
            "port \"port\" of Sentinel 127.0.0.1",
        ),
        ("redis+sentinel://h:1/m/db", "database \"db\""),
    ] {
        let err = Client::new(Config::new([url])).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
        let text = err.to_string();
        assert!(text.contains(says), "{url}: {text}");
        assert!(
            text.contains("redis+sentinel://host:26379"),
            "{url}: {text}"
        );
    }
    let err = Client::new(Config::new(["redis+sentinel://u:hunter2@h:x/m"])).unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");

    // A name the Sentinels do not know: the error says so, and where to look.
    let group = SentinelGroup::start().unwrap();
    let wrong = group.url().replace("/fencemaster/", "/no-such-name/");
    let c = Client::new(Config::new([wrong]).with_connect_timeout(Duration::from_secs(5))).unwrap();
    let err = c.try_acquire("x").await.unwrap_err().to_string();
    assert!(
        err.contains("know no primary named \"no-such-name\"") && err.contains("sentinel monitor"),
        "{err}"
    );
}
