//! Scenarios about what calls and records leave on the nodes: a counter lost between an
//! attempt's read and its write-back, records that outlive their use, calls cut short, and a
//! waiter that gave up.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use fencelock::RetryPolicy;

use super::{give_back, take, take_with, until, violation, History, Kind, Setup, World};

type Tasks = Vec<tokio::task::JoinHandle<()>>;

/// Whether node `i` holds `key` now.
fn has_key(world: &World, i: usize, key: &str) -> bool {
    world.by_hand(i, &["EXISTS", key]) == crate::Reply::Int(1)
}

/// A node's fence counter lost between an attempt's trusted read and its write-back (fencing
/// on, quarantine off; every counter starts at C, 30 s behind A's clock and 30 s ahead of B's
/// and D's). A stranger holds node 0's `Z`; B (its proposals below C, so its token is derived)
/// is granted `Z` by node 1 and, 100 ms later, node 2, and derives C + 1. Its write-back to node
/// 1 is held 400 ms; meanwhile A (a stranger holds node 2's `X`) is issued a token above C by
/// nodes 0 and 1 in one round, and node 1 then loses its counter (evicted, or an operator's
/// DEL). B's write-back must not create node 1's counter: at C + 1 it would sit below A's token,
/// which node 1 had taken. Node 0 then hangs and D tries `X` on nodes 1 and 2: a created counter
/// would let D derive C + 2, a token below A's on the same resource.
pub(super) fn counter_lost(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Tasks {
    let (Some((b, sb)), Some((a, sa)), Some((d, sd))) = (
        super::scripted_client_with(&world, urls, 0, (2000, 500), false, -60_000),
        super::scripted_client_with(&world, urls, 1, (2000, 500), false, 0),
        super::scripted_client_with(&world, urls, 2, (2000, 500), false, -60_000),
    ) else {
        return Vec::new();
    };
    // Tokens are proposed as the client's clock in microseconds.
    let c = ((crate::net::EPOCH_MS - 30_000) * 1000).to_string();
    let counter = fencelock::protocol::FENCE_COUNTER_KEY;
    for i in 0..world.nodes.len() {
        world.by_hand(i, &["SET", counter, &c]);
    }
    world.log(format!("every node's fence counter set to {c}"));
    let t0 = world.rng(|r| r.i64(100..300));
    let held = world.rng(|r| r.u64(300..500));
    // When node 1 ran B's grant (virtual ms).
    let read: Rc<Cell<i64>> = Rc::new(Cell::new(i64::MAX));
    let mut tasks = Vec::new();
    {
        // Holds B's write-back to node 1 once node 1 has run B's grant.
        let (world, read) = (world.clone(), read.clone());
        tasks.push(tokio::task::spawn_local(async move {
            until(&world, t0).await;
            while !has_key(&world, 1, "Z") {
                if world.elapsed_ms() > t0 + 1000 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            world.client_delay.borrow_mut().insert((1, 0), held);
            read.set(world.elapsed_ms());
            world.log(format!(
                "fault: node 1 holds what client 0 sends it next for {held}ms"
            ));
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        let wall = sb.wall.clone();
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            wall,
            async move {
                // B connects early (a lock of another resource).
                until(&world, t0 - 60).await;
                super::take_once(&world, &history, &b, &sb, "b").await;
                until(&world, t0 - 1).await;
                world.stranger(0, "Z", 1500);
                world.client_delay.borrow_mut().insert((2, 0), 100);
                let _ = take(&world, &history, &b, &sb, "Z").await;
                world.client_delay.borrow_mut().retain(|&(_, c), _| c != 0);
                b.close().await;
                if let Some(v) = world.get(1, counter) {
                    let what = format!(
                        "node 1 lost its counter after client 0's trusted read, and client 0's write-back created it again at {v}: a node that lost its counter counts again only after a seed"
                    );
                    violation(&world, &history, what);
                }
            },
        )));
    }
    {
        let (world, history, read) = (world.clone(), history.clone(), read.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let at = super::set_by(&read).await;
            if at == i64::MAX {
                return;
            }
            world.stranger(2, "X", 300);
            if let Some((g, lock)) = take(&world, &history, &a, &sa, "X").await {
                give_back(&world, &history, g, lock).await;
            }
            a.close().await;
            let reply = world.by_hand(1, &["DEL", counter]);
            world.log(format!("fault: node 1 loses its fence counter: {reply:?}"));
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        let wall = sd.wall.clone();
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            wall,
            async move {
                // D connects early (a lock of another resource).
                until(&world, t0 - 40).await;
                super::take_once(&world, &history, &d, &sd, "d").await;
                until(&world, t0 + held as i64 + 500).await;
                world.hang(0, true);
                if let Some((g, lock)) = take(&world, &history, &d, &sd, "X").await {
                    give_back(&world, &history, g, lock).await;
                }
                world.hang(0, false);
                d.close().await;
            },
        )));
    }
    tasks
}

