//! A Redis Cluster as one node (`redis+cluster://`, issue 31): four shards of a primary and a
//! replica, each part of the scenario on a hash tag of its own shard. A failover that loses a
//! held lock, a manual failover under a kept connection (`MOVED`), a waiter woken on the tagged
//! release channel, a slot half moved (`ASK` within a round and in the extender's pipeline),
//! and a slot moved key by key (an extension or a release split, `TRYAGAIN` and a script's
//! "non local key"; the election log read while it moves).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use fencelock::{AutoExtend, Client, Config, RetryPolicy};

use super::{give_back, take_with, try_take, until, violation, History, Kind, Setup, World};
use crate::keyspace::Migrated;
use crate::slots::{key_slot, SLOTS};

type Tasks = Vec<tokio::task::JoinHandle<()>>;

/// Shards; nodes `2s` (primary) and `2s + 1` (replica) are shard `s`.
const SHARDS: usize = 4;

/// A tag (`<stem><n>`, the first `n` that fits) whose slot shard `shard` serves.
fn tag_in(shard: usize, stem: &str) -> String {
    let per = usize::from(SLOTS) / SHARDS;
    (0..)
        .map(|n| format!("{stem}{n}"))
        .find(|t| usize::from(key_slot(t.as_bytes())) / per == shard)
        .expect("some tag hashes there")
}

/// `key` as it lives on the cluster for tag `tag`.
fn tagged(tag: &str, key: &str) -> String {
    format!("{{{tag}}}{key}")
}

/// A client of the cluster with tag `tag`, node timeout 200 ms, the quarantine left to its
/// default (on for a cluster node).
fn client(
    world: &World,
    tag: &str,
    c: usize,
    (ttl, fencing): (u64, bool),
) -> Option<(Client, Setup)> {
    client_with(world, tag, c, (ttl, fencing), 200)
}

/// As [`client`], with a node timeout of `timeout` ms.
fn client_with(
    world: &World,
    tag: &str,
    c: usize,
    (ttl, fencing): (u64, bool),
    timeout: u64,
) -> Option<(Client, Setup)> {
    let url = super::as_client(&world.cluster_url(tag), c);
    let config = Config::new([url])
        .with_ttl(Duration::from_millis(ttl))
        .with_node_timeout(Duration::from_millis(timeout))
        .with_fencing(fencing);
    world.log(format!(
        "client {c}: cluster tag {tag}, ttl {ttl}ms, node timeout {timeout}ms, fencing {}, quarantine by default",
        if fencing { "on" } else { "off" }
    ));
    super::open_client(world, c, config, (ttl, true, fencing, 0))
}

/// Marks the tag's shard new (as `fencelock up` does): it never held a lock.
fn mark_new(world: &World, tag: &str) {
    let owner = world
        .slot_owner(key_slot(tag.as_bytes()))
        .expect("a served slot");
    let run_id = world.nodes[owner].borrow().node.run_id().to_string();
    let key = tagged(tag, fencelock::protocol::NODE_MARKER_KEY);
    world.by_hand(
        owner,
        &["SET", &key, &fencelock::protocol::new_node_marker(&run_id)],
    );
}

pub(super) fn cluster(world: Rc<World>, history: Rc<RefCell<History>>) -> Tasks {
    world.cluster_up();
    for n in &world.nodes {
        // Up for a minute: a promoted replica judged by its uptime would count at once.
        n.borrow_mut().node.age(60_000);
    }
    let tags = [
        tag_in(0, "lost"),
        tag_in(1, "manual"),
        tag_in(2, "half"),
        tag_in(3, "keys"),
    ];
    for tag in &tags {
        mark_new(&world, tag);
    }
    world.replicate();
    let end = 12_000;
    let mut tasks = Vec::new();
    {
        let world = world.clone();
        tasks.push(tokio::task::spawn_local(async move {
            while world.elapsed_ms() < end {
                let step = world.rng(|r| r.u64(5..=20));
                tokio::time::sleep(Duration::from_millis(step)).await;
                world.replicate();
            }
        }));
    }
    let parts: [PartFn; 4] = [lost, manual, half, keys];
    for (part, tag) in parts.iter().zip(tags) {
        tasks.push(tokio::task::spawn_local(part(
            world.clone(),
            history.clone(),
            tag,
        )));
    }
    tasks
}

type Part = std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

/// A part of the scenario, on the hash tag it is given.
type PartFn = fn(Rc<World>, Rc<RefCell<History>>, String) -> Part;

