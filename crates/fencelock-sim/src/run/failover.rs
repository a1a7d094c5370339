//! Sentinel-managed primaries as nodes (`redis+sentinel://`, issue 31): groups of a
//! primary and two replicas, asynchronous replication, failovers that lose what was not
//! replicated yet, Sentinels that name the new primary late, and a primary demoted under a kept
//! connection.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use fencelock::{Client, Config};

use super::{give_back, try_take, until, violation, History, Setup, World};

type Tasks = Vec<tokio::task::JoinHandle<()>>;

/// Nodes per group: the primary first, then its replicas.
const SIZE: usize = 3;

/// A client on `urls` (Sentinel URLs), quarantine on, node timeout 200 ms; fenced when
/// `fencing`, its wall clock `wall` ms off the run's.
fn client(
    world: &World,
    urls: &[String],
    c: usize,
    (ttl, fencing, wall): (u64, bool, i64),
) -> Option<(Client, Setup)> {
    let list: Vec<String> = urls.iter().map(|u| super::as_client(u, c)).collect();
    let config = Config::new(list)
        .with_ttl(Duration::from_millis(ttl))
        .with_node_timeout(Duration::from_millis(200))
        .with_quarantine(true)
        .with_fencing(fencing);
    world.log(format!(
        "client {c}: {} group(s), ttl {ttl}ms, fencing {}, quarantine on, wall clock {wall}ms",
        urls.len(),
        if fencing { "on" } else { "off" }
    ));
    super::open_client(world, c, config, (ttl, true, fencing, wall))
}