/// How many resources `records_expire`'s writer writes.
const WRITTEN: usize = 4;

/// What a node keeps without a TTL, once every lock and record has expired: nothing that grows
/// with the names used. W (fenced, TTL 300 ms) writes `rw0` .. `rw3` (each record lives ten
/// TTLs); more than ten TTLs after the last, R reads `rw0`, whose own record has expired: it
/// must learn at least W's tokens (the node's largest record). In the end every key left
/// without a TTL must be one of the node-wide ones.
pub(super) fn records_expire(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Tasks {
    let (Some((w, sw)), Some((r, sr))) = (
        super::scripted_client_with(&world, urls, 0, (300, 200), false, 0),
        super::scripted_client_with(&world, urls, 1, (300, 200), false, 0),
    ) else {
        return Vec::new();
    };
    let t0 = world.rng(|r| r.i64(50..200));
    vec![tokio::task::spawn_local(async move {
        until(&world, t0).await;
        for k in 0..WRITTEN {
            let name = format!("rw{k}");
            let Ok(rw) = w.rwlock(&name) else {
                return;
            };
            let write = (Kind::Write, name.as_str());
            if let Some((g, lock)) = take_with(&world, &history, &sw, write, rw.try_write()).await {
                give_back(&world, &history, g, lock).await;
            }
            tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(10..100)))).await;
        }
        w.close().await;
        // Ten TTLs after the last record, and a little more.
        tokio::time::sleep(Duration::from_millis(3000 + world.rng(|r| r.u64(50..300)))).await;
        for name in ["rw0", "never-written"] {
            let Ok(rw) = r.rwlock(name) else {
                return;
            };
            if let Some((g, lock)) =
                take_with(&world, &history, &sr, (Kind::Read, name), rw.try_read()).await
            {
                give_back(&world, &history, g, lock).await;
            }
        }
        r.close().await;
        tokio::time::sleep(Duration::from_millis(700)).await;
        let node_wide = [
            fencelock::protocol::FENCE_COUNTER_KEY,
            fencelock::protocol::NODE_MARKER_KEY,
            fencelock::protocol::NODE_SET_KEY,
            fencelock::protocol::TTLS_KEY,
            fencelock::protocol::WRITER_MAX_KEY,
        ];
        for i in 0..world.nodes.len() {
            let crate::Reply::Array(keys) = world.by_hand(i, &["KEYS", "*"]) else {
                continue;
            };
            for key in keys {
                let crate::Reply::Bulk(key) = key else {
                    continue;
                };
                let key = String::from_utf8_lossy(&key).into_owned();
                if node_wide.contains(&key.as_str()) {
                    continue;
                }
                if world.by_hand(i, &["PTTL", &key]) == crate::Reply::Int(-1) {
                    let what = format!(
                        "node {i} keeps {key} without a TTL after every lock and record expired: node state grows with the names used"
                    );
                    violation(&world, &history, what);
                }
            }
        }
    })]
}

