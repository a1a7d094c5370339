//! One seeded run: several real `fencelock::Client`s (their own TTLs, node timeouts and
//! fencing) take and release locks on simulated nodes while a fault task breaks things, and a
//! checker judges the history. A run is a function of its seed and options.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::{Duration, Instant as StdInstant};

use fencelock::{Client, Config};

use crate::net::{Net, World, EPOCH_MS};
use crate::node::Persistence;

/// Which faults a run may inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Faults {
    /// None: the protocol alone, with seeded delays.
    None,
    /// What the library claims to survive on today's main: restarts with persistence and
    /// without (with the quarantine on), script cache flushes, broken connections, partitions,
    /// late replies.
    Claimed,
    /// `All` without FLUSHALL: the amnesia paths (issue 27 items 1 and 3) without item 4, whose
    /// hole is found at once and would hide them.
    Amnesia,
    /// Everything, known holes included (FLUSHALL of a majority while a lock is held, issue 27
    /// item 4; several nodes restarting empty within a TTL; short TTLs beside long ones).
    All,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub nodes: usize,
    pub clients: usize,
    /// Virtual run length.
    pub duration: Duration,
    pub faults: Faults,
    /// Keep every command and reply in the trace.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            nodes: 3,
            clients: 3,
            duration: Duration::from_secs(6),
            faults: Faults::Claimed,
            verbose: false,
        }
    }
}

/// A grant as the client saw it, in virtual ms since the run began.
#[derive(Clone, Debug)]
struct Grant {
    client: usize,
    /// Exclusion is claimed across restarts without persistence only with the quarantine on.
    quarantine: bool,
    resource: String,
    token: Option<u64>,
    /// When the attempt began.
    started: i64,
    granted: i64,
    valid_until: i64,
    /// When the holder stopped acting (released, or its validity ran out first).
    ended: Option<i64>,
}

#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub violations: Vec<String>,
    pub trace: Vec<String>,
    pub grants: usize,
    pub commands: u64,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Runs seed `seed` on this thread (a fresh current-thread runtime on tokio's paused clock).
pub fn run(seed: u64, opts: &Options) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let local = tokio::task::LocalSet::new();
    // The library's jitter and retry delays draw from fastrand's thread-local generator.
    fastrand::seed(seed);
    local.block_on(&rt, async move {
        let _clock = crate::clock::activate(EPOCH_MS);
        let world = World::new(opts.nodes, seed, opts.verbose);
        let (net, accept) = Net::new(world.clone());
        let _seam = fencelock::sim::install(Rc::new(net));
        let acceptor = tokio::task::spawn_local(accept);
        let history: Rc<RefCell<Vec<Grant>>> = Rc::default();
        let end = opts.duration.as_millis() as i64;
        let mut tasks = Vec::new();
        for c in 0..opts.clients {
            // Under every fault, clients with short and long TTLs side by side; under `All`,
            // node timeouts near a short TTL (issue 27 item 1) and the quarantine off for some
            // (issue 27 item 3: the amnesia guard alone).
            let all = matches!(opts.faults, Faults::All | Faults::Amnesia);
            let (ttl, timeout, quarantine, fencing) = world.rng(|r| {
                let ttl = [1000, 2000, 4000][r.usize(..3)];
                let timeout = if all {
                    [50, 500, 980][r.usize(..3)]
                } else {
                    [50, 100, 200][r.usize(..3)]
                };
                (ttl, timeout, !all || r.bool(), r.bool())
            });
            let config = Config::new(world.urls())
                .with_ttl(Duration::from_millis(ttl))
                .with_node_timeout(Duration::from_millis(timeout))
                .with_quarantine(quarantine)
                .with_fencing(fencing);
            world.log(format!(
                "client {c}: ttl {ttl}ms, node timeout {timeout}ms, fencing {}, quarantine {}",
                if fencing { "on" } else { "off" },
                if quarantine { "on" } else { "off" }
            ));
            let client = match Client::new(config) {
                Ok(client) => client,
                Err(e) => {
                    world.log(format!("client {c}: refused configuration: {e}"));
                    continue;
                }
            };
            tasks.push(tokio::task::spawn_local(client_loop(
                world.clone(),
                history.clone(),
                client,
                c,
                ttl,
                quarantine,
                end,
            )));
        }
        if opts.faults != Faults::None {
            tasks.push(tokio::task::spawn_local(fault_loop(world.clone(), opts.faults, end)));
        }
        let mut broken = Vec::new();
        for t in tasks {
            if let Err(e) = t.await {
                broken.push(format!("the simulation itself failed (a bug of the harness): {e}"));
            }
        }
        acceptor.abort();
        let grants = history.borrow().clone();
        let mut violations = check(&grants);
        violations.extend(broken);
        let mut trace = world.trace.borrow().clone();
        for g in &grants {
            trace.push(format!(
                "grant: client {} {} token {:?} attempt {}ms granted {}ms valid until {}ms ended {:?}",
                g.client, g.resource, g.token, g.started, g.granted, g.valid_until, g.ended
            ));
        }
        Outcome {
            seed,
            violations,
            trace,
            grants: grants.len(),
            commands: world.commands.get(),
        }
    })
}

