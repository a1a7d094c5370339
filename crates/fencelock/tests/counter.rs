//! The node's fence counter, shared by every resource, on real nodes (issue 27, items 3 and 7):
//! a node that lost its counter and is seeded by another resource's grant, and tokens at the
//! end of the range the fences store.
//!
//! The key names are written out ("fencelock:fence", the node counter): they are the protocol
//! other clients read.

use std::time::Duration;

use fencelock::{Client, Config, ErrorKind};
use fencelock_testkit::{RedisNode, RedisNodes};

const COUNTER: &str = "fencelock:fence";

fn fenced(nodes: &RedisNodes) -> Client {
    Client::new(
        Config::new(nodes.urls())
            .with_fencing(true)
            .with_quarantine(false)
            .with_ttl(Duration::from_secs(2))
            .with_node_timeout(Duration::from_millis(300)),
    )
    .unwrap()
}

fn get(node: &RedisNode, key: &str) -> Option<String> {
    let v = node.cli(&["GET", key]).unwrap();
    (v != "(nil)").then_some(v)
}

/// Item 7: after `reseed --above i64::MAX - 1` the next grant is issued `i64::MAX`, the largest
/// token a fence's BIGINT column holds, and the one after it fails with an error that says so;
/// no node takes a counter beyond it. Before the fix the second grant was issued 2^63 (its
/// proposal, one above the last token, was accepted by every node).
#[tokio::test]
async fn tokens_stop_at_the_largest_the_fences_store() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = fenced(&nodes);
    let max = i64::MAX.unsigned_abs();
    client.reseed_fence(max - 1).await.unwrap();
    let lock = client.try_acquire("R").await.unwrap();
    assert_eq!(lock.fencing_token().map(|t| t.value()), Some(max));
    lock.release().await.unwrap();
    for attempt in 0..3 {
        match client.try_acquire("R").await {
            Ok(lock) => panic!(
                "attempt {attempt}: fencing token {:?} after {max}, beyond what the fences store",
                lock.fencing_token().map(|t| t.value())
            ),
            Err(err) => {
                let msg = err.to_string();
                assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{msg}");
                assert!(msg.contains(&max.to_string()), "{msg}");
                assert!(msg.contains("signed 64-bit"), "{msg}");
            }
        }
    }
    client.close().await;
    // The write-back reached a quorum (the round returns at one); no node is past the limit.
    let mut at_max = 0;
    for node in nodes.iter() {
        let counter: u64 = get(node, COUNTER).unwrap().parse().unwrap();
        assert!(counter == max || counter == max - 1, "{counter}");
        at_max += usize::from(counter == max);
        assert_eq!(
            get(node, "R"),
            None,
            "the failed attempts released their keys"
        );
    }
    assert!(at_max >= 2, "{at_max} nodes at {max}");
}