/// Shard 0: A (fenced, TTL 4 s) takes `job` after the shard's replication stalled; the primary
/// dies and its replica, without A's key, serves the slot. P (plain, TTL 500 ms, the
/// quarantine by default) tries `job` until A's lock ends: never granted (the checker's two
/// holders).
fn lost(world: Rc<World>, history: Rc<RefCell<History>>, tag: String) -> Part {
    Box::pin(async move {
        let (Some((a, sa)), Some((p, sp))) = (
            client(&world, &tag, 0, (4000, true)),
            client(&world, &tag, 1, (500, false)),
        ) else {
            return;
        };
        until(&world, world.rng(|r| r.i64(50..150))).await;
        // A's TTL goes into the shard's record (and its replica's).
        if let Some((g, lock)) = try_take(&world, &history, (&a, &sa), "warm").await {
            give_back(&world, &history, g, lock).await;
        } else {
            violation(&world, &history, "client 0 (A) was refused warm".into());
            return;
        }
        tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(100..200)))).await;
        world.stall(0, true);
        let Some((g, lock)) = try_take(&world, &history, (&a, &sa), "job").await else {
            violation(
                &world,
                &history,
                "client 0 (A) was refused job before the failover".into(),
            );
            return;
        };
        let valid = history.borrow().grants[g].valid_until;
        tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(20..150)))).await;
        world.cluster_failover(1, true);
        world.stall(0, false);
        tokio::time::sleep(Duration::from_millis(20)).await;
        while world.elapsed_ms() < valid - 50 {
            if let Some((g, lock)) = try_take(&world, &history, (&p, &sp), "job").await {
                give_back(&world, &history, g, lock).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        until(&world, valid).await;
        give_back(&world, &history, g, lock).await;
    })
}

/// Shard 1: M (plain, TTL 1 s) holds `held` auto-extended; the replica takes over by hand
/// (`CLUSTER FAILOVER`: caught up first, nothing lost), the old primary stays up and answers
/// `MOVED`. M's kept connection meets it: M must keep its lock for 4 s (its lost signal
/// silent), and Q never gets it. Then, on shard 1's new primary, a waiter woken by the
/// release on the tagged channel: within 300 ms, where its polling would take 20 s.
fn manual(world: Rc<World>, history: Rc<RefCell<History>>, tag: String) -> Part {
    Box::pin(async move {
        let (Some((m, sm)), Some((q, sq))) = (
            client(&world, &tag, 2, (1000, false)),
            client(&world, &tag, 3, (1000, false)),
        ) else {
            return;
        };
        until(&world, world.rng(|r| r.i64(50..150))).await;
        let Some((g, lock)) = try_take(&world, &history, (&m, &sm), "held").await else {
            violation(&world, &history, "client 2 (M) was refused held".into());
            return;
        };
        let guard = lock.auto_extend(AutoExtend::new());
        let lost = guard.lost();
        tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(500..900)))).await;
        world.replicate();
        world.cluster_failover(3, false);
        let over = world.elapsed_ms() + 4000;
        while world.elapsed_ms() < over {
            if let Ok(stolen) = q.try_acquire("held").await {
                violation(
                    &world,
                    &history,
                    format!(
                        "client 3 (Q) took held while client 2 (M) extends it after the manual failover: {}",
                        stolen.votes()
                    ),
                );
                let _ = stolen.release().await;
            }
            if lost.is_fired() {
                violation(
                    &world,
                    &history,
                    format!(
                        "client 2 (M) lost held after the manual failover: {:?}",
                        lost.cause()
                    ),
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        history.borrow_mut().grants[g].ended = Some(world.elapsed_ms());
        let _ = guard.release().await;

        // The waiter: Q waits for `line` (held by M) and `line-b` at once, polling every 20 s.
        // A lock of several resources is woken by their release channels (one resource waits
        // in the line, which hands it over by itself).
        let Some((g, lock)) = try_take(&world, &history, (&m, &sm), "line").await else {
            violation(&world, &history, "client 2 (M) was refused line".into());
            return;
        };
        let slow = RetryPolicy::new()
            .with_base_delay(Duration::from_secs(20))
            .with_max_delay(Duration::from_secs(20))
            .with_wait(Duration::from_secs(30));
        let wait = take_with(
            &world,
            &history,
            &sq,
            (Kind::Mutex, "line"),
            q.acquire_many_with(&["line", "line-b"], &slow),
        );
        let release = async {
            tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(400..700)))).await;
            let at = world.elapsed_ms();
            give_back(&world, &history, g, lock).await;
            at
        };
        let (granted, released) = tokio::join!(wait, release);
        match granted {
            Some((g, lock)) => {
                let at = history.borrow().grants[g].granted;
                if at > released + 300 {
                    violation(
                        &world,
                        &history,
                        format!(
                            "client 3 (Q), waiting for line, was granted it {}ms after its release: not woken by the release",
                            at - released
                        ),
                    );
                }
                give_back(&world, &history, g, lock).await;
            }
            None => violation(
                &world,
                &history,
                "client 3 (Q) never got line after its release".into(),
            ),
        }
    })
}