fn virtual_ms(world: &World, at: StdInstant) -> i64 {
    let now_std = StdInstant::now();
    let now = world.elapsed_ms();
    if at >= now_std {
        now + at.duration_since(now_std).as_millis() as i64
    } else {
        now - now_std.duration_since(at).as_millis() as i64
    }
}

async fn client_loop(
    world: Rc<World>,
    history: Rc<RefCell<Vec<Grant>>>,
    client: Client,
    c: usize,
    ttl: u64,
    quarantine: bool,
    end: i64,
) {
    while world.elapsed_ms() < end {
        let pause = world.rng(|r| r.u64(0..100));
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let resource = world.rng(|r| format!("r{}", r.usize(..2)));
        let started = world.elapsed_ms();
        let attempt = client.try_acquire(&resource).await;
        let lock = match attempt {
            Ok(lock) => lock,
            Err(e) => {
                if world.verbose {
                    world.log(format!("client {c}: {resource} refused: {e}"));
                }
                continue;
            }
        };
        let granted = world.elapsed_ms();
        let valid_until = virtual_ms(&world, lock.validity_deadline());
        let token = lock.fencing_token();
        world.log(format!(
            "client {c}: granted {resource} token {token:?} valid until {valid_until}ms"
        ));
        let index = {
            let mut h = history.borrow_mut();
            h.push(Grant {
                client: c,
                quarantine,
                resource: resource.clone(),
                token,
                started,
                granted,
                valid_until,
                ended: None,
            });
            h.len() - 1
        };
        // Hold for a while; sometimes past the validity (a paused or slow holder).
        let hold = world.rng(|r| r.u64(0..ttl * 5 / 4));
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let ended = world.elapsed_ms().min(valid_until);
        history.borrow_mut()[index].ended = Some(ended);
        let _ = lock.release().await;
    }
    client.close().await;
}

async fn fault_loop(world: Rc<World>, faults: Faults, end: i64) {
    let n = world.nodes.len();
    let majority = n / 2 + 1;
    // The claim for restarts without persistence: at most one node of a lock's quorum loses
    // its data within the longest TTL (4 s here); `Claimed` keeps such restarts 5 s apart.
    let mut last_amnesia = i64::MIN / 2;
    while world.elapsed_ms() < end {
        let wait = world.rng(|r| r.u64(100..1500));
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let i = world.rng(|r| r.usize(..n));
        let pick = world.rng(|r| r.u32(..100));
        let now_ms = world.elapsed_ms();
        match pick {
            0..=14 if faults != Faults::Claimed || now_ms - last_amnesia >= 5000 => {
                last_amnesia = now_ms;
                world.restart(i, Persistence::None);
            }
            0..=29 => world.restart(i, Persistence::AofAlways),
            30..=44 => {
                let now = world.node_now(i);
                world.nodes[i]
                    .borrow_mut()
                    .node
                    .exec(now, &[b"SCRIPT".to_vec(), b"FLUSH".to_vec()]);
                world.log(format!("fault: node {i} SCRIPT FLUSH"));
            }
            45..=59 => {
                world.cut(i);
                world.log(format!("fault: node {i} connections cut"));
            }
            60..=74 => {
                let ms = world.rng(|r| r.u64(100..2000));
                world.nodes[i].borrow_mut().partitioned = true;
                world.log(format!("fault: node {i} partitioned for {ms}ms"));
                let w = world.clone();
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    w.nodes[i].borrow_mut().partitioned = false;
                    w.log(format!("fault: node {i} partition heals"));
                });
            }
            75..=84 => {
                let hi = world.rng(|r| r.u64(5..400));
                world.nodes[i].borrow_mut().delay_ms = (0, hi);
                world.log(format!("fault: node {i} replies late, up to {hi}ms"));
            }
            // Issue 27 item 4: FLUSHALL on a majority while locks are held.
            85..=92 if faults == Faults::All => {
                for k in 0..majority {
                    let j = (i + k) % n;
                    let now = world.node_now(j);
                    world.nodes[j]
                        .borrow_mut()
                        .node
                        .exec(now, &[b"FLUSHALL".to_vec()]);
                    world.log(format!("fault: node {j} FLUSHALL"));
                }
            }
            // Issue 27 item 3: a second node loses its data within a TTL of the first.
            93..=99 if faults != Faults::Claimed => {
                world.restart(i, Persistence::None);
                let gap = world.rng(|r| r.u64(0..1000));
                tokio::time::sleep(Duration::from_millis(gap)).await;
                world.restart((i + 1) % n, Persistence::None);
            }
            _ => world.nodes[i].borrow_mut().delay_ms = (0, 2),
        }
    }
}