/// Calls cut short and waiters that give up (plain locks, quarantine on, TTL 5 s):
/// - a wait behind a lock whose key one node lost: every attempt is granted there, and the
///   release of that key wakes the line, this waiter first; its attempts must still follow
///   the retry delays (no more than 2 + waited / 50 ms of them);
/// - on nodes 30 ms away each way, a try and a multi-resource acquisition dropped mid-round:
///   the keys they set must be released, so B takes them well within the TTL;
/// - A waits in line for `L`, gives up, closes and exits (its process stops): once the holder
///   releases, B's try must be granted at once (a try never passes the line, so a place left
///   behind would refuse it until it expired).
pub(super) fn cut_short(world: Rc<World>, history: Rc<RefCell<History>>, urls: &[String]) -> Tasks {
    let (Some((h, sh)), Some((a, sa)), Some((b, sb))) = (
        super::scripted_client(&world, urls, 0, 5000, 300),
        super::scripted_client(&world, urls, 1, 5000, 300),
        super::scripted_client(&world, urls, 2, 5000, 300),
    ) else {
        return Vec::new();
    };
    let t0 = world.rng(|r| r.i64(50..200));
    vec![tokio::task::spawn_local(async move {
        until(&world, t0).await;
        // Connections first.
        for (client, s) in [(&h, &sh), (&a, &sa), (&b, &sb)] {
            super::take_once(&world, &history, client, s, &format!("warm{}", s.c)).await;
        }
        own_release_wake(&world, &history, (&h, &sh), &a).await;
        for n in &world.nodes {
            let mut n = n.borrow_mut();
            n.latency_ms = 30;
            n.reply_delay_ms = 30;
        }
        world.log("every message to a node takes 30ms, and every reply 30ms");
        cut_mid_round(&world, &history, &a, (&b, &sb)).await;
        waiter_exits(&world, &history, (&h, &sh), a, (&b, &sb)).await;
        h.close().await;
        b.close().await;
    })]
}

/// The first part of [`cut_short`]: a waiter woken by its own release.
async fn own_release_wake(
    world: &World,
    history: &RefCell<History>,
    (h, sh): (&fencelock::Client, &Setup),
    a: &fencelock::Client,
) {
    let Some((g, lock)) = take(world, history, h, sh, "W").await else {
        world.log("client 0: W was refused; that part is void");
        return;
    };
    // The holder's key lost on node 2 (an operator's DEL).
    tokio::time::sleep(Duration::from_millis(5)).await;
    world.log(format!(
        "fault: W deleted on node 2: {:?}",
        world.by_hand(2, &["DEL", "W"])
    ));
    let policy = RetryPolicy::new()
        .with_wait(Duration::from_millis(300))
        .with_base_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_millis(500));
    for _ in 0..2 {
        let started = world.elapsed_ms();
        match a.acquire_with("W", &policy).await {
            Err(fencelock::Error::Timeout { attempts, .. }) => {
                let took = world.elapsed_ms() - started;
                let most = 2 + (took / 50) as u32;
                if attempts > most {
                    let what = format!(
                        "client 1 made {attempts} attempts in a {took}ms wait for W (at most {most} with delays of 50ms or more): its own release woke it"
                    );
                    violation(world, history, what);
                } else {
                    world.log(format!("client 1: {attempts} attempts in {took}ms"));
                }
            }
            Err(e) => world.log(format!("client 1: the wait for W ended: {e}")),
            Ok(lock) => {
                let what = "client 1 was granted W while client 0 held it".to_string();
                violation(world, history, what);
                let _ = lock.release().await;
            }
        }
    }
    give_back(world, history, g, lock).await;
}