/// Shard 2's tag's slot moves to node 6 (shard 3's primary), held half done for 4 s: the held
/// locks' keys go first, the rest stays on the owner, which answers `ASK` for the moved ones.
/// F (fenced, TTL 2 s) extends by hand every 300 ms (one request, `ASK` followed within it),
/// X (plain, TTL 1 s) auto-extends (the extender's pipeline): neither may fail; B and PB try
/// the locks (the checker: no second holder). Then the rest moves and the slot changes owner.
fn half(world: Rc<World>, history: Rc<RefCell<History>>, tag: String) -> Part {
    Box::pin(async move {
        let (Some((f, sf)), Some((x, sx)), Some((b, sb))) = (
            client(&world, &tag, 4, (2000, true)),
            client(&world, &tag, 5, (1000, false)),
            client(&world, &tag, 6, (2000, true)),
        ) else {
            return;
        };
        until(&world, world.rng(|r| r.i64(300..500))).await;
        let (Some((gf, mut fenced)), Some((gx, auto))) = (
            try_take(&world, &history, (&f, &sf), "moving-fenced").await,
            try_take(&world, &history, (&x, &sx), "moving-auto").await,
        ) else {
            violation(
                &world,
                &history,
                "the half move's locks were refused".into(),
            );
            return;
        };
        let auto = auto.auto_extend(AutoExtend::new());
        let lost = auto.lost();
        let slot = key_slot(tag.as_bytes());
        let from = world.begin_move(slot, 6);
        for key in world.keys_in_slot(from, slot) {
            if String::from_utf8_lossy(&key).contains("moving-") {
                let _ = world.migrate(slot, &key, false);
            }
        }
        let over = world.elapsed_ms() + 4000;
        let mut n = 0;
        while world.elapsed_ms() < over {
            if let Err(e) = fenced.extend().await {
                violation(
                    &world,
                    &history,
                    format!("client 4 (F): extension {n} in the half-moved slot failed: {e}"),
                );
                break;
            }
            // Extended: the checker judges others against the new validity.
            history.borrow_mut().grants[gf].valid_until =
                super::virtual_ms(&world, fenced.validity_deadline());
            if let Some((g, lock)) = try_take(&world, &history, (&b, &sb), "moving-fenced").await {
                give_back(&world, &history, g, lock).await;
            }
            if lost.is_fired() {
                violation(
                    &world,
                    &history,
                    format!(
                        "client 5 (X) lost its auto-extended lock in the half-moved slot: {:?}",
                        lost.cause()
                    ),
                );
                break;
            }
            n += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        history.borrow_mut().grants[gx].ended = Some(world.elapsed_ms());
        for key in world.keys_in_slot(from, slot) {
            if world.migrate(slot, &key, false) == Migrated::BusyKey {
                let _ = world.migrate(slot, &key, true);
            }
        }
        world.finish_move(slot);
        if let Err(e) = fenced.extend().await {
            violation(
                &world,
                &history,
                format!("client 4 (F): the extension after the move failed: {e}"),
            );
        }
        give_back(&world, &history, gf, fenced).await;
        let _ = auto.release().await;
    })
}

/// Shard 3's tag's slot moves to node 4 (shard 2's primary) one key every 50-80 ms, in name
/// order. H holds `line`, W waits for it (its line's keys exist), L leads `lead`. Once the
/// line's keys moved and the lock's key did not, H releases: it must succeed (its keys split,
/// `TRYAGAIN`, sent again until they are together). Once the election log's key moved, an
/// observer must report L before the move ends (its reads follow `ASK`).
fn keys(world: Rc<World>, history: Rc<RefCell<History>>, tag: String) -> Part {
    Box::pin(async move {
        let (Some((h, sh)), Some((w, sw)), Some((l, _))) = (
            // A release split by the move is sent again within its round, which the node
            // timeout bounds: long enough for the four keys the move takes after the line's.
            client_with(&world, &tag, 7, (4000, false), 1000),
            client(&world, &tag, 8, (4000, false)),
            client(&world, &tag, 9, (4000, true)),
        ) else {
            return;
        };
        until(&world, world.rng(|r| r.i64(5000..5500))).await;
        let Some((g, lock)) = try_take(&world, &history, (&h, &sh), "kline").await else {
            violation(&world, &history, "client 7 (H) was refused kline".into());
            return;
        };
        let policy = RetryPolicy::new()
            .with_base_delay(Duration::from_millis(200))
            .with_wait(Duration::from_secs(20));
        let waiter = take_with(
            &world,
            &history,
            &sw,
            (Kind::Mutex, "kline"),
            w.acquire_with("kline", &policy),
        );
        let election = match l.election("lead") {
            Ok(e) => e,
            Err(e) => {
                violation(&world, &history, format!("client 9: election: {e}"));
                return;
            }
        };
        let leadership = match election.campaign("first").await {
            Ok(x) => x,
            Err(e) => {
                violation(
                    &world,
                    &history,
                    format!("client 9 (L) lost its campaign: {e}"),
                );
                return;
            }
        };
        let slot = key_slot(tag.as_bytes());
        let owner = world.slot_owner(slot).expect("served");
        let queue = tagged(&tag, &fencelock::protocol::queue_key("kline"));
        let log = tagged(&tag, &fencelock::protocol::leaders_key("lead"));
        let lock_key = tagged(&tag, "kline");
        let moved: Rc<RefCell<Vec<String>>> = Rc::default();
        let closing = Rc::new(std::cell::Cell::new(i64::MAX));
        let mover = async {
            // Once W waits in line (its line's keys exist).
            for _ in 0..100 {
                if world
                    .keys_in_slot(owner, slot)
                    .iter()
                    .any(|k| k == queue.as_bytes())
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            world.begin_move(slot, 4);
            loop {
                let keys = world.keys_in_slot(owner, slot);
                if keys.is_empty() {
                    break;
                }
                for key in keys {
                    tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(50..80)))).await;
                    if world.migrate(slot, &key, false) == Migrated::BusyKey {
                        let _ = world.migrate(slot, &key, true);
                    }
                    moved
                        .borrow_mut()
                        .push(String::from_utf8_lossy(&key).into_owned());
                }
            }
            tokio::time::sleep(Duration::from_millis(80)).await;
            closing.set(world.elapsed_ms());
            world.finish_move(slot);
        };
        let is_moved = |key: &str| moved.borrow().iter().any(|k| k == key);
        let release = async {
            loop {
                if is_moved(&queue) && !is_moved(&lock_key) {
                    history.borrow_mut().grants[g].ended = Some(world.elapsed_ms());
                    if let Err(e) = lock.release().await {
                        violation(
                            &world,
                            &history,
                            format!("client 7 (H) could not release kline while its keys sat apart: {e}"),
                        );
                    }
                    return;
                }
                if closing.get() != i64::MAX || is_moved(&lock_key) {
                    // The part tests nothing then: the run says so.
                    violation(
                        &world,
                        &history,
                        format!(
                            "the line's keys never sat apart from its key: {:?}",
                            moved.borrow()
                        ),
                    );
                    give_back(&world, &history, g, lock).await;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let observed = async {
            while !is_moved(&log) {
                if closing.get() != i64::MAX {
                    violation(
                        &world,
                        &history,
                        "the election log's key never moved before the move ended".into(),
                    );
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let mut observer = election.observe();
            let Ok(leader) = tokio::time::timeout(Duration::from_secs(3), observer.next()).await
            else {
                violation(
                    &world,
                    &history,
                    "the observer, started once the election log's key moved, reported no leader in 3 s".into(),
                );
                return;
            };
            let at = world.elapsed_ms();
            world.log(format!("observer: term {} at {at}ms", leader.term()));
            if at > closing.get() {
                violation(
                    &world,
                    &history,
                    format!(
                        "the observer, started once the election log's key moved, reported the leader only at {at}ms, after the move ended at {}ms",
                        closing.get()
                    ),
                );
            }
        };
        let (_, _, _, granted) = tokio::join!(mover, release, observed, waiter);
        if let Some((g, lock)) = granted {
            give_back(&world, &history, g, lock).await;
        }
        let _ = leadership.resign().await;
    })
}