/// The two-round path: every counter is above the client's clock, so the token is derived from
/// the counters (one above the largest) and written back. Each node that acknowledged the
/// write-back then holds exactly the issued token: not one below it, which the next proposal
/// would pass unseen, and not the old value.
#[tokio::test]
async fn a_derived_token_is_written_back_as_issued() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = fenced(&nodes);
    let high = 5_000_000_000_000_000_000u64;
    for node in nodes.iter() {
        node.cli(&["SET", COUNTER, &high.to_string()]).unwrap();
    }
    let lock = client.try_acquire("R").await.unwrap();
    let token = lock.fencing_token().map(|t| t.value()).unwrap();
    assert_eq!(token, high + 1, "derived one above the counters");
    // The write-back returns at a quorum; the third node's answer may still be on its way.
    let waited = std::time::Instant::now();
    loop {
        let counters: Vec<Option<String>> = nodes.iter().map(|n| get(n, COUNTER)).collect();
        let exact = counters
            .iter()
            .filter(|c| c.as_deref() == Some(token.to_string().as_str()))
            .count();
        if exact >= 2 {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "token {token} issued, but the counters are {counters:?}: fewer than a quorum hold it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lock.release().await.unwrap();
    client.close().await;
}

/// Item 7 on the node: a proposal or a write-back above `i64::MAX` is an error before any write
/// (a client of another language, or one whose own limit broke, cannot push a node past what the
/// fences store); `i64::MAX` itself is taken.
#[tokio::test]
async fn no_node_takes_a_token_beyond_the_fences_range() {
    let node = RedisNode::start().unwrap();
    let max = i64::MAX.unsigned_abs();
    node.cli(&["SET", COUNTER, &(max - 1).to_string()]).unwrap();
    let legacy = fencelock::protocol::counter_key("R");
    // A script's reply, or its error's text.
    let run = |args: &[&str]| match node.cli(args) {
        Ok(reply) => reply,
        Err(err) => err.to_string(),
    };
    let eval = |script: &str, owner: &str, arg: &str| {
        run(&[
            "EVAL", script, "3", "R", COUNTER, &legacy, owner, "60000", arg,
        ])
    };
    let above = (max + 1).to_string();
    let reply = eval(fencelock::protocol::ACQUIRE_FENCED_SCRIPT, "a", &above);
    assert!(reply.contains("9223372036854775807"), "{reply}");
    assert_eq!(get(&node, "R"), None, "nothing written: {reply}");
    // Granted with no proposal, then a write-back above the range is refused.
    let reply = eval(fencelock::protocol::ACQUIRE_FENCED_SCRIPT, "a", "0");
    assert!(reply.starts_with('1'), "{reply}");
    let wb = |token: &str| {
        run(&[
            "EVAL",
            fencelock::protocol::WRITE_BACK_SCRIPT,
            "3",
            "R",
            COUNTER,
            &legacy,
            "a",
            token,
        ])
    };
    let reply = wb(&above);
    assert!(reply.contains("9223372036854775807"), "{reply}");
    assert_eq!(get(&node, COUNTER), Some((max - 1).to_string()));
    assert_eq!(wb(&max.to_string()).trim(), "1");
    assert_eq!(get(&node, COUNTER), Some(max.to_string()));
}

/// Item 3 through the client: a node restarted empty is not seeded by the grants it takes part
/// in until the seed wait (the client's TTL, 2 s here, and drift) has passed since the first of
/// them found it without a counter; then it is, above every earlier token. Which grants include
/// the node is up to the rounds (they return at a quorum), so the test takes grants until then;
/// the first second is well inside the wait, whatever the machine's load.
#[tokio::test]
async fn a_restarted_node_is_seeded_only_after_the_seed_wait() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = fenced(&nodes);
    let first = client.acquire("S").await.unwrap();
    let last = first.fencing_token().unwrap().value();
    first.release().await.unwrap();
    restart_empty(nodes.node(0));
    let begun = std::time::Instant::now();
    let mut tried = 0;
    while begun.elapsed() < Duration::from_secs(1) {
        if let Ok(lock) = client.try_acquire(&format!("S{tried}")).await {
            lock.release().await.unwrap();
        }
        tried += 1;
        assert_eq!(
            get(nodes.node(0), COUNTER),
            None,
            "n0 was seeded {:?} after its restart, within the seed wait",
            begun.elapsed()
        );
    }
    let mut seeded = None;
    for i in 0..600 {
        if let Ok(lock) = client.try_acquire(&format!("T{i}")).await {
            lock.release().await.unwrap();
        }
        seeded = get(nodes.node(0), COUNTER);
        if seeded.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let seeded: u64 = seeded
        .expect("n0 seeded once the wait passed")
        .parse()
        .unwrap();
    assert!(seeded > last, "n0 seeded with {seeded}, not above {last}");
    assert!(tried > 3, "{tried} grants in the first second");
}

/// One node's reply to `ACQUIRE_FENCED` (`{granted, largest counter, exists, accepted}`).
#[derive(Debug, Clone, Copy)]
struct Reply {
    granted: bool,
    value: u64,
    exists: bool,
    accepted: bool,
}

/// Step 1 on one node, as `ops.rs` sends it: `resource`'s key for `owner`, the node counter,
/// the legacy counter; the TTL and the proposal.
fn acquire(node: &RedisNode, resource: &str, owner: &str, ttl_ms: u64, proposal: u64) -> Reply {
    let legacy = fencelock::protocol::counter_key(resource);
    let reply = node
        .cli(&[
            "EVAL",
            fencelock::protocol::ACQUIRE_FENCED_SCRIPT,
            "3",
            resource,
            COUNTER,
            &legacy,
            owner,
            &ttl_ms.to_string(),
            &proposal.to_string(),
        ])
        .unwrap();
    let lines: Vec<&str> = reply.lines().collect();
    Reply {
        granted: lines[0] == "1",
        value: lines[1].parse().unwrap(),
        exists: lines[2] == "1",
        accepted: lines[3] == "1",
    }
}

/// Step 3 or a seed on one node (`WRITE_BACK`); `seed`: the seed's wait and TTL in ms, as the
/// client sends them when it seeds a node without a counter (`guard.rs`). True when applied.
fn write_back(
    node: &RedisNode,
    resource: &str,
    owner: &str,
    token: u64,
    seed: Option<(u64, u64)>,
) -> bool {
    let legacy = fencelock::protocol::counter_key(resource);
    let token = token.to_string();
    let mut args = vec![
        "EVAL".to_owned(),
        fencelock::protocol::WRITE_BACK_SCRIPT.to_owned(),
        "3".to_owned(),
        resource.to_owned(),
        COUNTER.to_owned(),
        legacy,
        owner.to_owned(),
        token,
    ];
    if let Some((wait, ttl)) = seed {
        args.push(wait.to_string());
        args.push(ttl.to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    node.cli(&args).unwrap().trim() == "1"
}

/// Item 3, the trace on three real nodes with the project's Lua, each client step as
/// `docs/fencing.md` describes it (quarantine off, counters at C, the client's decisions by
/// `fencing::one_round` and `fencing::derive`): A (resource X, proposal C+5) is accepted on n1,
/// refused on n0 (a stale key of X), its request to n2 in flight; n1 restarts empty; G
/// (resource Z, proposal C+1) is accepted on n2 and n0 and granted untrusted on n1: issued C+1,
/// it seeds n1; A's request lands on n2 and is accepted: A is issued C+5 on {n1, n2}; A ends.
/// B (resource X) reads n0 and n1. Before the fix n1 took G's seed and B was issued C+2 after
/// A's C+5; with the seed wait n1 refuses a seed until the longest TTL in use has passed since
/// it lost its counter, B's read of n1 is untrusted and B fails closed; a seed after the wait
/// is taken, above A's token.
#[tokio::test]
async fn a_seed_from_another_resource_never_makes_a_node_trusted_below_its_lost_record() {
    use fencelock::fencing::{derive, one_round, CounterRead, Derivation};
    let nodes = RedisNodes::start(3).unwrap();
    let (n0, n1, n2) = (nodes.node(0), nodes.node(1), nodes.node(2));
    let c = 1_000_000u64;
    for node in nodes.iter() {
        node.cli(&["SET", COUNTER, &c.to_string()]).unwrap();
    }
    let ttl = 2_000u64;
    // The client's seed: its wait (its TTL, the longest in use here, plus the drift) and TTL.
    let seed = Some((ttl + 100, ttl));
    n0.cli(&["SET", "X", "stale", "PX", "60000"]).unwrap();

    // A on X proposes C+5: accepted on n1, refused on n0; its request to n2 is in flight.
    let a1 = acquire(n1, "X", "a", ttl, c + 5);
    assert!(a1.granted && a1.accepted, "{a1:?}");
    assert!(!acquire(n0, "X", "a", ttl, c + 5).granted);
    restart_empty(n1);

    // G on Z proposes C+1: n2 and n0 accept, n1 grants without a counter.
    let g2 = acquire(n2, "Z", "g", ttl, c + 1);
    let g0 = acquire(n0, "Z", "g", ttl, c + 1);
    let g1 = acquire(n1, "Z", "g", ttl, c + 1);
    assert!(g2.accepted && g0.accepted && g1.granted && !g1.exists);
    let accepted = [g0, g1, g2].iter().filter(|r| r.accepted).count();
    assert_eq!(one_round(c + 1, accepted, 2), Some(c + 1));
    // Issued C+1; the client seeds the granting node without a counter.
    let seeded = write_back(n1, "Z", "g", c + 1, seed);

    // A's request lands on n2: C+5 is above C+1, accepted. A is issued C+5 on {n1, n2}.
    let a2 = acquire(n2, "X", "a", ttl, c + 5);
    assert!(a2.granted && a2.accepted, "{a2:?}");
    assert_eq!(one_round(c + 5, 2, 2), Some(c + 5));
    // A ends; the stale key on n0 expires.
    for node in nodes.iter() {
        node.cli(&["DEL", "X"]).unwrap();
    }

    // B on X, with a proposal below every counter: granted on n0 and n1 (n2 is slow).
    let reads: Vec<CounterRead> = [n0, n1]
        .iter()
        .map(|node| {
            let r = acquire(node, "X", "b", ttl, 1);
            assert!(r.granted && !r.accepted, "{r:?}");
            CounterRead::from_node(r.value, r.exists)
        })
        .collect();
    match derive(reads.iter().copied(), 2, false) {
        Derivation::Token(t) => {
            assert!(
                t > c + 5,
                "B was issued {t} after A's {} (n1 seeded: {seeded}, reads {reads:?})",
                c + 5
            );
        }
        other => {
            // Fails closed: n1 is not trusted yet.
            assert!(!seeded, "{other:?}");
            assert_eq!(other, Derivation::TooFewTrusted { trusted: 1 });
        }
    }
    assert_eq!(get(n1, COUNTER), None, "n1 took a seed before its wait");
    for node in nodes.iter() {
        node.cli(&["DEL", "X"]).unwrap();
    }

    // Once the wait has passed since n1 first refused a seed, a grant that reads n2 seeds it
    // above A's token.
    tokio::time::sleep(Duration::from_millis(ttl + 300)).await;
    let reads: Vec<(u64, bool)> = [n0, n2, n1]
        .iter()
        .map(|node| {
            let r = acquire(node, "Q", "h", ttl, 1);
            assert!(r.granted);
            (r.value, r.exists)
        })
        .collect();
    let Derivation::Token(t) = derive(
        reads.iter().map(|&(v, e)| CounterRead::from_node(v, e)),
        2,
        false,
    ) else {
        panic!("{reads:?}");
    };
    assert!(t > c + 5);
    assert!(write_back(n0, "Q", "h", t, None) && write_back(n2, "Q", "h", t, None));
    assert!(write_back(n1, "Q", "h", t, seed), "the seed after the wait");
    assert_eq!(get(n1, COUNTER), Some(t.to_string()));
}

/// The model's 15-step trace (`fencing_model.rs`, two resources, one counter eviction) on three
/// real nodes with the project's Lua, each client step as `docs/fencing.md` describes it and
/// decided by `fencing::one_round` and `fencing::derive` (counters at C, no restart, so the
/// quarantine plays no part): B (resource Z) is granted on n1 and n2 reading C there, and
/// derives C+1; A (resource X) proposes C+2, accepted on n0 and n1, is issued C+2 and releases;
/// n1 loses its counter (eviction, or an operator's `DEL fencelock:fence`) while B's key on Z
/// stays; B writes C+1 back to n1 and n2. A's next attempt proposes C+2 again (its clock
/// reading; any hint) and is granted on n1 and n2. Before the fix B's plain write-back passed
/// its ownership check and created n1's counter at C+1, below the C+2 n1 had recorded; n1 and
/// n2 then both took A's C+2 and A was issued C+2 twice. A plain write-back must create no
/// counter: n1 answers that it has none, is not counted, and A's next read of n1 is untrusted.
#[tokio::test]
async fn a_plain_write_back_never_creates_a_counter_a_node_lost() {
    use fencelock::fencing::{derive, one_round, CounterRead, Derivation};
    let nodes = RedisNodes::start(3).unwrap();
    let (n0, n1, n2) = (nodes.node(0), nodes.node(1), nodes.node(2));
    let c = 1_000_000u64;
    for node in nodes.iter() {
        node.cli(&["SET", COUNTER, &c.to_string()]).unwrap();
    }
    let ttl = 60_000u64;

    // B on Z, no proposal: granted on n1 and n2, both trusted at C; it derives C+1.
    let b: Vec<Reply> = [n1, n2]
        .iter()
        .map(|node| acquire(node, "Z", "b", ttl, 0))
        .collect();
    assert!(
        b.iter().all(|r| r.granted && r.exists && !r.accepted),
        "{b:?}"
    );
    let Derivation::Token(tb) = derive(
        b.iter().map(|r| CounterRead::from_node(r.value, r.exists)),
        2,
        false,
    ) else {
        panic!("{b:?}");
    };
    assert_eq!(tb, c + 1);

    // A on X proposes C+2: accepted on n0 and n1, issued in one round; it releases.
    let first = c + 2;
    for node in [n0, n1] {
        let r = acquire(node, "X", "a", ttl, first);
        assert!(r.granted && r.accepted, "{r:?}");
    }
    assert_eq!(one_round(first, 2, 2), Some(first));
    for node in nodes.iter() {
        node.cli(&["DEL", "X"]).unwrap();
    }

    // n1 loses its counter; B's key on Z stays. B writes its token back (a plain write-back).
    n1.cli(&["DEL", COUNTER]).unwrap();
    let acked_n1 = write_back(n1, "Z", "b", tb, None);
    let acked_n2 = write_back(n2, "Z", "b", tb, None);
    assert!(acked_n2);
    let n1_counter = get(n1, COUNTER);

    // A's next attempt on X proposes C+2 again: granted on n1 and n2.
    let a: Vec<Reply> = [n1, n2]
        .iter()
        .map(|node| acquire(node, "X", "a2", ttl, first))
        .collect();
    assert!(a.iter().all(|r| r.granted), "{a:?}");
    let accepted = a.iter().filter(|r| r.accepted).count();
    let second = match one_round(first, accepted, 2) {
        Some(t) => Some(t),
        None => match derive(
            a.iter().map(|r| CounterRead::from_node(r.value, r.exists)),
            2,
            false,
        ) {
            Derivation::Token(t) => Some(t),
            // Fails closed: n1 is not trusted; nothing is issued.
            _ => None,
        },
    };
    if let Some(second) = second {
        assert!(
            second > first,
            "A was issued {second} after its own {first} (B's write-back on n1 without its counter: acked {acked_n1}, n1's counter then {n1_counter:?}; A's reads {a:?})"
        );
    }
    assert!(
        !acked_n1,
        "a plain write-back on n1 without its counter was counted"
    );
    assert_eq!(n1_counter, None, "a plain write-back created n1's counter");
    assert_eq!(get(n1, COUNTER), None, "n1 has no counter until a seed");
}

/// Through the client: the write-back of a derived token meets a node that lost its counter
/// after its grant was read as trusted. n0 has no counter, n1 and n2 have theirs (far above the
/// client's proposal, so that the token is derived and written back); n2 is frozen, so the round
/// waits for it (two grants hold one counter); meanwhile n1's counter is deleted; n2 answers.
/// The write-back goes to n1 and n2: n1 takes nothing and is not counted, so no quorum took
/// it and the attempt fails closed, its vote for n1 saying why; n1 stays without a counter.
/// (A client that sent it as an epoch start's write-back, which may create a counter, was
/// issued the token with n1 created below what it had.)
#[tokio::test]
async fn a_write_back_that_meets_a_lost_counter_is_not_counted() {
    let nodes = RedisNodes::start(3).unwrap();
    let client = Client::new(
        Config::new(nodes.urls())
            .with_fencing(true)
            .with_quarantine(false)
            .with_ttl(Duration::from_secs(20))
            .with_node_timeout(Duration::from_secs(8)),
    )
    .unwrap();
    // Connections first, on running nodes.
    client
        .acquire("warm")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let high = 5_000_000_000_000_000_000u64;
    nodes.node(0).cli(&["DEL", COUNTER]).unwrap();
    for i in [1, 2] {
        nodes
            .node(i)
            .cli(&["SET", COUNTER, &high.to_string()])
            .unwrap();
    }
    nodes.node(2).pause().unwrap();
    let attempt = tokio::spawn({
        let client = client.clone();
        async move { client.try_acquire("R").await }
    });
    let waited = std::time::Instant::now();
    while get(nodes.node(1), "R").is_none() {
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "n1 never granted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    nodes.node(1).cli(&["DEL", COUNTER]).unwrap();
    nodes.node(2).resume().unwrap();
    let result = attempt.await.unwrap();
    let n1 = get(nodes.node(1), COUNTER);
    match result {
        Ok(lock) => panic!(
            "issued {:?} with n1's counter now {n1:?} (it had {high})",
            lock.fencing_token().map(|t| t.value())
        ),
        Err(err) => {
            let msg = err.to_string();
            assert_eq!(err.kind(), ErrorKind::Unavailable, "{msg}");
            assert!(msg.contains("no fence counter any more"), "{msg}");
        }
    }
    assert_eq!(n1, None, "the write-back created n1's counter");
    assert_eq!(get(nodes.node(0), COUNTER), None);
    client.close().await;
}

/// `WRITE_BACK` on a node whose counter is gone while our key stays: a plain write-back creates
/// nothing, answers 3 and starts the node's seed wait (`fencelock:lost`); an epoch start's
/// write-back (`epoch`: every node granted without a counter) creates the counter and ends it.
#[tokio::test]
async fn only_an_epoch_start_or_a_seed_creates_a_missing_counter() {
    let node = RedisNode::start().unwrap();
    let legacy = fencelock::protocol::counter_key("R");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "EVAL",
            fencelock::protocol::WRITE_BACK_SCRIPT,
            "3",
            "R",
            COUNTER,
            &legacy,
            "a",
            "500",
        ];
        args.extend_from_slice(extra);
        node.cli(&args).unwrap()
    };
    node.cli(&["SET", "R", "a", "PX", "60000"]).unwrap();
    assert_eq!(run(&[]).trim(), "3");
    assert_eq!(get(&node, COUNTER), None);
    let since = get(&node, "fencelock:lost").expect("the seed wait started");
    // A second plain write-back keeps the first time the node was found so.
    assert_eq!(run(&[]).trim(), "3");
    assert_eq!(get(&node, "fencelock:lost"), Some(since));
    assert_eq!(run(&["epoch"]).trim(), "1");
    assert_eq!(get(&node, COUNTER).as_deref(), Some("500"));
    assert_eq!(get(&node, "fencelock:lost"), None);
    // With the counter, a plain write-back raises it and never lowers it.
    node.cli(&["SET", COUNTER, "700"]).unwrap();
    assert_eq!(run(&[]).trim(), "1");
    assert_eq!(get(&node, COUNTER).as_deref(), Some("700"));
    // Not ours: nothing written, whatever the kind.
    node.cli(&["DEL", COUNTER]).unwrap();
    node.cli(&["SET", "R", "b", "PX", "60000"]).unwrap();
    assert_eq!(run(&["epoch"]).trim(), "0");
    assert_eq!(run(&[]).trim(), "0");
    assert_eq!(get(&node, COUNTER), None);
}

/// Kills the node (SIGKILL) and starts it again on its port: no persistence, so every key is
/// gone, its counter too.
fn restart_empty(node: &RedisNode) {
    node.kill().unwrap();
    node.restart().unwrap();
    assert_eq!(node.cli(&["DBSIZE"]).unwrap(), "0");
}
