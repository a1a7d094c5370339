//! A Redis Cluster as one node (`redis+cluster://`, issue 31) on real processes: three primaries
//! and three replicas (`fencelock_testkit::RedisCluster`). Every key of fencelock's carries the
//! tag `{fencelock}`, so the shard that owns the tag's slot is the node.

use std::time::{Duration, Instant};

use fencelock::protocol::{new_node_marker, NODE_MARKER_KEY};
use fencelock::{AutoExtend, Client, Config, ErrorKind};
use fencelock_testkit::RedisCluster;

/// Generous: a node is called failing after 1 s, and the machine may be loaded.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(60);

const TAG: &str = "{fencelock}";

/// After a slot move: the auto-extended lock was never lost and its key is on the importing
/// node `to`; A's three locks are released; B, fenced, then gets `moving-fenced` with a token
/// above A's `t1`.
async fn after_the_move(
    cluster: &RedisCluster,
    to: usize,
    (fenced, plain, auto): (fencelock::Lock, fencelock::Lock, fencelock::LockGuard),
    b: &Client,
    t1: u64,
) {
    let auto_lost = auto.lost();
    assert!(
        !auto_lost.is_fired(),
        "the auto-extended lock was lost after the move: {:?}",
        auto_lost.cause()
    );
    assert_eq!(
        cluster
            .node(to)
            .cli(&["GET", &tagged("moving-auto")])
            .unwrap(),
        auto.owner()
    );
    fenced.release().await.unwrap();
    plain.release().await.unwrap();
    auto.release().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    let next = loop {
        match b.try_acquire("moving-fenced").await {
            Ok(lock) => break lock,
            Err(e) => assert!(Instant::now() < deadline, "B never got the lock: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let t2 = next.fencing_token().unwrap().value();
    assert!(t2 > t1, "B was issued {t2} after A's {t1}");
    next.release().await.unwrap();
}

/// `key` as it lives on the cluster.
fn tagged(key: &str) -> String {
    format!("{TAG}{key}")
}

/// The tag's slot and the node that owns it now.
fn owner(cluster: &RedisCluster) -> (u16, usize) {
    let slot = cluster.key_slot(TAG).unwrap();
    (slot, cluster.slot_owner(slot).unwrap())
}

/// Marks the tag's shard as new (as `fencelock up` does on a node): it never held a lock. Waits
/// until its replica has the marker.
fn mark_new(cluster: &RedisCluster) {
    let (_, p) = owner(cluster);
    let marker = new_node_marker(&cluster.node(p).run_id().unwrap());
    let key = tagged(NODE_MARKER_KEY);
    cluster.node(p).cli(&["SET", &key, &marker]).unwrap();
    wait_on_replica(cluster, p, &key, &marker);
}

/// Waits until the replica of `primary` holds `value` at `key` (a cluster replica answers reads
/// after `READONLY`, which the test kit's one-command connections cannot send: `GET` on it is
/// redirected, so the replica's `INFO replication` offset is compared instead).
fn wait_on_replica(cluster: &RedisCluster, primary: usize, key: &str, value: &str) {
    assert_eq!(cluster.node(primary).cli(&["GET", key]).unwrap(), value);
    let r = cluster.replica_of(primary).unwrap();
    let offset = |n: usize, field: &str| -> u64 {
        let info = cluster.node(n).cli(&["INFO", "replication"]).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let want = offset(primary, "master_repl_offset:");
    let deadline = Instant::now() + Duration::from_secs(30);
    while offset(r, "slave_repl_offset:") < want {
        assert!(Instant::now() < deadline, "replica {r} never caught up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn client(url: &str, ttl: Duration, fencing: bool) -> Client {
    Client::new(
        Config::new([url])
            .with_ttl(ttl)
            .with_node_timeout(Duration::from_millis(1500))
            .with_connect_timeout(Duration::from_secs(5))
            .with_fencing(fencing),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_and_a_fenced_lock_through_a_cluster_url() {
    let cluster = RedisCluster::start().unwrap();
    mark_new(&cluster);
    let (slot, p) = owner(&cluster);

    let a = client(&cluster.url(), Duration::from_secs(5), false);
    let b = client(&cluster.url(), Duration::from_secs(5), false);
    let lock = a.try_acquire("cluster-plain").await.unwrap();
    // The key is on the tag's owner, in the tag's slot.
    assert_eq!(
        cluster
            .node(p)
            .cli(&["GET", &tagged("cluster-plain")])
            .unwrap(),
        lock.owner()
    );
    assert_eq!(cluster.key_slot(&tagged("cluster-plain")).unwrap(), slot);
    let refused = b.try_acquire("cluster-plain").await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Contention, "{refused}");
    lock.release().await.unwrap();
    b.try_acquire("cluster-plain")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let f = client(&cluster.url(), Duration::from_secs(5), true);
    let first = f.try_acquire("cluster-fenced").await.unwrap();
    let t1 = first.fencing_token().unwrap().value();
    first.release().await.unwrap();
    let g = client(&cluster.url(), Duration::from_secs(5), true);
    let mut second = g.try_acquire("cluster-fenced").await.unwrap();
    second.extend().await.unwrap();
    let t2 = second.fencing_token().unwrap().value();
    assert!(t2 > t1, "token {t2} after {t1}");
    // Every key fencelock wrote (the lock, the counter, the marker, the TTL record) is in the
    // tag's slot, on its owner; the other primaries hold nothing.
    let keys = cluster.node(p).cli(&["KEYS", "*"]).unwrap();
    let keys: Vec<&str> = keys.lines().collect();
    assert!(
        keys.contains(&tagged("cluster-fenced").as_str()),
        "{keys:?}"
    );
    assert!(
        keys.contains(&tagged("fencelock:fence").as_str()),
        "{keys:?}"
    );
    for key in &keys {
        assert_eq!(cluster.key_slot(key).unwrap(), slot, "{key}");
    }
    for n in 0..6 {
        if n != p
            && cluster
                .node(n)
                .cli(&["ROLE"])
                .unwrap()
                .starts_with("master")
        {
            assert_eq!(cluster.node(n).cli(&["DBSIZE"]).unwrap(), "0", "node {n}");
        }
    }
    second.release().await.unwrap();
}

/// A failover may lose the last writes: replication is asynchronous, and the old primary may
/// die with a lock's key and its counter raise not yet sent. No real failover loses a chosen
/// write on demand, and a cluster replica takes no write, so the loss is made by hand on the
/// promoted replica before any client reaches it (a real process state: the key and the raise
/// of A's one script call gone, as if its replication had not left the old primary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shard_primary_that_lost_a_held_lock_keeps_it_out_of_reach_and_tokens_in_order() {
    let cluster = RedisCluster::start().unwrap();
    mark_new(&cluster);
    let (slot, p) = owner(&cluster);
    let counter = tagged("fencelock:fence");

    // A counter exists before A's grant (a warm node), so the loss leaves a stale one.
    let warm = client(&cluster.url(), Duration::from_secs(2), true);
    warm.try_acquire("warm-up")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let before = cluster.node(p).cli(&["GET", &counter]).unwrap();

    let a_ttl = Duration::from_secs(12);
    let a = client(&cluster.url(), a_ttl, true);
    let mut held = a.try_acquire("job").await.unwrap();
    let ta = held.fencing_token().unwrap().value();
    wait_on_replica(&cluster, p, &tagged("job"), held.owner());

    cluster.node(p).kill().unwrap();
    let killed = Instant::now();
    let new = cluster
        .wait_for_owner_change(slot, p, FAILOVER_DEADLINE)
        .unwrap();
    eprintln!("failover to node {new} in {:?}", killed.elapsed());
    // The loss: A's key and counter raise gone from the promoted replica.
    cluster.node(new).cli(&["DEL", &tagged("job")]).unwrap();
    cluster.node(new).cli(&["SET", &counter, &before]).unwrap();

    // B, a client with a shorter TTL, tries while A's lock is valid: never granted.
    let b = client(&cluster.url(), Duration::from_secs(2), true);
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
    assert!(
        held.extend().await.is_err(),
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

/// `CLUSTER FAILOVER` on the replica: a manual failover, which waits for the replica to catch
/// up, so nothing is lost. A's auto-extended lock goes on on the promoted node (its connection
/// to the demoted one is dropped at the first redirect); B never gets the lock meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_keeps_an_auto_extended_lock_and_nobody_else_gets_it() {
    let cluster = RedisCluster::start().unwrap();
    mark_new(&cluster);
    let (slot, p) = owner(&cluster);
    let a = client(&cluster.url(), Duration::from_secs(3), true);
    let b = client(&cluster.url(), Duration::from_secs(3), true);
    let guard = a
        .try_acquire("manual")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    let lost = guard.lost();
    let r = cluster.replica_of(p).unwrap();
    cluster.node(r).cli(&["CLUSTER", "FAILOVER"]).unwrap();
    let new = cluster
        .wait_for_owner_change(slot, p, FAILOVER_DEADLINE)
        .unwrap();
    assert_eq!(new, r);
    // Four TTLs after the failover: A's lock lives on, B is refused every time.
    let until = Instant::now() + Duration::from_secs(12);
    let mut refusals = 0;
    while Instant::now() < until {
        match b.try_acquire("manual").await {
            Ok(stolen) => panic!("B took A's lock after the failover: {}", stolen.votes()),
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Contention),
                "{e}"
            ),
        }
        refusals += 1;
        assert!(
            !lost.is_fired(),
            "A was told it lost its lock: {:?}",
            lost.cause()
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert!(refusals >= 5, "{refusals} tries");
    // The lock is on the promoted node, extended there.
    assert_eq!(
        cluster.node(new).cli(&["GET", &tagged("manual")]).unwrap(),
        guard.owner()
    );
    guard.release().await.unwrap();
}

/// The tag's slot moves to another primary while locks are held, taken, extended and released.
/// The move is held half done for two TTLs: the held locks' keys are on the importing node, the
/// counter, the marker and the TTL record still on the owner, which answers `ASK` for the
/// moved keys. Each request that meets it is followed within its round (`ASKING` and the
/// command on the importing node): the holders' extensions keep their locks, another client is
/// told the locks are held (not that the node failed), a free resource is taken and released.
/// Then the rest moves and the slot changes owner: the holders keep extending and release, and
/// the next fenced holder's token is above the first's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_move_is_followed_by_ask_within_the_round_and_never_gives_a_second_holder() {
    let cluster = RedisCluster::start().unwrap();
    mark_new(&cluster);
    let (slot, p) = owner(&cluster);
    let to = (0..6)
        .find(|n| {
            *n != p
                && cluster
                    .node(*n)
                    .cli(&["ROLE"])
                    .unwrap()
                    .starts_with("master")
        })
        .unwrap();
    let ttl = Duration::from_secs(3);
    let a = client(&cluster.url(), ttl, true);
    let pa = client(&cluster.url(), ttl, false);
    let b = client(&cluster.url(), ttl, true);
    let pb = client(&cluster.url(), ttl, false);
    let free = client(&cluster.url(), ttl, false);
    let mut fenced = a.try_acquire("moving-fenced").await.unwrap();
    let t1 = fenced.fencing_token().unwrap().value();
    let mut plain = pa.try_acquire("moving-plain").await.unwrap();
    // An auto-extended lock: its extensions go in a pipeline (the batch of its client's locks).
    let auto_client = client(&cluster.url(), ttl, false);
    let auto = auto_client
        .try_acquire("moving-auto")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    let auto_lost = auto.lost();

    // Half the move: the held locks' keys go first.
    assert_eq!(cluster.begin_move(slot, to).unwrap(), p);
    for key in cluster.keys_in_slot(p, slot).unwrap() {
        if key.contains("moving-") {
            assert_eq!(cluster.migrate(slot, p, to, &key, false).unwrap(), "OK");
        }
    }
    let until = Instant::now() + 2 * ttl;
    let (mut rounds, mut unreleased) = (0, 0);
    while Instant::now() < until {
        let resource = format!("free-{rounds}");
        let (extended, plain_extended, b_tried, pb_tried, taken) = tokio::join!(
            fenced.extend(),
            plain.extend(),
            b.try_acquire("moving-fenced"),
            pb.try_acquire("moving-plain"),
            async {
                let lock = free.try_acquire(&resource).await?;
                // Taken on the importing node (the owner answered ASK: the key is not there):
                // another client meets it there.
                let refused = pb.try_acquire(&resource).await.err();
                Ok::<_, fencelock::Error>((lock.release().await, refused))
            },
        );
        if let Err(e) = extended {
            panic!("round {rounds}: A's fenced lock was not extended in the half-moved slot: {e}");
        }
        if let Err(e) = plain_extended {
            panic!("round {rounds}: the plain lock was not extended in the half-moved slot: {e}");
        }
        match b_tried {
            Ok(stolen) => panic!("round {rounds}: B took A's fenced lock: {}", stolen.votes()),
            // A fenced grant declares the counter beside the lock key: split across the two
            // nodes, Redis answers TRYAGAIN, and the node fails this round.
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::Contention | ErrorKind::Unavailable),
                "round {rounds}: {e}"
            ),
        }
        match pb_tried {
            Ok(stolen) => panic!(
                "round {rounds}: a second holder of the plain lock: {}",
                stolen.votes()
            ),
            Err(e) => assert_eq!(
                e.kind(),
                ErrorKind::Contention,
                "round {rounds}: the taker was not told the plain lock is held: {e}"
            ),
        }
        assert!(
            !auto_lost.is_fired(),
            "round {rounds}: the auto-extended lock was lost in the half-moved slot: {:?}",
            auto_lost.cause()
        );
        let (released, refused) = taken.unwrap_or_else(|e| {
            panic!("round {rounds}: a free resource was not taken in the half-moved slot: {e}")
        });
        match refused {
            None => panic!("round {rounds}: a second holder of {resource}"),
            Some(e) => assert_eq!(e.kind(), ErrorKind::Contention, "round {rounds}: {e}"),
        }
        // The release declares the key's wait mark, which does not exist: Redis refuses a
        // command of several keys with one missing in a slot being imported (TRYAGAIN), and the
        // lock is left to its TTL.
        if let Err(e) = released {
            assert!(e.to_string().contains("TRYAGAIN"), "round {rounds}: {e}");
            unreleased += 1;
        }
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Each round's release of a free resource is sent again for most of the node timeout
    // before it fails with TRYAGAIN (its line's keys exist nowhere): rounds last that long.
    assert!(
        rounds >= 3,
        "the test ran too slowly to show anything ({rounds} rounds)"
    );

    fenced
        .extend()
        .await
        .expect("A's lock in the half-moved slot");
    plain
        .extend()
        .await
        .expect("the plain lock in the half-moved slot");
    // The rest of the keys, then the slot changes owner. The announcements of the rounds above
    // wrote the TTL record and its mark on the importing node: those meet BUSYKEY and are
    // replaced, as `redis-cli --cluster reshard --cluster-replace` does.
    let mut replaced = Vec::new();
    for key in cluster.keys_in_slot(p, slot).unwrap() {
        if let Err(e) = cluster.migrate(slot, p, to, &key, false) {
            assert!(e.to_string().contains("BUSYKEY"), "{e}");
            assert!(
                key.contains("fencelock:ttls"),
                "{key} was written on the importing node: {e}"
            );
            cluster.migrate(slot, p, to, &key, true).unwrap();
            replaced.push(key);
        }
    }
    eprintln!(
        "{rounds} rounds in the half-moved slot ({unreleased} releases refused with TRYAGAIN); \
         replaced on the new owner: {replaced:?}"
    );
    cluster.finish_move(slot, p, to).unwrap();
    assert_eq!(cluster.slot_owner(slot).unwrap(), to);

    // On the new owner (judged as a failover: a quarantine), for two TTLs: the holders extend,
    // nobody else gets either lock.
    let until = Instant::now() + 2 * ttl;
    while Instant::now() < until {
        fenced.extend().await.expect("A's lock after the move");
        plain.extend().await.expect("the plain lock after the move");
        assert!(
            b.try_acquire("moving-fenced").await.is_err(),
            "B took A's lock after the move"
        );
        assert!(
            pb.try_acquire("moving-plain").await.is_err(),
            "a second plain holder after the move"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        cluster
            .node(to)
            .cli(&["GET", &tagged("moving-fenced")])
            .unwrap(),
        fenced.owner()
    );
    after_the_move(&cluster, to, (fenced, plain, auto), &b, t1).await;
    pb.try_acquire("moving-plain")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The rest of the family on one cluster: a waiter woken by a release (the release channel of
/// the tagged key), a semaphore, a read-write lock and an election (its log on its own
/// connections). Every key lands in the tag's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_family_works_on_a_cluster_and_keeps_every_key_in_the_tags_slot() {
    let cluster = RedisCluster::start().unwrap();
    mark_new(&cluster);
    let (slot, p) = owner(&cluster);
    let a = client(&cluster.url(), Duration::from_secs(10), true);
    let b = client(&cluster.url(), Duration::from_secs(10), true);

    // A waiter of two keys (it marks them and listens on their release channels) is woken by
    // the release: long before its polling would find the key free (its delay is 20 s here).
    let held = a.try_acquire("line-a").await.unwrap();
    let slow_poll = fencelock::RetryPolicy::new()
        .with_base_delay(Duration::from_secs(20))
        .with_wait(Duration::from_secs(60));
    let waiter = tokio::spawn(async move {
        let lock = b.acquire_many_with(&["line-a", "line-b"], &slow_poll).await;
        (lock, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (lock, granted) = waiter.await.unwrap();
    let lock = lock.unwrap();
    assert!(
        granted - released < Duration::from_secs(5),
        "the waiter was not woken: granted {:?} after the release",
        granted - released
    );
    lock.release().await.unwrap();

    let sem = a.semaphore("jobs", 2).unwrap();
    let one = sem.try_acquire().await.unwrap();
    let two = sem.try_acquire().await.unwrap();
    let third = client(&cluster.url(), Duration::from_secs(10), true);
    assert!(
        third
            .semaphore("jobs", 2)
            .unwrap()
            .try_acquire()
            .await
            .is_err(),
        "a third permit of two"
    );
    one.release().await.unwrap();
    two.release().await.unwrap();

    // One client holds a resource once (a second take is AlreadyHeld): three clients.
    let c = client(&cluster.url(), Duration::from_secs(10), true);
    let d = client(&cluster.url(), Duration::from_secs(10), true);
    let rw = a.rwlock("doc").unwrap();
    let r1 = rw.try_read().await.unwrap();
    let r2 = c.rwlock("doc").unwrap().try_read().await.unwrap();
    assert!(
        d.rwlock("doc").unwrap().try_write().await.is_err(),
        "a writer beside readers"
    );
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    rw.try_write().await.unwrap().release().await.unwrap();

    let election = a.election("leader").unwrap();
    let leadership = election.campaign("me").await.unwrap();
    assert!(leadership.term() > 0);
    leadership.resign().await.unwrap();

    let keys = cluster.node(p).cli(&["KEYS", "*"]).unwrap();
    let keys: Vec<&str> = keys.lines().collect();
    assert!(
        keys.iter().any(|k| k.contains("leaders")),
        "no election log: {keys:?}"
    );
    for key in &keys {
        assert_eq!(cluster.key_slot(key).unwrap(), slot, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_cluster_url_is_refused_with_the_reason() {
    for (url, why) in [
        (
            "redis+cluster://127.0.0.1:x",
            "port \"x\" of seed 127.0.0.1",
        ),
        ("redis+cluster://127.0.0.1:1/?tag={x}", "brace"),
        ("redis+cluster://127.0.0.1:1/3", "database 0 only"),
        ("redis+cluster://:hunter2@127.0.0.1:1,,h", "seed 2"),
    ] {
        let err = Client::new(Config::new([url])).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
        let text = err.to_string();
        assert!(text.contains(why), "{url}: {text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
    // Two tags of one cluster are not two independent nodes: refused.
    let err = Client::new(Config::new([
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
        "redis+cluster://127.0.0.1:7001/?tag=b",
        "redis://127.0.0.1:7005",
    ]))
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("127.0.0.1:7001"), "{err}");
    // A seed that is no cluster node: the node's own words.
    let plain = fencelock_testkit::RedisNode::start().unwrap();
    let url = format!("redis+cluster://127.0.0.1:{}", plain.port());
    let err = client(&url, Duration::from_secs(2), false)
        .try_acquire("x")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        err.to_string().contains("cluster support disabled"),
        "{err}"
    );
}

/// How long the mover waits before each key of a key-by-key slot move: long enough for the
/// clients to meet the slot in each state, short enough that the whole move (about fifteen
/// keys) ends within a release's retries (most of the node timeout, 1.5 s here).
const KEY_PAUSE: Duration = Duration::from_millis(60);

/// What the mover did so far: the keys it moved, in order, and when it began to close the move.
#[derive(Debug, Default)]
struct Moving {
    began: bool,
    keys: Vec<String>,
    closing: Option<Instant>,
}

/// The tag's slot moved as `redis-cli --cluster reshard` moves it: one key at a time, in the
/// order `CLUSTER GETKEYSINSLOT` gives (newest first), with a pause before each. A fenced lock
/// with a holder label, a plain lock, an auto-extended lock, an election's leader and a held
/// lock with a waiter in line are in the slot. Their keys and the keys their scripts name (the
/// label, the line, the counter, the TTL record) then sit on two nodes for a while, and a
/// request naming two of them is refused (`TRYAGAIN`, or inside a script "a non local key"):
/// extensions and releases send it again until the keys are together or the move ends, so
/// every extension gets through, the line's holder releases while its line's keys sit apart
/// from its key, free locks are taken and released, nobody else takes a held lock, and an
/// observer reads the election's log on the importing node (`ASK`) before the move ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_key_by_key_keeps_extending_releases_and_reads_the_election_log() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::{Arc, Mutex};

    let cluster = Arc::new(RedisCluster::start().unwrap());
    mark_new(&cluster);
    let (slot, p) = owner(&cluster);
    let to = (0..6)
        .find(|n| {
            *n != p
                && cluster
                    .node(*n)
                    .cli(&["ROLE"])
                    .unwrap()
                    .starts_with("master")
        })
        .unwrap();
    let ttl = Duration::from_secs(3);
    let labelled = Client::new(
        Config::new([cluster.url()])
            .with_ttl(ttl)
            .with_node_timeout(Duration::from_millis(1500))
            .with_connect_timeout(Duration::from_secs(5))
            .with_fencing(true)
            .with_holder(fencelock::Holder::this_process().with_label("slot-move")),
    )
    .unwrap();
    let pa = client(&cluster.url(), ttl, false);
    let b = client(&cluster.url(), ttl, true);
    let pb = client(&cluster.url(), ttl, false);
    let h = client(&cluster.url(), ttl, false);
    let w = client(&cluster.url(), ttl, false);
    let auto_client = client(&cluster.url(), ttl, false);
    let elector = client(&cluster.url(), ttl, true);

    let mut fenced = labelled.try_acquire("moving-fenced").await.unwrap();
    let t1 = fenced.fencing_token().unwrap().value();
    let mut plain = pa.try_acquire("moving-plain").await.unwrap();
    let auto = auto_client
        .try_acquire("moving-auto")
        .await
        .unwrap()
        .auto_extend(AutoExtend::new());
    let auto_lost = auto.lost();
    let mut line_held = Some(h.try_acquire("moving-line").await.unwrap());
    let waiter = tokio::spawn(async move {
        let policy = fencelock::RetryPolicy::new()
            .with_base_delay(Duration::from_millis(200))
            .with_wait(Duration::from_secs(60));
        let lock = w.acquire_with("moving-line", &policy).await;
        (lock, Instant::now(), w)
    });
    let election = elector.election("moving-leader").unwrap();
    let leadership = election.campaign("first").await.unwrap();
    let log_key = tagged("fencelock:leaders:moving-leader");
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster
        .node(p)
        .cli(&["EXISTS", &tagged("fencelock:queue:moving-line")])
        .unwrap()
        == "0"
    {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = cluster.keys_in_slot(p, slot).unwrap();
    eprintln!("in the slot before the move, in GETKEYSINSLOT order: {before:?}");
    assert!(before.contains(&log_key), "{before:?}");

    // The line's holder has a full TTL for the move (about a second).
    line_held.as_mut().unwrap().extend().await.unwrap();
    let moving = Arc::new(Mutex::new(Moving::default()));
    let done = Arc::new(AtomicBool::new(false));
    let mover = {
        let (cluster, moving, done) = (cluster.clone(), moving.clone(), done.clone());
        tokio::task::spawn_blocking(move || {
            assert_eq!(cluster.begin_move(slot, to).unwrap(), p);
            moving.lock().unwrap().began = true;
            let mut replaced = Vec::new();
            loop {
                let keys = cluster.keys_in_slot(p, slot).unwrap();
                if keys.is_empty() {
                    break;
                }
                for key in keys {
                    std::thread::sleep(KEY_PAUSE);
                    if let Err(e) = cluster.migrate(slot, p, to, &key, false) {
                        // Written on the importing node meanwhile (an extension's TTL record):
                        // replaced, as `--cluster-replace` does.
                        assert!(e.to_string().contains("BUSYKEY"), "{e}");
                        assert!(
                            key.contains("fencelock:ttls"),
                            "{key} was written on the importing node: {e}"
                        );
                        cluster.migrate(slot, p, to, &key, true).unwrap();
                        replaced.push(key.clone());
                    }
                    moving.lock().unwrap().keys.push(key);
                }
            }
            std::thread::sleep(KEY_PAUSE);
            moving.lock().unwrap().closing = Some(Instant::now());
            cluster.finish_move(slot, p, to).unwrap();
            done.store(true, SeqCst);
            replaced
        })
    };
    let is_moved = |key: &str| moving.lock().unwrap().keys.iter().any(|k| k == key);

    // The holders extend, the others try, all through the move. The plain lock has no label:
    // its extension names a label key that exists nowhere, and is refused on the old owner
    // until the lock's own key moved.
    while !moving.lock().unwrap().began {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let holding = async {
        let mut n = 0;
        while !done.load(SeqCst) {
            let started = Instant::now();
            let (fenced_extended, plain_extended, b_tried, pb_tried) = tokio::join!(
                fenced.extend(),
                plain.extend(),
                b.try_acquire("moving-fenced"),
                pb.try_acquire("moving-plain"),
            );
            if let Err(e) = fenced_extended {
                panic!("extension {n}: A's fenced lock was not extended during the move: {e}");
            }
            if let Err(e) = plain_extended {
                panic!("extension {n}: the plain lock was not extended during the move: {e}");
            }
            if let Ok(stolen) = b_tried {
                panic!("try {n}: B took A's fenced lock: {}", stolen.votes());
            }
            if let Ok(stolen) = pb_tried {
                panic!(
                    "try {n}: a second holder of the plain lock: {}",
                    stolen.votes()
                );
            }
            eprintln!("round {n} of extensions and tries: {:?}", started.elapsed());
            assert!(
                !auto_lost.is_fired(),
                "the auto-extended lock was lost during the move: {:?}",
                auto_lost.cause()
            );
            n += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        n
    };
    // Once its line's keys moved and its own key did not, the line's holder releases: the
    // release names them all (TRYAGAIN until they are together).
    let line = async {
        loop {
            let apart = is_moved(&tagged("fencelock:queue:moving-line"))
                && !is_moved(&tagged("moving-line"));
            if apart {
                let at = Instant::now();
                if let Err(e) = line_held.take().unwrap().release().await {
                    panic!("the line's holder could not release while its keys sat apart: {e}");
                }
                return at;
            }
            if done.load(SeqCst) || is_moved(&tagged("moving-line")) {
                let keys = moving.lock().unwrap().keys.clone();
                panic!("the line's keys never sat apart from its key: {keys:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    // Free locks taken (on the importing node: ASK) and released (their line's keys exist
    // nowhere: TRYAGAIN until the move ends, then MOVED).
    let free = async {
        let (mut released, mut refused) = (0, Vec::new());
        let mut n = 0;
        let closing = || moving.lock().unwrap().closing.is_some();
        while !closing() {
            let lock = match pb.try_acquire(&format!("free-{n}")).await {
                Ok(lock) => lock,
                // The move ended meanwhile (MOVED): an acquisition is not sent again.
                Err(_) if closing() => break,
                Err(e) => panic!("free-{n} was not taken during the move: {e}"),
            };
            match lock.release().await {
                Ok(_) => released += 1,
                Err(e) => refused.push(e.to_string()),
            }
            n += 1;
        }
        (released, refused)
    };
    // An observer started once the log's key moved reads it on the importing node.
    let observed = async {
        while !is_moved(&log_key) {
            assert!(!done.load(SeqCst), "the log's key never moved");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut observer = election.observe();
        match tokio::time::timeout(Duration::from_secs(10), observer.next()).await {
            Ok(leader) => (leader.term(), Instant::now()),
            Err(_) => panic!("no leader observed within 10 s of the log's move"),
        }
    };
    let (rounds, line_released, (released, refused), (term, observed_at)) =
        tokio::join!(holding, line, free, observed);
    let replaced = mover.await.unwrap();
    let moving = moving.lock().unwrap();
    let closing = moving.closing.unwrap();
    eprintln!(
        "{rounds} rounds during the move; {released} free locks released, refused: \
         {refused:?}; moved {:?}; replaced {replaced:?}",
        moving.keys
    );
    // An extension sent while its keys are split waits until they are together: few rounds.
    assert!(rounds >= 1, "no extension during the move");
    assert!(
        released >= 1 && refused.is_empty(),
        "{released} free locks released during the move, refused: {refused:?}"
    );
    assert_eq!(term, leadership.term());
    assert!(
        observed_at < closing,
        "the leader was observed only {:?} after the move began to close",
        observed_at - closing
    );
    assert_eq!(cluster.slot_owner(slot).unwrap(), to);

    // The waiter gets the line's lock after its release, not before, once the new owner's
    // quarantine (a new run id: judged as a failover) is over; the holders extend meanwhile.
    let mut waiter = waiter;
    let (line_lock, granted, _w) = loop {
        fenced.extend().await.expect("A's lock after the move");
        plain.extend().await.expect("the plain lock after the move");
        if let Ok(done) = tokio::time::timeout(Duration::from_millis(500), &mut waiter).await {
            break done.unwrap();
        }
    };
    let line_lock = line_lock.unwrap();
    assert!(
        granted > line_released,
        "the waiter got the lock before its release"
    );
    line_lock.release().await.unwrap();
    leadership.resign().await.unwrap();
    after_the_move(&cluster, to, (fenced, plain, auto), &b, t1).await;
}

/// Renders a one-command reply of the test kit, an error reply included.
fn reply(answer: std::io::Result<String>) -> String {
    match answer {
        Ok(text) => text,
        Err(e) => e
            .to_string()
            .trim_start_matches("redis error:")
            .trim()
            .to_string(),
    }
}

/// What `min-replicas-to-write 1` does on a shard, on real processes. (a) The replica stops
/// answering (SIGSTOP: its link stays open, as across a network split): the primary takes
/// writes until the replica's lag passes `min-replicas-max-lag`, then refuses them
/// (`NOREPLICAS`), and a lock call fails. (b) `CLUSTER FAILOVER TAKEOVER` on the replica while
/// the old primary runs and reaches it. (c) The same after the primary was paused across the
/// takeover (a long pause: it resumes not knowing it was replaced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_to_write_refuses_a_cut_off_primary_after_the_lag_and_a_takeover_demotes_it() {
    let cluster = RedisCluster::start().unwrap();
    mark_new(&cluster);
    let (slot, p) = owner(&cluster);
    let r = cluster.replica_of(p).unwrap();
    for n in [p, r] {
        for (name, value) in [
            ("min-replicas-to-write", "1"),
            ("min-replicas-max-lag", "2"),
        ] {
            cluster
                .node(n)
                .cli(&["CONFIG", "SET", name, value])
                .unwrap();
        }
    }
    let a = client(&cluster.url(), Duration::from_secs(2), false);
    a.try_acquire("cut-off")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // (a) The replica stops answering.
    cluster.node(r).pause().unwrap();
    let paused = Instant::now();
    let mut last_grant = None;
    let refused = loop {
        match a.try_acquire("cut-off").await {
            Ok(lock) => {
                last_grant = Some(paused.elapsed());
                let _ = lock.release().await;
            }
            Err(e) => break (paused.elapsed(), e),
        }
        assert!(
            paused.elapsed() < Duration::from_secs(20),
            "the primary took writes for 20 s without its replica"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    cluster.node(r).resume().unwrap();
    eprintln!(
        "(a) replica paused: last grant {last_grant:?} after, first refusal {:?} after: {}",
        refused.0, refused.1
    );
    // The window: locks granted after the replica stopped, none once its last acknowledgement
    // (sent once a second) is older than the lag.
    assert!(
        last_grant.is_some(),
        "no grant after the replica stopped: the window was not seen"
    );
    assert_eq!(refused.1.kind(), ErrorKind::Unavailable, "{}", refused.1);
    assert!(
        refused.1.to_string().contains("NOREPLICAS"),
        "{}",
        refused.1
    );
    assert!(
        refused.0 >= Duration::from_secs(1) && refused.0 < Duration::from_secs(10),
        "refused {:?} after the replica stopped, with a lag of 2 s",
        refused.0
    );

    // Writes are taken again once the replica acknowledges.
    let deadline = Instant::now() + Duration::from_secs(30);
    while reply(cluster.node(p).cli(&["SET", &tagged("probe"), "1"])) != "OK" {
        assert!(
            Instant::now() < deadline,
            "the primary never took writes again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // (b) A takeover while the old primary runs and reaches its replica.
    let started = Instant::now();
    let mut seen: Vec<(Duration, String)> = Vec::new();
    cluster
        .node(r)
        .cli(&["CLUSTER", "FAILOVER", "TAKEOVER"])
        .unwrap();
    while started.elapsed() < Duration::from_secs(3) {
        let answer = reply(cluster.node(p).cli(&["SET", &tagged("probe"), "2"]));
        let kind = answer.split_whitespace().next().unwrap_or("").to_string();
        if seen.last().map(|(_, k)| k != &kind).unwrap_or(true) {
            seen.push((started.elapsed(), kind));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!("(b) takeover, the old primary's answers: {seen:?}");
    assert!(
        seen.iter().all(|(_, kind)| kind != "OK"),
        "the old primary took a write after the takeover: {seen:?}"
    );
    assert_eq!(seen.last().unwrap().1, "MOVED", "{seen:?}");
    let new = cluster
        .wait_for_owner_change(slot, p, FAILOVER_DEADLINE)
        .unwrap();
    assert_eq!(new, r);

    // (c) The primary (now r) paused across a takeover by its replica (now p).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !reply(cluster.node(r).cli(&["INFO", "replication"])).contains("state=online") {
        assert!(
            Instant::now() < deadline,
            "the old primary never replicated"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.node(r).pause().unwrap();
    cluster
        .node(p)
        .cli(&["CLUSTER", "FAILOVER", "TAKEOVER"])
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.node(r).resume().unwrap();
    let resumed = Instant::now();
    let mut seen: Vec<(Duration, String)> = Vec::new();
    while resumed.elapsed() < Duration::from_secs(3) {
        let answer = reply(cluster.node(r).cli(&["SET", &tagged("probe"), "3"]));
        let kind = answer.split_whitespace().next().unwrap_or("").to_string();
        if seen.last().map(|(_, k)| k != &kind).unwrap_or(true) {
            seen.push((resumed.elapsed(), kind));
        }
    }
    eprintln!("(c) paused across a takeover, its answers after it resumed: {seen:?}");
    assert!(
        seen.iter().all(|(_, kind)| kind != "OK"),
        "the old primary took a write after it resumed: {seen:?}"
    );
}