/// The second part of [`cut_short`]: calls dropped mid-round leave no key.
async fn cut_mid_round(
    world: &World,
    history: &RefCell<History>,
    a: &fencelock::Client,
    (b, sb): (&fencelock::Client, &Setup),
) {
    let cut = world.rng(|r| r.u64(10..55));
    let single = tokio::time::timeout(Duration::from_millis(cut), a.try_acquire("U")).await;
    let cut2 = world.rng(|r| r.u64(10..55));
    let many =
        tokio::time::timeout(Duration::from_millis(cut2), a.acquire_many(&["V", "V2"])).await;
    world.log(format!(
        "client 1: a try for U cut after {cut}ms ({}), one for V and V2 after {cut2}ms ({})",
        if single.is_err() {
            "cut short"
        } else {
            "returned"
        },
        if many.is_err() {
            "cut short"
        } else {
            "returned"
        },
    ));
    drop((single, many));
    let started = world.elapsed_ms();
    for name in ["U", "V", "V2"] {
        // A key released in the background is gone within a few round trips; one left behind
        // lives the TTL (5 s).
        loop {
            if let Some((g, lock)) = take(world, history, b, sb, name).await {
                give_back(world, history, g, lock).await;
                break;
            }
            if world.elapsed_ms() - started > 1500 {
                let what = format!(
                    "client 2 could not take {name} for 1.5 s after client 1's call for it was cut short (TTL 5 s): the call left its keys"
                );
                violation(world, history, what);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The third part of [`cut_short`]: a waiter that gives up, closes and exits while another
/// waits behind it.
async fn waiter_exits(
    world: &World,
    history: &RefCell<History>,
    (h, sh): (&fencelock::Client, &Setup),
    a: fencelock::Client,
    (b, sb): (&fencelock::Client, &Setup),
) {
    let Some((g, lock)) = take(world, history, h, sh, "L").await else {
        world.log("client 0: L was refused; that part is void");
        return;
    };
    let gave_up = world.rng(|r| r.u64(350..500));
    // When client 0 released L (virtual ms).
    let released = Cell::new(i64::MAX);
    let first = async {
        let waited = tokio::time::timeout(Duration::from_millis(gave_up), a.acquire("L")).await;
        if let Ok(Ok(lock)) = waited {
            let what = "client 1 was granted L while client 0 held it".to_string();
            violation(world, history, what);
            let _ = lock.release().await;
        }
        a.close().await;
        // The process exits: nothing it still had to send reaches a node.
        world.frozen.borrow_mut().insert(1);
        world.log(format!(
            "client 1 gave up its wait for L after {gave_up}ms, closed and exited"
        ));
        give_back(world, history, g, lock).await;
        released.set(world.elapsed_ms());
    };
    let second = async {
        // Behind client 1 in line: its first attempt is refused after client 1 took its place.
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Delays of 300-600 ms: an attempt that raced the release and was granted by one node
        // does not count the wake-up it may have set off itself, and follows them; client 1's
        // place, had it been left, would refuse client 2 for its whole lease (2.1 s).
        let policy = RetryPolicy::new()
            .with_wait(Duration::from_millis(4000))
            .with_base_delay(Duration::from_millis(300))
            .with_max_delay(Duration::from_millis(600));
        let started = world.elapsed_ms();
        match b.acquire_with("L", &policy).await {
            Ok(lock) => {
                let at = world.elapsed_ms();
                let g = super::record(
                    world,
                    history,
                    sb,
                    Kind::Mutex,
                    "L",
                    (None, lock.validity_deadline()),
                    started,
                    super::held_by(&lock),
                );
                let after = at - released.get();
                if after > 1000 {
                    let what = format!(
                        "client 2, next in line for L, was granted it {after}ms after its holder released it: client 1, which gave up and exited, left its place ahead"
                    );
                    violation(world, history, what);
                }
                give_back(world, history, g, lock).await;
            }
            Err(e) => {
                let what = format!("client 2's wait for L ended without it: {e}");
                violation(world, history, what);
            }
        }
    };
    tokio::join!(first, second);
}
