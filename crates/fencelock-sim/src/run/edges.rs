//! Scenarios at the edges the random mix reaches too rarely or never: a reader held to its
//! last millisecond, the error a refused attempt reports, a client whose node list overlaps
//! another's and whose shared node answers last, and one client extending hundreds of locks.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use fencelock::{AutoExtend, ErrorKind, RetryPolicy};

use super::{
    give_back, hold_watching, scripted_client, take, take_with, until, violation, History, Kind,
    World,
};
use std::cell::RefCell;

type Tasks = Vec<tokio::task::JoinHandle<()>>;

/// A reader holds `rw` (TTL 2 s, not extended) to the end of its validity; a writer tries every
/// 30-60 ms through the reader's last 1.5 s and a little past it. No write may be granted while
/// the reader's validity lasts: the readers' marker lives as long as the longest reader's entry.
pub(super) fn reader_to_the_end(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Tasks {
    let (Some((reader, rs)), Some((writer, ws))) = (
        scripted_client(&world, urls, 0, 2000, 200),
        scripted_client(&world, urls, 1, 2000, 200),
    ) else {
        return Vec::new();
    };
    let t0 = world.rng(|r| r.i64(50..300));
    // The reader's validity deadline (virtual ms) once it holds.
    let valid: Rc<Cell<i64>> = Rc::new(Cell::new(i64::MAX));
    let mut tasks = Vec::new();
    {
        let (world, history, valid) = (world.clone(), history.clone(), valid.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let Ok(rw) = reader.rwlock("rw") else {
                return;
            };
            until(&world, t0).await;
            let read = (Kind::Read, "rw");
            if let Some((g, lock)) = take_with(&world, &history, &rs, read, rw.try_read()).await {
                let until_ms = history.borrow().grants[g].valid_until;
                valid.set(until_ms);
                until(&world, until_ms + 1).await;
                give_back(&world, &history, g, lock).await;
            } else {
                valid.set(i64::MIN);
            }
            reader.close().await;
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let Ok(rw) = writer.rwlock("rw") else {
                return;
            };
            while valid.get() == i64::MAX {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let deadline = valid.get();
            if deadline == i64::MIN {
                world.log("client 0: the read was refused; the scenario is void");
                return;
            }
            until(&world, deadline - 1500).await;
            while world.elapsed_ms() < deadline + 300 {
                let write = (Kind::Write, "rw");
                if let Some((g, lock)) =
                    take_with(&world, &history, &ws, write, rw.try_write()).await
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    give_back(&world, &history, g, lock).await;
                    break;
                }
                let gap = world.rng(|r| r.u64(30..60));
                tokio::time::sleep(Duration::from_millis(gap)).await;
            }
            writer.close().await;
        }));
    }
    tasks
}