/// Judges a history: two holders of one resource at once, and a later grant (its attempt began
/// after an earlier holder stopped) with a token not above the earlier one's.
fn check(grants: &[Grant]) -> Vec<String> {
    let mut out = Vec::new();
    for (a_i, a) in grants.iter().enumerate() {
        let a_end = a.ended.unwrap_or(a.valid_until).min(a.valid_until);
        for b in grants.iter().skip(a_i + 1) {
            if a.resource != b.resource {
                continue;
            }
            let b_end = b.ended.unwrap_or(b.valid_until).min(b.valid_until);
            if a.granted < b_end && b.granted < a_end && a.quarantine && b.quarantine {
                out.push(format!(
                    "two holders of {}: client {} (granted {}ms, valid to {}ms, token {:?}) and client {} (granted {}ms, valid to {}ms, token {:?})",
                    a.resource, a.client, a.granted, a_end, a.token, b.client, b.granted, b_end, b.token
                ));
            }
            for (first, first_end, second) in [(a, a_end, b), (b, b_end, a)] {
                if first_end <= second.started {
                    if let (Some(t1), Some(t2)) = (first.token, second.token) {
                        if t2 <= t1 {
                            out.push(format!(
                                "token order on {}: client {} (token {t1}, ended {first_end}ms) then client {} (attempt {}ms) got token {t2}",
                                first.resource, first.client, second.client, second.started
                            ));
                        }
                    }
                }
            }
        }
    }
    out
}

/// The report of a failing seed: its violations, its trace and the command that reruns it.
pub fn report(outcome: &Outcome, opts: &Options) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "seed {} FAILED: {} violation(s)",
        outcome.seed,
        outcome.violations.len()
    );
    for v in &outcome.violations {
        let _ = writeln!(s, "  {v}");
    }
    let _ = writeln!(s, "trace:");
    for line in &outcome.trace {
        let _ = writeln!(s, "  {line}");
    }
    let _ = writeln!(
        s,
        "rerun: ./dev sim --seed {} --faults {} --duration {}s --verbose",
        outcome.seed,
        match opts.faults {
            Faults::None => "none",
            Faults::Claimed => "claimed",
            Faults::Amnesia => "amnesia",
            Faults::All => "all",
        },
        opts.duration.as_secs()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(client: usize, token: Option<u64>, started: i64, granted: i64, ended: i64) -> Grant {
        Grant {
            client,
            quarantine: true,
            resource: "r".into(),
            token,
            started,
            granted,
            valid_until: ended + 100,
            ended: Some(ended),
        }
    }

    #[test]
    fn the_checker_sees_two_holders_and_a_smaller_later_token() {
        // In turn, tokens rising: nothing to report.
        let fine = [grant(0, Some(5), 0, 1, 10), grant(1, Some(6), 10, 11, 20)];
        assert!(check(&fine).is_empty());
        // Overlapping validity.
        let two = [grant(0, None, 0, 1, 10), grant(1, None, 5, 6, 20)];
        assert_eq!(check(&two).len(), 1, "{:?}", check(&two));
        assert!(check(&two)[0].starts_with("two holders of r"));
        // A later attempt, a smaller token.
        let order = [grant(0, Some(9), 0, 1, 10), grant(1, Some(7), 12, 13, 20)];
        assert_eq!(check(&order).len(), 1);
        assert!(check(&order)[0].starts_with("token order on r"));
        // Exclusion is not judged for a client without the quarantine.
        let mut off = two.clone();
        off[1].quarantine = false;
        assert!(check(&off).is_empty());
    }
}