/// Groups 0 and 1 fail over while A holds `r0`: their replication stalls just before A's grant,
/// so the promoted replicas have neither A's key nor its counter raise, though they have the
/// record of A's 4 s TTL from A's first lock. Their old primaries stop answering; each
/// group's first Sentinel names the new primary within 300 ms, the others within 600 ms.
///
/// - P (plain, TTL 500 ms) tries `r0` until A's lock ends: the promoted primaries must stay
///   out for A's TTL (the longest their record holds), not P's, and from when P met them.
/// - B (fenced, TTL 500 ms, its clock a minute behind, so its proposals are below every
///   counter) meets the new primaries once the Sentinels name them, sees their quarantine end
///   after A's lock (on another resource, which another program holds on group 2), then tries
///   `r0` while group 2's primary hangs:
///   granted by groups 0 and 1 alone, it must not be issued a token below A's (their counters
///   are stale: a kept one would be trusted).
/// - A fourth group, one node list of its own: its primary demoted under a kept connection
///   ([`demoted`]), then a failover that loses a held lock with no other node to ask
///   ([`lost_alone`]).
pub(super) fn failover(world: Rc<World>, history: Rc<RefCell<History>>) -> Tasks {
    world.group_up(SIZE);
    for n in &world.nodes {
        // Up for a minute: a promoted replica judged by its uptime would count at once.
        n.borrow_mut().node.age(60_000);
    }
    let urls = world.group_urls();
    let (urls, own) = (&urls[..3], &urls[3..]);
    let (Some(a), Some(p), Some(b), Some(d), Some(a2), Some(p2)) = (
        client(&world, urls, 0, (4000, true, 0)),
        client(&world, urls, 1, (500, false, 0)),
        client(&world, urls, 2, (500, true, -60_000)),
        client(&world, own, 3, (1000, false, 0)),
        client(&world, own, 4, (4000, false, 0)),
        client(&world, own, 5, (500, false, 0)),
    ) else {
        return Vec::new();
    };
    let end = 14_000;
    let t0 = world.rng(|r| r.i64(50..150));
    let stall = t0 + world.rng(|r| r.i64(250..350));
    let fail = stall + world.rng(|r| r.i64(50..150));
    let named: Vec<[i64; 3]> = (0..2)
        .map(|_| {
            world.rng(|r| {
                [
                    fail + r.i64(0..300),
                    fail + r.i64(0..600),
                    fail + r.i64(0..600),
                ]
            })
        })
        .collect();
    // When every Sentinel names the new primaries.
    let met = named.iter().flatten().copied().max().unwrap_or(fail) + 20;
    // A's validity deadline, once granted (virtual ms).
    let a_end = Rc::new(Cell::new(i64::MAX));
    let mut tasks = Vec::new();

    // Replication: every replica copies its primary every few milliseconds.
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

    // The failovers of groups 0 and 1, and their Sentinels.
    {
        let world = world.clone();
        tasks.push(tokio::task::spawn_local(async move {
            until(&world, stall).await;
            world.stall(0, true);
            world.stall(1, true);
            until(&world, fail).await;
            for g in 0..2 {
                let old = g * SIZE;
                world.hang(old, true);
                world.cut(old);
                world.promote(old + 1, false);
                world.stall(g, false);
            }
            let mut times: Vec<(i64, usize, usize)> = named
                .iter()
                .enumerate()
                .flat_map(|(g, ts)| ts.iter().enumerate().map(move |(k, &t)| (t, g, k)))
                .collect();
            times.sort_unstable();
            for (t, g, k) in times {
                until(&world, t).await;
                world.name_primary(g, k, g * SIZE + 1);
            }
        }));
    }

    // A: a first lock (its TTL goes into every group's record), then `r0` after the stall.
    {
        let (world, history, a_end) = (world.clone(), history.clone(), a_end.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let (a, sa) = a;
            until(&world, t0).await;
            if let Some((g, lock)) = try_take(&world, &history, (&a, &sa), "warm").await {
                give_back(&world, &history, g, lock).await;
            }
            until(&world, stall + 5).await;
            let Some((g, lock)) = try_take(&world, &history, (&a, &sa), "r0").await else {
                violation(
                    &world,
                    &history,
                    "client 0 (A) was refused r0 before any failover".into(),
                );
                a_end.set(i64::MIN);
                return;
            };
            let valid = history.borrow().grants[g].valid_until;
            a_end.set(valid);
            until(&world, valid).await;
            give_back(&world, &history, g, lock).await;
        }));
    }

    // P: tries `r0` through A's lock.
    {
        let (world, history, a_end) = (world.clone(), history.clone(), a_end.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let (p, sp) = p;
            until(&world, fail + 20).await;
            while world.elapsed_ms() < a_end.get() - 50 {
                if let Some((g, lock)) = try_take(&world, &history, (&p, &sp), "r0").await {
                    give_back(&world, &history, g, lock).await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }

    // B: warm before the stall, meets the new primaries after the failover, then tries `r0`
    // after A's lock with group 2's primary hung.
    {
        let (world, history, a_end) = (world.clone(), history.clone(), a_end.clone());
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            b.1.wall.clone(),
            async move {
                let (b, sb) = b;
                until(&world, t0 + 60).await;
                if let Some((g, lock)) = try_take(&world, &history, (&b, &sb), "warm").await {
                    give_back(&world, &history, g, lock).await;
                }
                until(&world, met).await;
                if let Some((g, lock)) = try_take(&world, &history, (&b, &sb), "other").await {
                    give_back(&world, &history, g, lock).await;
                }
                while a_end.get() == i64::MAX {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                // Until the new primaries' quarantine is seen to end (group 2 answers the
                // records' reads), then `r0` with group 2's primary hung.
                let over = a_end.get();
                until(&world, over + 10).await;
                // Group 2 refuses `other` (held there by another program): B's grants of it
                // come from groups 0 and 1 alone.
                world.stranger(2 * SIZE, "other", 3000);
                while world.elapsed_ms() < over + 1500 {
                    if let Some((g, lock)) = try_take(&world, &history, (&b, &sb), "other").await {
                        give_back(&world, &history, g, lock).await;
                    }
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
                world.hang(2 * SIZE, true);
                while world.elapsed_ms() < over + 2600 {
                    if let Some((g, lock)) = try_take(&world, &history, (&b, &sb), "r0").await {
                        give_back(&world, &history, g, lock).await;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                world.hang(2 * SIZE, false);
            },
        )));
    }

    // Group 3 alone: D's demoted primary, then A2's lock lost in a failover while P2 tries.
    tasks.push(tokio::task::spawn_local(async move {
        if demoted(&world, &history, d, t0).await {
            lost_alone(&world, &history, (a2, p2)).await;
        }
    }));
    tasks
}

/// D holds a connection to group 3's primary, which is then demoted by hand under it (the
/// Sentinels still name it, and its connections stay open). D's next attempt meets `READONLY`;
/// the one after must find the node answering `ROLE` as a replica and say so; nothing is
/// written on the group meanwhile. Once the Sentinels name the new primary, D must be granted
/// within 6 s. Whether the part ran to its end.
async fn demoted(
    world: &World,
    history: &RefCell<History>,
    (d, sd): (Client, Setup),
    t0: i64,
) -> bool {
    until(world, t0).await;
    let Some((g, lock)) = try_take(world, history, (&d, &sd), "d").await else {
        violation(
            world,
            history,
            "client 3 (D) was refused d on group 3 before its demotion".into(),
        );
        return false;
    };
    give_back(world, history, g, lock).await;
    let old = 3 * SIZE;
    world.promote(old + 1, false);
    for (i, expect) in [(1, "read-only"), (2, "answers ROLE \"slave\"")] {
        match d.try_acquire("demoted").await {
            Ok(lock) => {
                violation(
                    world,
                    history,
                    format!(
                        "client 3 (D) was granted `demoted` by its group's demoted primary at its attempt {i}"
                    ),
                );
                let _ = lock.release().await;
            }
            Err(e) => {
                let e = e.to_string();
                world.log(format!("client 3: demoted refused: {e}"));
                if !e.contains(expect) {
                    violation(
                        world,
                        history,
                        format!(
                            "client 3 (D), attempt {i} after the demotion: the error does not say {expect:?}: {e}"
                        ),
                    );
                }
            }
        }
    }
    for n in old..old + SIZE {
        if world.get(n, "demoted").is_some() {
            violation(
                world,
                history,
                format!("node {n} holds `demoted`: a replica was written"),
            );
        }
    }
    for k in 0..3 {
        world.name_primary(3, k, old + 1);
    }
    let named_at = world.elapsed_ms();
    loop {
        if let Some((g, lock)) = try_take(world, history, (&d, &sd), "demoted").await {
            give_back(world, history, g, lock).await;
            return true;
        }
        if world.elapsed_ms() > named_at + 6000 {
            violation(
                world,
                history,
                format!(
                    "client 3 (D) was not granted `demoted` within 6 s of the Sentinels naming node {} (at {named_at}ms)",
                    old + 1
                ),
            );
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One Sentinel group alone (no other node to read the TTLs in use from): A2 (plain, TTL 4 s)
/// takes `r3` after the group's replication stalled, and the primary fails over; P2 (plain,
/// TTL 500 ms), whose first request comes after the failover, tries `r3` until A2's lock ends.
/// The promoted replica's own record of the TTLs (A2's first lock put 4 s there) must keep it
/// out for 4 s, not P2's 500 ms.
async fn lost_alone(
    world: &World,
    history: &RefCell<History>,
    ((a2, sa2), (p2, sp2)): ((Client, Setup), (Client, Setup)),
) {
    let primary = 3 * SIZE + 1;
    if let Some((g, lock)) = try_take(world, history, (&a2, &sa2), "warm3").await {
        give_back(world, history, g, lock).await;
    }
    tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(40..100)))).await;
    world.stall(3, true);
    let Some((g, lock)) = try_take(world, history, (&a2, &sa2), "r3").await else {
        violation(
            world,
            history,
            "client 4 (A2) was refused r3 before the failover".into(),
        );
        return;
    };
    let valid = history.borrow().grants[g].valid_until;
    tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(20..150)))).await;
    world.hang(primary, true);
    world.cut(primary);
    world.promote(primary + 1, false);
    world.stall(3, false);
    let naming = world.elapsed_ms() + world.rng(|r| r.i64(0..300));
    let tries = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        while world.elapsed_ms() < valid - 50 {
            if let Some((g, lock)) = try_take(world, history, (&p2, &sp2), "r3").await {
                give_back(world, history, g, lock).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let name = async {
        until(world, naming).await;
        for k in 0..3 {
            world.name_primary(3, k, primary + 1);
        }
    };
    tokio::join!(tries, name);
    until(world, valid).await;
    give_back(world, history, g, lock).await;
}
