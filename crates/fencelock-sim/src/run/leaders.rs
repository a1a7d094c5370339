//! An election across restarts: the log's kept connections, and an observer that must not
//! count a node that lost its entries.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use fencelock::{Client, Config};

use super::{until, violation, Campaign, History, Kind, Setup, World};
use crate::node::Persistence;

type Tasks = Vec<tokio::task::JoinHandle<()>>;

/// A client of this scenario: fencing and the quarantine both on (terms are fencing tokens),
/// TTL 1 s, node timeout 200 ms.
fn client(world: &World, urls: &[String], c: usize) -> Option<(Client, Setup)> {
    let list: Vec<String> = urls.iter().map(|u| super::as_client(u, c)).collect();
    let config = Config::new(list)
        .with_ttl(Duration::from_millis(1000))
        .with_node_timeout(Duration::from_millis(200))
        .with_fencing(true);
    world.log(format!(
        "client {c}: ttl 1000ms, node timeout 200ms, fencing on, quarantine on"
    ));
    let client = Client::new(config).ok()?;
    let setup = Setup {
        c,
        ttl: 1000,
        quarantine: true,
        fencing: true,
        wall: Rc::new(Cell::new(0)),
        paused: Rc::new(Cell::new((i64::MAX, i64::MIN))),
        plain_only: true,
        quiet_gaps: false,
    };
    Some((client, setup))
}

/// Ends the last grant recorded (a leader about to resign) now.
fn end_last_grant(world: &World, history: &RefCell<History>) {
    let mut h = history.borrow_mut();
    if let Some(g) = h.grants.last_mut() {
        g.ended = Some(world.elapsed_ms());
    }
}

/// Campaigns for `value` once and records it (and its lead, if it won).
async fn campaign(
    world: &World,
    history: &RefCell<History>,
    (election, s): (&fencelock::Election, &Setup),
    value: &str,
) -> fencelock::Result<fencelock::Leadership> {
    let started = world.elapsed_ms();
    let won = election.campaign(value).await;
    let term = won.as_ref().ok().map(|l| l.term());
    history.borrow_mut().campaigns.push(Campaign {
        client: s.c,
        value: value.to_string(),
        ended: world.elapsed_ms(),
        term,
        gone_everywhere: term.is_some()
            || world
                .holding_member(&fencelock::protocol::leaders_key("e"), value)
                .is_empty(),
        left_on_quiet: Vec::new(),
    });
    if let Ok(leader) = &won {
        super::record(
            world,
            history,
            s,
            Kind::Leader,
            "election",
            (Some(leader.term()), leader.validity_deadline()),
            started,
            (None, Vec::new()),
        );
    }
    won
}

/// Issue 35 item 3 and the log's kept connections, on the real client: nodes 0 and 1 keep no
/// data over a restart, node 2 syncs every write. An observer (its own client) reads once with
/// every node trusted, then its process is paused. Node 2 stops; E wins term 1 (`l1`) on nodes
/// 0 and 1, leads a moment and resigns. Node 1 restarts empty, node 2 comes back; once node 1
/// is out of quarantine and seeded again, node 0 stops and E campaigns for `l2`, which nodes 1
/// and 2 must take: E's first campaign whose lock is granted must append on a new connection
/// to node 1 (the kept one broke with the restart). The observer then runs again and node 0
/// comes back: it must report `l1` before `l2`. No node that answers it meanwhile holds `l1`'s
/// entry: counting node 1 (restarted empty) would report `l2` and skip `l1` for good.
pub(super) fn leaders_restart(
    world: Rc<World>,
    history: Rc<RefCell<History>>,
    urls: &[String],
) -> Tasks {
    let (Some((e, se)), Some((o, _))) = (client(&world, urls, 0), client(&world, urls, 3)) else {
        return Vec::new();
    };
    world.nodes[2]
        .borrow_mut()
        .node
        .set_persistence(Persistence::AofAlways);
    world.log("node 2 syncs every write (appendfsync always)");
    let t0 = world.rng(|r| r.i64(50..200));
    let lead = world.rng(|r| r.u64(5..60));
    let ready = Rc::new(Cell::new(i64::MAX));
    // The observer runs until E's task ends it (the run waits for the tasks it is given).
    let observer = {
        let (world, history, ready) = (world.clone(), history.clone(), ready.clone());
        tokio::task::spawn_local(async move {
            let Ok(election) = o.election("e") else {
                ready.set(i64::MIN);
                return;
            };
            let mut observer = election.observe();
            until(&world, t0).await;
            // Its first read, every node trusted; then the process is paused until `l2` leads.
            let _ = tokio::time::timeout(Duration::from_millis(150), observer.next()).await;
            world.frozen.borrow_mut().insert(3);
            world.log("client 3 (the observer) is paused");
            ready.set(world.elapsed_ms());
            loop {
                let leader = observer.next().await;
                let at = world.elapsed_ms();
                history
                    .borrow_mut()
                    .reports
                    .push((at, leader.term(), leader.value().to_string()));
            }
        })
    };
    vec![tokio::task::spawn_local(async move {
        let Ok(election) = e.election("e") else {
            observer.abort();
            return;
        };
        // Connections, and every node's counter (an epoch starts on all of them).
        if let Ok(lock) = e.try_acquire("warm").await {
            let _ = lock.release().await;
        }
        super::set_by(&ready).await;
        world.hang(2, true);
        let l1 = match campaign(&world, &history, (&election, &se), "l1").await {
            Ok(l1) => l1,
            Err(err) => {
                world.log(format!(
                    "client 0: l1's campaign failed ({err}); the scenario is void"
                ));
                world.hang(2, false);
                world.frozen.borrow_mut().remove(&3);
                observer.abort();
                return;
            }
        };
        tokio::time::sleep(Duration::from_millis(lead)).await;
        end_last_grant(&world, &history);
        let _ = l1.resign().await;
        world.restart(1, Persistence::None);
        world.hang(2, false);
        world.restart(2, Persistence::AofAlways);
        // Node 1 comes back into the quorum once its quarantine ends and a token seeds it.
        let seeded = loop {
            if let Ok(lock) = e.try_acquire("warm").await {
                let _ = lock.release().await;
            }
            let counter = world
                .get(1, fencelock::protocol::FENCE_COUNTER_KEY)
                .is_some();
            let marker = world
                .get(1, fencelock::protocol::NODE_MARKER_KEY)
                .unwrap_or_default();
            if counter && marker.ends_with(" clear") {
                break true;
            }
            if world.elapsed_ms() > t0 + 5000 {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if !seeded {
            world.log("node 1 was not seeded and cleared within 5 s; the scenario is void");
        } else {
            world.log("node 1 is out of quarantine and seeded");
            world.hang(0, true);
            match campaign(&world, &history, (&election, &se), "l2").await {
                Ok(l2) => {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    world.frozen.borrow_mut().remove(&3);
                    world.log("client 3 (the observer) runs again");
                    // Long enough for several of its reads while node 0 is still stopped.
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    world.hang(0, false);
                    tokio::time::sleep(Duration::from_millis(800)).await;
                    end_last_grant(&world, &history);
                    let _ = l2.resign().await;
                }
                Err(err) => {
                    let what = format!(
                        "client 0: l2's campaign failed with nodes 1 and 2 up: {err} (the log's connection to node 1 broke with its restart and must be replaced, not fail the append)"
                    );
                    violation(&world, &history, what);
                }
            }
        }
        world.hang(0, false);
        world.frozen.borrow_mut().remove(&3);
        tokio::time::sleep(Duration::from_millis(500)).await;
        observer.abort();
        e.close().await;
    })]
}
