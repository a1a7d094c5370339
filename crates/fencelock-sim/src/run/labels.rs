//! Holder labels (issue 33): labelled and unlabelled clients, short and long TTLs side by side,
//! on several resources, through a restart without persistence and a FLUSHALL, beside a label
//! key an older client left behind. Exclusion must hold as anywhere else, and what an operator
//! reads on a node must name the client that holds the lock there, never another.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use fencelock::{AutoExtend, Client, Config, Holder, RetryPolicy};

use super::{give_back, hold_watching, record, violation, History, Kind, Setup, World};
use crate::node::Persistence;

type Tasks = Vec<tokio::task::JoinHandle<()>>;

/// The resources the clients share.
const RESOURCES: [&str; 3] = ["r0", "r1", "r2"];

/// The label an older client (side keys) left on `r2` before it lost its lock key: it must not
/// be read as the label of a later holder.
const STALE: &str = "host=older pid=1 label=left behind";

/// Client `c`: its TTL, and its holder when it is labelled.
fn client(world: &World, urls: &[String], c: usize) -> Option<(Client, Setup, Option<Holder>)> {
    let (ttl, labelled) = [(1000, true), (4000, false), (4000, true), (1000, false)][c];
    let holder = labelled.then(|| Holder::parse(&format!("host=sim pid={c} label=client {c}")));
    let holder = holder.flatten();
    let list: Vec<String> = urls.iter().map(|u| super::as_client(u, c)).collect();
    let mut config = Config::new(list)
        .with_ttl(Duration::from_millis(ttl))
        .with_node_timeout(Duration::from_millis(50))
        .with_retry(RetryPolicy::new().with_wait(Duration::from_millis(2 * ttl)));
    if let Some(h) = &holder {
        config = config.with_holder(h.clone());
    }
    world.log(format!(
        "client {c}: ttl {ttl}ms, node timeout 50ms, quarantine on, label {:?}",
        holder.as_ref().map(ToString::to_string)
    ));
    let client = Client::new(config).ok()?;
    let setup = Setup {
        c,
        ttl,
        quarantine: true,
        fencing: false,
        wall: Rc::new(Cell::new(0)),
        paused: Rc::new(Cell::new((i64::MAX, i64::MIN))),
        plain_only: true,
        quiet_gaps: false,
    };
    Some((client, setup, holder))
}

/// The label an operator reads for `resource` on node `i`, as `fencelock inspect` reads it: the
/// holder carried in the lock key's value, else an older client's side key whose TTL is the
/// lock's own (the older scripts set and extend both together).
fn label_on(world: &World, i: usize, resource: &str) -> Option<String> {
    let value = world.get(i, resource)?;
    if let Some(holder) = fencelock::protocol::owner_holder(&value) {
        return Some(holder.to_string());
    }
    let side = fencelock::protocol::holder_key(resource);
    let pttl = |key: &str| match world.by_hand(i, &["PTTL", key]) {
        crate::Reply::Int(ms) => ms,
        _ => -2,
    };
    let (lock, label) = (pttl(resource), pttl(&side));
    if lock > 0 && (lock - label).abs() <= fencelock::protocol::LEGACY_HOLDER_SLACK_MS {
        world.get(i, &side)
    } else {
        None
    }
}

/// Checks what the nodes that granted `lock` show as its holder, right after the grant.
fn check_label(
    world: &World,
    history: &RefCell<History>,
    (c, holder): (usize, Option<&Holder>),
    lock: &fencelock::Lock,
    granted_by: &[usize],
) {
    check_label_of(
        world,
        history,
        (c, holder),
        (lock.owner(), lock.resources()),
        granted_by,
    );
}

/// As [`check_label`], for the lock owned by `owner` on `resources` (an auto-extended one
/// after its extensions too: a side key left behind must not take the holder's TTL).
fn check_label_of(
    world: &World,
    history: &RefCell<History>,
    (c, holder): (usize, Option<&Holder>),
    (owner, resources): (&str, &[String]),
    granted_by: &[usize],
) {
    let want = holder.map(ToString::to_string);
    for &i in granted_by {
        for resource in resources {
            // A node that lost its data since it granted shows nothing, which is no lie.
            if world.get(i, resource).as_deref() != Some(owner) {
                continue;
            }
            let seen = label_on(world, i, resource);
            if seen != want {
                violation(
                    world,
                    history,
                    format!(
                        "client {c}: node {i} shows {resource}'s holder as {seen:?}, not {want:?}"
                    ),
                );
            }
        }
    }
}