/// What a refused attempt reports. A (TTL 3 s) holds `X`; one node hangs: B's try for `X` must
/// say the lock is held (contention), not that the nodes are unavailable; then a second node
/// hangs: B's try for the free `Y` cannot reach a quorum and must say so (unavailable), and so
/// must its try for `X`, which two hung nodes leave undecided. Before the hangs, C, whose URLs
/// name database 99 (the nodes have 0 only: `SELECT 99` is refused at connection), waits for
/// `Z`: it must be told at once that the configuration is wrong, not retry as if the nodes
/// were down.
pub(super) fn refusals(world: Rc<World>, history: Rc<RefCell<History>>, urls: &[String]) -> Tasks {
    let no_db: Vec<String> = urls.iter().map(|u| format!("{u}/99")).collect();
    let (Some((a, sa)), Some((b, _)), Some((c, _))) = (
        scripted_client(&world, urls, 0, 3000, 100),
        scripted_client(&world, urls, 1, 3000, 100),
        scripted_client(&world, &no_db, 2, 3000, 100),
    ) else {
        return Vec::new();
    };
    let t0 = world.rng(|r| r.i64(50..300));
    let first = world.rng(|r| r.usize(..3));
    let second = (first + world.rng(|r| r.usize(1..3))) % 3;
    let mut tasks = Vec::new();
    {
        let (world, history) = (world.clone(), history.clone());
        tasks.push(tokio::task::spawn_local(async move {
            until(&world, t0).await;
            let Some((g, lock)) = take(&world, &history, &a, &sa, "X").await else {
                world.log("client 0: X was refused; the scenario is void");
                return;
            };
            until(&world, t0 + 2000).await;
            give_back(&world, &history, g, lock).await;
            a.close().await;
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        tasks.push(tokio::task::spawn_local(async move {
            until(&world, t0 + 50).await;
            let asked = world.elapsed_ms();
            let got = c
                .acquire_with("Z", &RetryPolicy::new().with_wait(Duration::from_secs(2)))
                .await;
            let took = world.elapsed_ms() - asked;
            match got {
                Err(e)
                    if e.needs_config_change()
                        && !e.is_retryable()
                        && e.to_string().contains("database does not exist")
                        && took < 500 =>
                {
                    world.log(format!("client 2: Z, database 99, after {took}ms: {e}"));
                }
                Err(e) => violation(
                    &world,
                    &history,
                    format!(
                        "client 2: Z on database 99 was refused after {took}ms with {:?}, not at once as a configuration to fix: {e}",
                        e.kind()
                    ),
                ),
                Ok(lock) => {
                    violation(
                        &world,
                        &history,
                        "client 2: Z was granted on database 99, which no node has".into(),
                    );
                    let _ = lock.release().await;
                }
            }
            c.close().await;
        }));
    }
    tasks.push(tokio::task::spawn_local(async move {
        let expect = |what: &str, got: fencelock::Result<fencelock::Lock>, want: ErrorKind| {
            let found = match &got {
                Ok(_) => "a grant".to_string(),
                Err(e) => format!("{:?} ({e})", e.kind()),
            };
            let at = world.elapsed_ms();
            if !matches!(&got, Err(e) if e.kind() == want) {
                let what =
                    format!("client 1: {what} at {at}ms was reported as {found}, not {want:?}");
                violation(&world, &history, what);
            } else {
                world.log(format!("client 1: {what}: {found}"));
            }
        };
        until(&world, t0 + 300).await;
        world.hang(first, true);
        expect(
            &format!("a try for X, held by client 0, with node {first} hung"),
            b.try_acquire("X").await,
            ErrorKind::Contention,
        );
        until(&world, t0 + 700).await;
        world.hang(second, true);
        expect(
            &format!("a try for the free Y with nodes {first} and {second} hung"),
            b.try_acquire("Y").await,
            ErrorKind::Unavailable,
        );
        expect(
            &format!("a try for X with nodes {first} and {second} hung"),
            b.try_acquire("X").await,
            ErrorKind::Unavailable,
        );
        b.close().await;
    }));
    tasks
}

/// Overlapping node lists (five nodes): A's list is nodes 0-2, B's is nodes 2-4. A holds `X` on
/// nodes 0 and 1 (a stranger holds node 2's key for a moment). B's first connections: nodes 3
/// and 4 answer at once, node 2 (shared) 300 ms later, within half B's node timeout. B must
/// not count its own two nodes before the shared one shows A's node set.
pub(super) fn node_set_first(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Tasks {
    let (Some((a, sa)), Some((b, sb))) = (
        scripted_client(&world, &urls[0..3], 0, 4000, 200),
        scripted_client(&world, &urls[2..5], 1, 4000, 1000),
    ) else {
        return Vec::new();
    };
    let t0 = world.rng(|r| r.i64(50..300));
    let slow = world.rng(|r| r.u64(200..450));
    vec![tokio::task::spawn_local(async move {
        until(&world, t0).await;
        world.stranger(2, "X", 100);
        let Some((g, lock)) = take(&world, &history, &a, &sa, "X").await else {
            world.log("client 0: X was refused; the scenario is void");
            return;
        };
        until(&world, t0 + 400).await;
        // Node 2 holds what client 1 sends it for `slow` ms (as a node paused that long would).
        world.client_delay.borrow_mut().insert((2, 1), slow);
        world.log(format!("fault: node 2 answers client 1 {slow}ms late"));
        {
            let world = world.clone();
            tokio::task::spawn_local(async move {
                tokio::time::sleep(Duration::from_millis(slow)).await;
                world.client_delay.borrow_mut().clear();
            });
        }
        if let Some((gb, lb)) = take(&world, &history, &b, &sb, "X").await {
            give_back(&world, &history, gb, lb).await;
        }
        until(&world, t0 + 2000).await;
        give_back(&world, &history, g, lock).await;
        a.close().await;
        b.close().await;
    })]
}

/// How many locks `many_locks` holds.
const MANY: usize = 150;

/// One client holds `MANY` locks (TTL 1 s), auto-extended, for 3 s, on nodes 20 ms away (each
/// message, not each command: a pipeline costs one trip); 1.5 s in, every node's script cache
/// is flushed. No lock may be lost: the extension engine must send one pipeline per batch, not
/// one round per lock, and a batch that meets NOSCRIPT loads its scripts again.
pub(super) fn many_locks(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Tasks {
    let Some((client, setup)) = scripted_client(&world, urls, 0, 1000, 400) else {
        return Vec::new();
    };
    // Its connections are set up first (a dozen messages each), by a lock taken and released.
    let ready: Rc<Cell<i64>> = Rc::new(Cell::new(i64::MAX));
    for n in &world.nodes {
        let mut n = n.borrow_mut();
        n.delay_ms = (0, 0);
        n.latency_ms = 20;
    }
    world.log(format!(
        "client 0 takes {MANY} locks; every message to a node takes 20ms; every node's script cache is flushed 1.5 s in"
    ));
    let client = Rc::new(client);
    let lost = Rc::new(Cell::new(0usize));
    let mut tasks = Vec::new();
    {
        let (world, history, client, setup, ready) = (
            world.clone(),
            history.clone(),
            client.clone(),
            setup.clone(),
            ready.clone(),
        );
        tasks.push(tokio::task::spawn_local(async move {
            super::take_once(&world, &history, &client, &setup, "warm").await;
            ready.set(world.elapsed_ms());
            // SCRIPT FLUSH on every node while the locks are held: the batches must load
            // their scripts again, not lose every lock.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            for i in 0..world.nodes.len() {
                world.by_hand(i, &["SCRIPT", "FLUSH"]);
            }
            world.log("fault: SCRIPT FLUSH on every node");
        }));
    }
    for k in 0..MANY {
        let (world, history, client, setup, lost, ready) = (
            world.clone(),
            history.clone(),
            client.clone(),
            setup.clone(),
            lost.clone(),
            ready.clone(),
        );
        tasks.push(tokio::task::spawn_local(async move {
            let start = super::set_by(&ready).await;
            let resource = format!("m{k}");
            let Some((g, lock)) = take(&world, &history, &client, &setup, &resource).await else {
                violation(
                    &world,
                    &history,
                    format!("client 0: {resource} was refused with no other client and no fault"),
                );
                return;
            };
            let guard = lock.auto_extend(AutoExtend::new());
            let hold = start + 3000 - world.elapsed_ms();
            if hold_watching(&world, &history, g, &guard, hold.max(0) as u64).await {
                lost.set(lost.get() + 1);
                if lost.get() == 1 {
                    let at = world.elapsed_ms();
                    let what = format!(
                        "client 0: the lost signal of {resource} fired at {at}ms with every node up: the extensions of {MANY} locks did not keep up"
                    );
                    violation(&world, &history, what);
                }
            }
            let _ = guard.release().await;
        }));
    }
    tasks
}

/// The largest fencing token a fenced storage holds (i64::MAX).
const TOKEN_MAX: u64 = i64::MAX as u64;

/// The fence counter of node `i` as it stores it (`None`: none).
fn counter_of(world: &World, i: usize) -> Option<String> {
    world.get(i, fencelock::protocol::FENCE_COUNTER_KEY)
}

/// Every node's fence counter fits the fences' range: a violation for each that does not.
fn counters_in_range(world: &World, history: &RefCell<History>, when: &str) {
    for i in 0..world.nodes.len() {
        if let Some(c) = counter_of(world, i) {
            if c.parse::<u64>().map_or(true, |v| v > TOKEN_MAX) {
                let what = format!(
                    "node {i}'s fence counter is {c} {when}: past i64::MAX, the largest token a fenced storage holds"
                );
                violation(world, history, what);
            }
        }
    }
}

/// The end of the tokens' range (fencing on, quarantine off). F's first lock starts the epoch.
/// A program that runs the grant script by hand proposes a token past i64::MAX to one node,
/// which must refuse it. An operator reseeds the counters to i64::MAX − 3. P, whose clock reads
/// some 294,000 years ahead (every proposal from it would be past the range), must still be
/// issued a token (derived from the counters). F is then issued i64::MAX − 1 and i64::MAX, and
/// its next attempt must be refused as the end of the range (a configuration error that says
/// what to do), not as unavailable nodes, nor issued a token that no fence can hold.
pub(super) fn range_end(world: Rc<World>, history: Rc<RefCell<History>>, urls: &[String]) -> Tasks {
    let past = 9_300_000_000_000_000 - crate::net::EPOCH_MS;
    let (Some((f, sf)), Some((p, sp)), Some((o, _))) = (
        super::scripted_client_with(&world, urls, 0, (2000, 500), false, 0),
        super::scripted_client_with(&world, urls, 1, (2000, 500), false, past),
        super::scripted_client_with(&world, urls, 2, (2000, 500), false, 0),
    ) else {
        return Vec::new();
    };
    let bad = world.rng(|r| r.usize(..3));
    let start = world.rng(|r| r.i64(50..200));
    let mut tasks = Vec::new();
    // P's clock is its own: its task reads it.
    let (ready, done): (Rc<Cell<i64>>, Rc<Cell<i64>>) =
        (Rc::new(Cell::new(i64::MAX)), Rc::new(Cell::new(i64::MAX)));
    {
        let (world, history, ready, done) =
            (world.clone(), history.clone(), ready.clone(), done.clone());
        tasks.push(tokio::task::spawn_local(async move {
            until(&world, start).await;
            super::take_once(&world, &history, &f, &sf, "X").await;
            // A grant script run by hand with a proposal past the range.
            let script = fencelock::protocol::ACQUIRE_FENCED_SCRIPT;
            let reply = world.by_hand(
                bad,
                &[
                    "EVAL",
                    script,
                    "3",
                    "Z",
                    fencelock::protocol::FENCE_COUNTER_KEY,
                    "fencelock:fence:Z",
                    "by-hand",
                    "2000",
                    "9223372036854775900",
                ],
            );
            world.log(format!(
                "fault: a program proposes 9223372036854775900 to node {bad} by hand: {reply:?}"
            ));
            counters_in_range(&world, &history, "after a proposal past the range");
            match o.reseed_fence(TOKEN_MAX - 3).await {
                Ok(_) => world.log(format!("client 2: reseeded above {}", TOKEN_MAX - 3)),
                Err(e) => {
                    let what = format!("client 2: the reseed above i64::MAX - 3 failed: {e}");
                    violation(&world, &history, what);
                }
            }
            o.close().await;
            ready.set(world.elapsed_ms());
            super::set_by(&done).await;
            for _ in 0..2 {
                match take_or_error(&world, &history, &f, &sf, "X").await {
                    Ok(g) => world.log(format!("client 0: X granted (grant {g})")),
                    Err(e) => {
                        let what = format!(
                            "client 0: X was refused below the range's end: {:?} ({e})",
                            e.kind()
                        );
                        violation(&world, &history, what);
                    }
                }
            }
            match take_or_error(&world, &history, &f, &sf, "X").await {
                Err(e) if e.kind() == ErrorKind::InvalidConfig => {
                    world.log(format!("client 0: at the range's end: {e}"));
                }
                Err(e) => {
                    let what = format!(
                        "client 0: at the range's end X was refused as {:?}, not as the end of the range: {e}",
                        e.kind()
                    );
                    violation(&world, &history, what);
                }
                Ok(_) => {
                    let what = "client 0: X was granted with every counter at i64::MAX".to_string();
                    violation(&world, &history, what);
                }
            }
            counters_in_range(&world, &history, "at the end");
            f.close().await;
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        let wall = sp.wall.clone();
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            wall,
            async move {
                super::set_by(&ready).await;
                if let Err(e) = take_or_error(&world, &history, &p, &sp, "X").await {
                    let what = format!(
                        "client 1 (its clock past the range): X was refused with counters below it: {:?} ({e})",
                        e.kind()
                    );
                    violation(&world, &history, what);
                }
                p.close().await;
                done.set(world.elapsed_ms());
            },
        )));
    }
    tasks
}

/// Takes `resource` once and releases it (a plain lock), recording the grant; the error when
/// refused.
async fn take_or_error(
    world: &World,
    history: &RefCell<History>,
    client: &fencelock::Client,
    s: &super::Setup,
    resource: &str,
) -> fencelock::Result<usize> {
    let (g, lock) = super::take_or_error(world, history, client, s, resource).await?;
    give_back(world, history, g, lock).await;
    Ok(g)
}

/// A node restarted without its counter is not a trusted read (fencing on, quarantine off): A
/// takes `R` on every node, then three times more while node 2 hangs (nodes 0 and 1 count,
/// node 2 keeps the first token); node 2 answers again, node 0 restarts empty. An operator
/// reseeds the counters above A's first token (the fenced storage's last, which lags the last
/// token issued): node 0 must stay without a counter. Node 1 hangs. B, its clock a minute
/// behind (its proposal below every counter), tries `R` with nodes 0 and 2 only: one trusted
/// read is not a quorum, so it must be refused, never issued a token at or below A's last.
pub(super) fn untrusted_read(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Tasks {
    let (Some((a, sa)), Some((b, sb)), Some((o, _))) = (
        super::scripted_client_with(&world, urls, 0, (2000, 200), false, 0),
        super::scripted_client_with(&world, urls, 1, (2000, 200), false, -60_000),
        super::scripted_client_with(&world, urls, 2, (2000, 200), false, 0),
    ) else {
        return Vec::new();
    };
    let t0 = world.rng(|r| r.i64(50..200));
    let ready = Rc::new(Cell::new(i64::MAX));
    let mut tasks = Vec::new();
    {
        let (world, history, ready) = (world.clone(), history.clone(), ready.clone());
        tasks.push(tokio::task::spawn_local(async move {
            until(&world, t0).await;
            let Some(first) = super::take_once(&world, &history, &a, &sa, "R").await else {
                let what = "client 0: R was refused with every node up".to_string();
                violation(&world, &history, what);
                ready.set(world.elapsed_ms());
                return;
            };
            let first = history.borrow().grants[first].token.unwrap_or(0);
            world.hang(2, true);
            for _ in 0..3 {
                super::take_once(&world, &history, &a, &sa, "R").await;
            }
            a.close().await;
            world.hang(2, false);
            tokio::time::sleep(Duration::from_millis(world.rng(|r| r.u64(50..300)))).await;
            world.restart(0, crate::node::Persistence::None);
            match o.reseed_fence(first).await {
                Ok(_) => world.log(format!("client 2: reseeded above {first}")),
                Err(e) => world.log(format!("client 2: the reseed above {first} failed: {e}")),
            }
            o.close().await;
            if let Some(c) = counter_of(&world, 0) {
                let what = format!("the reseed above {first} created node 0's counter ({c}), which it lost with its data");
                violation(&world, &history, what);
            }
            world.hang(1, true);
            ready.set(world.elapsed_ms());
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        let wall = sb.wall.clone();
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            wall,
            async move {
                // B connects early (its first lock, on another resource).
                until(&world, t0 - 40).await;
                super::take_once(&world, &history, &b, &sb, "other").await;
                super::set_by(&ready).await;
                // Its connection to node 0 broke with the restart: a first request finds that
                // out, the next one connects anew.
                super::take_once(&world, &history, &b, &sb, "other").await;
                super::take_once(&world, &history, &b, &sb, "R").await;
                b.close().await;
            },
        )));
    }
    tasks
}

/// How many leaders `terms_past_ten_to_the_18` elects, one after another.
const LEADERS: usize = 100;

/// An election's terms cross 10^18, where a double (a sorted set's score) tells apart only
/// terms 128 apart (fencing on). An operator reseeds the counters just below 10^18; then E
/// campaigns and resigns `LEADERS` times, so the log (64 entries per node) is full of terms
/// that share a score when they cross from 18 digits to 19. An observer, on a client of its
/// own, must report E's last leader: the log drops its oldest terms, never its newest.
pub(super) fn terms_past_ten_to_the_18(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Tasks {
    let (Some((e, se)), Some((o, _))) = (
        super::scripted_client_with(&world, urls, 0, (2000, 200), false, 0),
        super::scripted_client_with(&world, urls, 1, (2000, 200), false, 0),
    ) else {
        return Vec::new();
    };
    let below = 1_000_000_000_000_000_000 - world.rng(|r| r.u64(60..90));
    let urls = urls.to_vec();
    vec![tokio::task::spawn_local(async move {
        match o.reseed_fence(below).await {
            Ok(_) => world.log(format!("client 1: reseeded above {below}")),
            Err(e) => {
                let what = format!("client 1: the reseed above {below} failed: {e}");
                violation(&world, &history, what);
                return;
            }
        }
        o.close().await;
        let observer = super::observe(world.clone(), history.clone(), urls);
        let Ok(election) = e.election("e") else {
            return;
        };
        let mut last = None;
        for k in 0..LEADERS {
            let value = format!("e#{k}");
            let started = world.elapsed_ms();
            let won = election.campaign(&value).await;
            let term = won.as_ref().ok().map(|l| l.term());
            history.borrow_mut().campaigns.push(super::Campaign {
                client: 0,
                value: value.clone(),
                ended: world.elapsed_ms(),
                term,
                gone_everywhere: term.is_some()
                    || world
                        .holding_member("fencelock:leaders:e", &value)
                        .is_empty(),
                left_on_quiet: Vec::new(),
            });
            let Ok(leader) = won else {
                continue;
            };
            let g = super::record(
                &world,
                &history,
                &se,
                Kind::Leader,
                "election",
                (Some(leader.term()), leader.validity_deadline()),
                started,
                (None, Vec::new()),
            );
            last = Some((leader.term(), value));
            // The last leader leads long enough for the observer's reads.
            let lead = if k + 1 == LEADERS { 1500 } else { 5 };
            tokio::time::sleep(Duration::from_millis(lead)).await;
            history.borrow_mut().grants[g].ended = Some(world.elapsed_ms());
            let _ = leader.resign().await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Some(o) = observer {
            o.abort();
        }
        e.close().await;
        let Some((term, value)) = last else {
            violation(&world, &history, "client 0 never led".to_string());
            return;
        };
        let reported = history.borrow().reports.iter().any(|(_, t, _)| *t == term);
        if !reported {
            let what = format!(
                "the observer never reported the last leader, {value} of term {term}, which led for 1.5 s"
            );
            violation(&world, &history, what);
        }
    })]
}

/// A key deleted between an attempt's two rounds (fencing on, quarantine off). Exclusion is not
/// claimed when keys are deleted behind the library's back (an operator's DEL, an eviction
/// under a volatile policy); what is checked is that a grant is never returned for keys that
/// are not on a quorum of nodes when it returns. W sets every counter; a stranger holds node
/// 2's `X`; A, its clock 5 s behind the counters (its token is derived, then written back), is
/// granted `X` by nodes 0 and 1 (node 1 answers it 100 ms late); between A's grant round and
/// its write-back, `X` is deleted on node 1 and B takes nodes 1 and 2. A's write-back on node 1
/// finds B's key there: A must be refused.
pub(super) fn deleted_between_rounds(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Tasks {
    let (Some((w, sw)), Some((a, sa)), Some((b, sb))) = (
        super::scripted_client_with(&world, urls, 0, (2000, 980), false, 0),
        super::scripted_client_with(&world, urls, 1, (2000, 980), false, -5000),
        super::scripted_client_with(&world, urls, 2, (2000, 980), false, 0),
    ) else {
        return Vec::new();
    };
    let t1 = 300 + world.rng(|r| r.i64(0..200));
    let late = world.rng(|r| r.u64(80..150));
    let mut tasks = Vec::new();
    {
        let (world, history) = (world.clone(), history.clone());
        tasks.push(tokio::task::spawn_local(async move {
            until(&world, world.rng(|r| r.i64(0..100))).await;
            super::take_once(&world, &history, &w, &sw, "w").await;
            w.close().await;
        }));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        let wall = sa.wall.clone();
        tasks.push(tokio::task::spawn_local(crate::clock::WallOffset::new(
            wall,
            async move {
                // A connects early (a lock of another resource).
                until(&world, 200).await;
                super::take_once(&world, &history, &a, &sa, "a").await;
                until(&world, t1 - 5).await;
                // Gone before B comes (after A's grant round, before its write-back lands).
                world.stranger(2, "X", late + late / 4 + 5);
                world.client_delay.borrow_mut().insert((1, 1), late);
                until(&world, t1).await;
                if let Some((g, lock)) = take(&world, &history, &a, &sa, "X").await {
                    let owner = history.borrow().grants[g].owner.clone().unwrap_or_default();
                    let on: Vec<usize> = (0..world.nodes.len())
                        .filter(|&i| world.get(i, "X").as_deref() == Some(owner.as_str()))
                        .collect();
                    if on.len() < 2 {
                        let what = format!(
                            "client 1 was granted X at {}ms while its key was on nodes {on:?} only: its write-back counted a node where another client held X",
                            world.elapsed_ms()
                        );
                        violation(&world, &history, what);
                    }
                    give_back(&world, &history, g, lock).await;
                }
                world.client_delay.borrow_mut().clear();
                a.close().await;
            },
        )));
    }
    {
        let (world, history) = (world.clone(), history.clone());
        tasks.push(tokio::task::spawn_local(async move {
            until(&world, 200).await;
            super::take_once(&world, &history, &b, &sb, "b").await;
            // After A's grant round reached node 1, before its write-back does.
            until(&world, t1 + late as i64 + late as i64 / 2).await;
            let reply = world.by_hand(1, &["DEL", "X"]);
            world.log(format!(
                "fault: X deleted on node 1 (an operator's DEL): {reply:?}"
            ));
            if let Some((g, lock)) = take(&world, &history, &b, &sb, "X").await {
                tokio::time::sleep(Duration::from_millis(300)).await;
                give_back(&world, &history, g, lock).await;
            }
            b.close().await;
        }));
    }
    tasks
}

/// An evicting node (issue 29 item 5). Node E runs with an evicting `maxmemory-policy` and,
/// under memory pressure, drops A's key of `X` while A holds it. B, whose TTL is shorter, must
/// not be granted `X`: the two other nodes still hold it. And each client's log must warn of
/// node E once, and of no other node, though both reconnect to E after its connections break.
pub(super) fn evicting(world: Rc<World>, history: Rc<RefCell<History>>, urls: &[String]) -> Tasks {
    let e = world.rng(|r| r.usize(..3));
    let policy = ["allkeys-lru", "allkeys-random", "volatile-ttl"][world.rng(|r| r.usize(..3))];
    world.by_hand(e, &["CONFIG", "SET", "maxmemory-policy", policy]);
    world.log(format!("node {e} runs with maxmemory-policy {policy}"));
    let (Some((a, sa)), Some((b, sb))) = (
        scripted_client(&world, urls, 0, 3000, 100),
        scripted_client(&world, urls, 1, 1000, 100),
    ) else {
        return Vec::new();
    };
    let t0 = world.rng(|r| r.i64(50..300));
    vec![tokio::task::spawn_local(async move {
        until(&world, t0).await;
        let Some((g, lock)) = take(&world, &history, &a, &sa, "X").await else {
            world.log("client 0: X was refused; the scenario is void");
            return;
        };
        until(&world, t0 + 200).await;
        world.evict(e, "X");
        if let Some((gb, lb)) = take(&world, &history, &b, &sb, "X").await {
            give_back(&world, &history, gb, lb).await;
        }
        world.cut(e);
        world.log(format!("fault: node {e}'s connections break"));
        until(&world, t0 + 500).await;
        give_back(&world, &history, g, lock).await;
        for (client, s) in [(&a, &sa), (&b, &sb)] {
            if let Some((g, lock)) = take(&world, &history, client, s, "Y").await {
                give_back(&world, &history, g, lock).await;
            }
        }
        until(&world, t0 + 1500).await;
        let warnings = crate::logs::warnings();
        let evicting: Vec<&String> = warnings
            .iter()
            .filter(|w| w.contains("maxmemory-policy"))
            .collect();
        for w in &evicting {
            world.log(format!("client log: {w}"));
        }
        let name = format!("sim{e}:6379");
        let of_e = evicting.iter().filter(|w| w.contains(&name)).count();
        if of_e != 2 || evicting.len() != of_e {
            violation(
                &world,
                &history,
                format!(
                    "the clients' logs warned {of_e} times of node {e}'s maxmemory-policy {policy} (two clients: twice) and {} times of other nodes (never): {evicting:?}",
                    evicting.len() - of_e
                ),
            );
        }
        a.close().await;
        b.close().await;
    })]
}