/// Issue 33's labels (see `Scenario::Labels`).
pub(super) fn labels(world: Rc<World>, history: Rc<RefCell<History>>, urls: &[String]) -> Tasks {
    let clients: Vec<_> = (0..4).filter_map(|c| client(&world, urls, c)).collect();
    if clients.len() < 4 {
        return Vec::new();
    }
    for node in &world.nodes {
        node.borrow_mut().node.age(3_600_000);
    }
    for i in 0..world.nodes.len() {
        let side = fencelock::protocol::holder_key("r2");
        world.by_hand(i, &["SET", &side, STALE, "PX", "20000"]);
    }
    world.log(format!(
        "fault: an older client's label key on r2: {STALE:?}"
    ));
    let mut tasks = Vec::new();
    {
        // A restart without persistence, then, once the longest TTL has passed, a FLUSHALL of
        // another node: one node of a quorum losing its data at a time, as README claims.
        let world = world.clone();
        tasks.push(tokio::task::spawn_local(async move {
            let restarted = world.rng(|r| r.usize(..3));
            let at = world.rng(|r| r.i64(800..2000));
            super::until(&world, at).await;
            world.restart(restarted, Persistence::None);
            let flushed = (restarted + 1 + world.rng(|r| r.usize(..2))) % 3;
            super::until(&world, at + 4500 + world.rng(|r| r.i64(0..1000))).await;
            let now = world.node_now(flushed);
            world.lost_data.set(true);
            world.losses.borrow_mut().push(world.elapsed_ms());
            world.trouble(flushed);
            world.nodes[flushed]
                .borrow_mut()
                .node
                .exec(now, &[b"FLUSHALL".to_vec()]);
            world.log(format!("fault: node {flushed} FLUSHALL"));
        }));
    }
    for (client, s, holder) in clients {
        let (world, history) = (world.clone(), history.clone());
        tasks.push(tokio::task::spawn_local(async move {
            while world.elapsed_ms() < 9000 {
                let pause = world.rng(|r| r.u64(5..80));
                tokio::time::sleep(Duration::from_millis(pause)).await;
                one_turn(&world, &history, (&client, &s, holder.as_ref())).await;
            }
            client.close().await;
        }));
    }
    tasks
}

/// One operation of client `s.c`: a lock of one resource (tried or waited for), two at once, or
/// one auto-extended; held for a while and released.
async fn one_turn(
    world: &World,
    history: &RefCell<History>,
    (client, s, holder): (&Client, &Setup, Option<&Holder>),
) {
    let resource = RESOURCES[world.rng(|r| r.usize(..RESOURCES.len()))];
    let op = world.rng(|r| r.u32(..100));
    let started = world.elapsed_ms();
    let attempt = match op {
        0..=19 => client.acquire(resource).await,
        20..=34 => client.try_acquire_many(&["r0", "r2"]).await,
        _ => client.try_acquire(resource).await,
    };
    let lock = match attempt {
        Ok(lock) => lock,
        Err(e) => {
            if world.verbose {
                world.log(format!("client {}: {resource} refused: {e}", s.c));
            }
            return;
        }
    };
    let who = super::held_by(&lock);
    let gs: Vec<usize> = lock
        .resources()
        .iter()
        .map(|r| {
            record(
                world,
                history,
                s,
                Kind::Mutex,
                r,
                (None, lock.validity_deadline()),
                started,
                who.clone(),
            )
        })
        .collect();
    check_label(world, history, (s.c, holder), &lock, &who.1);
    if op >= 85 && gs.len() == 1 {
        let resources = lock.resources().to_vec();
        if holder.is_none() {
            // An older client's label left behind by a lock lost without it (a `DEL` by hand):
            // the extensions must not give it this lock's TTL.
            let side = fencelock::protocol::holder_key(&resources[0]);
            for &i in &who.1 {
                world.by_hand(i, &["SET", &side, STALE, "PX", "20000"]);
            }
        }
        let guard = lock.auto_extend(AutoExtend::new());
        history.borrow_mut().grants[gs[0]].lost = Some(guard.lost());
        let ms = world.rng(|r| r.u64(100..2 * s.ttl));
        if !hold_watching(world, history, gs[0], &guard, ms).await {
            check_label_of(
                world,
                history,
                (s.c, holder),
                (guard.owner(), &resources),
                &who.1,
            );
        }
        let _ = guard.release().await;
        return;
    }
    let ms = world.rng(|r| r.u64(10..s.ttl * 5 / 4));
    tokio::time::sleep(Duration::from_millis(ms)).await;
    for &g in &gs[1..] {
        let mut h = history.borrow_mut();
        let now = world.elapsed_ms();
        let valid_until = h.grants[g].valid_until;
        h.grants[g].ended = Some(now.min(valid_until));
    }
    give_back(world, history, gs[0], lock).await;
}
