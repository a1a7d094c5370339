//! `fencelock doctor` on a Redis node set: checks it against the article's list of Redlock
//! mistakes and the others we know. Gathering facts does the I/O; [`evaluate`] turns facts into
//! checks and has none, so every verdict is unit-tested below.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cli::human;
use crate::node::{parse_info, Node};
use crate::probe::{check, report, Check, Limits, Status};
use crate::settings::Settings;

/// Generous bound on each doctor request: doctor measures slowness, it must not fail on it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// PINGs per node to measure the round-trip time.
const PINGS: usize = 5;
/// The doctor's write probe's key expires after this if its DEL is lost.
const WRITE_PROBE_TTL_MS: u64 = 5_000;
/// Used memory at or above this share of maxmemory is a warning: a noeviction node refuses
/// every lock once it reaches maxmemory.
const MEMORY_WARN_PERCENT: u64 = 90;
/// Clock offsets above this are a warning.
const SKEW_WARN: Duration = Duration::from_millis(100);
/// Clock offsets above this are a failure.
const SKEW_FAIL: Duration = Duration::from_secs(1);

/// What was learned from one node.
#[derive(Debug, Clone)]
pub(crate) struct NodeFacts {
    pub(crate) name: String,
    /// `Err` with the reason if the node could not be reached.
    pub(crate) reachable: Result<(), String>,
    /// The node answered but refused this client (its password, database, certificate...): the
    /// cause, whose hint replaces "start the node".
    pub(crate) refusal: Option<fencelock::NodeError>,
    /// The round-trip times of the PINGs.
    pub(crate) rtts: Vec<Duration>,
    /// Whether the node took a write (a `SET` with a short `PX` on a doctor key, then `DEL`):
    /// `None` if not tried (the node was not reached).
    pub(crate) write: Option<Result<(), fencelock::NodeError>>,
    /// `INFO server`, `replication`, `persistence`, `cluster` and `memory`, merged.
    pub(crate) info: BTreeMap<String, String>,
    /// `CONFIG GET` answers; `Err` if CONFIG is refused (renamed or ACL).
    pub(crate) config: Result<BTreeMap<String, String>, String>,
    /// The node's clock minus the local clock, in microseconds, and the uncertainty (half the
    /// round trip of the TIME request).
    pub(crate) clock_offset: Option<(i64, Duration)>,
    /// The node set's view of the node: its `host:port`, its marker (whose first word is its
    /// identity) and the node set it records, if any.
    pub(crate) set: SetFacts,
    /// For a `redis+cluster://` node: the tag, its slot and the primary that owns it (the facts
    /// above are that primary's, `CLUSTER INFO` merged into `info`).
    pub(crate) cluster: Option<ClusterFacts>,
    /// A `redis+sentinel://` node: the facts above are the primary's the Sentinels named.
    pub(crate) sentinel: bool,
}

/// Where a cluster node's keys live.
#[derive(Debug, Clone)]
pub(crate) struct ClusterFacts {
    pub(crate) tag: String,
    pub(crate) slot: u16,
    pub(crate) owner: String,
}

/// What the node set check reads of a node (see `fencelock::nodeset`).
#[derive(Debug, Clone, Default)]
pub(crate) struct SetFacts {
    pub(crate) addr: String,
    pub(crate) marker: Option<String>,
    pub(crate) record: Option<String>,
}

/// Turns the facts into checks. No I/O.
pub(crate) fn evaluate(facts: &[NodeFacts], limits: Limits) -> Vec<Check> {
    let mut checks = Vec::new();
    let n = facts.len();
    let quorum = n / 2 + 1;
    checks.push(node_count(n, quorum));

    let reachable: Vec<&NodeFacts> = facts.iter().filter(|f| f.reachable.is_ok()).collect();
    for f in facts {
        match (&f.reachable, &f.refusal) {
            (Err(why), Some(refusal)) => checks.push(check(
                "reachable",
                Some(&f.name),
                Status::Fail,
                format!("the node refuses this client: {why}"),
                Some(refusal.hint()),
            )),
            (Err(why), None) => checks.push(check(
                "reachable",
                Some(&f.name),
                Status::Fail,
                format!("cannot reach the node: {why}"),
                Some("start the node or fix its URL; every node down costs one vote of the quorum"),
            )),
            (Ok(()), _) => {}
        }
    }
    let down = n - reachable.len();
    if down > 0 {
        let status = if reachable.len() >= quorum {
            Status::Warn
        } else {
            Status::Fail
        };
        checks.push(check(
            "quorum",
            None,
            status,
            format!(
                "{} of {n} node(s) reachable, a quorum needs {quorum}",
                reachable.len()
            ),
            Some(if status == Status::Fail {
                "no lock can be acquired until enough nodes are back"
            } else {
                "locks still work, but one more failure may stop them"
            }),
        ));
    }

    for f in &reachable {
        node_checks(f, limits, &mut checks);
    }
    checks.extend(duplicate_run_ids(&reachable));
    checks.extend(skew_between_nodes(&reachable));
    checks.push(node_set_check(facts));
    checks
}

/// Whether the node set recorded on the nodes is this list's (issue 27, item 5): clients given
/// different lists can both hold a lock.
fn node_set_check(facts: &[NodeFacts]) -> Check {
    use fencelock::nodeset::{self, Member};
    let own: Vec<Member> = facts
        .iter()
        .map(|f| Member {
            id: f
                .set
                .marker
                .as_deref()
                .and_then(nodeset::identity)
                .map(str::to_owned),
            addr: f.set.addr.clone(),
        })
        .collect();
    let records: Vec<(String, Vec<Member>)> = facts
        .iter()
        .filter(|f| f.reachable.is_ok())
        .filter_map(|f| {
            let text = f.set.record.as_deref()?;
            Some((
                f.set.addr.clone(),
                nodeset::decode(text).unwrap_or_default(),
            ))
        })
        .collect();
    match nodeset::check(&own, &records) {
        Err(why) => check(
            "node set",
            None,
            Status::Fail,
            why,
            Some("every client must use the same node list: a client of another list can hold the same lock"),
        ),
        Ok(()) if records.is_empty() => check(
            "node set",
            None,
            Status::Pass,
            "no node records a node set yet: the first client to connect records this list",
            None,
        ),
        Ok(()) => check(
            "node set",
            None,
            Status::Pass,
            format!("{} node(s) record this node set", records.len()),
            None,
        ),
    }
}

fn node_count(n: usize, quorum: usize) -> Check {
    if n == 1 {
        check(
            "node count",
            None,
            Status::Warn,
            "1 node: a single-node lock",
            Some("fine for an efficiency lock (a cron job that should not run twice); for Redlock use 3 or 5 independent nodes"),
        )
    } else if n.is_multiple_of(2) {
        check(
            "node count",
            None,
            Status::Warn,
            format!(
                "{n} nodes, quorum {quorum}: an even count tolerates no more failures than {}",
                n - 1
            ),
            Some("use an odd number of nodes (3 or 5)"),
        )
    } else {
        check(
            "node count",
            None,
            Status::Pass,
            format!(
                "{n} nodes, quorum {quorum}, tolerates {} failed node(s)",
                n - quorum
            ),
            None,
        )
    }
}

fn node_checks(f: &NodeFacts, limits: Limits, checks: &mut Vec<Check>) {
    checks.push(reachable_node(f));
    checks.extend(version_check(f));
    checks.extend(round_trip_check(f, limits));
    checks.extend(write_check(f));
    checks.extend(memory_check(f));
    match &f.cluster {
        None if f.sentinel => {
            checks.push(group_replication_check(f, "the Sentinels' primary"));
            checks.extend(split_brain_check(f));
        }
        None => {
            checks.push(replication_check(f));
            checks.extend(cluster_check(f));
        }
        Some(cluster) => {
            checks.push(cluster_shard_check(f, cluster));
            checks.push(group_replication_check(f, "the tag's shard"));
            checks.extend(split_brain_check(f));
        }
    }
    match &f.config {
        Err(why) => checks.push(check(
            "config",
            Some(&f.name),
            Status::Warn,
            format!("CONFIG GET refused ({why}); eviction and persistence could not be checked"),
            Some(
                "allow CONFIG GET for this user, or check maxmemory-policy and appendfsync by hand",
            ),
        )),
        Ok(config) => {
            config_checks(f, config, limits, checks);
        }
    }
    checks.extend(clock_vs_local_check(f));
}

/// A value of the node's `INFO`.
fn info<'a>(f: &'a NodeFacts, key: &str) -> Option<&'a str> {
    f.info.get(key).map(String::as_str)
}

/// The node answered: its version.
fn reachable_node(f: &NodeFacts) -> Check {
    let version = info(f, "redis_version").unwrap_or("?");
    check(
        "reachable",
        Some(&f.name),
        Status::Pass,
        format!("redis {version}"),
        None,
    )
}

/// A Redis too old for the scripts.
fn version_check(f: &NodeFacts) -> Option<Check> {
    let version = info(f, "redis_version").unwrap_or("?");
    fencelock::protocol::redis_version_too_old(version).then(|| {
        check(
            "version",
            Some(&f.name),
            Status::Fail,
            format!(
                "redis {version}: fencelock's scripts need Redis {} or newer (they read the clock before writing); clients refuse the node",
                fencelock::protocol::MIN_REDIS_MAJOR
            ),
            Some("upgrade the node"),
        )
    })
}

/// The slowest PING against the per-node timeout.
fn round_trip_check(f: &NodeFacts, limits: Limits) -> Option<Check> {
    let max = f.rtts.iter().max()?;
    let detail = format!(
        "round trip up to {} over {} PING(s); per-node timeout {}",
        human(*max),
        f.rtts.len(),
        human(limits.node_timeout)
    );
    let status = if *max >= limits.node_timeout {
        Status::Fail
    } else if *max * 2 >= limits.node_timeout {
        Status::Warn
    } else {
        Status::Pass
    };
    let hint = match status {
        Status::Pass => None,
        _ => Some("requests this slow time out and the node's vote is lost; raise --node-timeout (keep it far below the TTL) or move the node closer"),
    };
    Some(check("round trip", Some(&f.name), status, detail, hint))
}

/// Whether the node took the doctor's write.
fn write_check(f: &NodeFacts) -> Option<Check> {
    Some(match f.write.as_ref()? {
        Ok(()) => check(
            "write",
            Some(&f.name),
            Status::Pass,
            "accepts writes (SET PX, DEL)",
            None,
        ),
        Err(why) => check(
            "write",
            Some(&f.name),
            Status::Fail,
            format!("the node refuses writes, so every acquisition fails on it: {why}"),
            Some(why.hint()),
        ),
    })
}

/// Used memory against maxmemory: how close the node is to refusing every lock.
fn memory_check(f: &NodeFacts) -> Option<Check> {
    let used: u64 = info(f, "used_memory")?.parse().ok()?;
    let max: u64 = info(f, "maxmemory")?.parse().ok()?;
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0));
    if max == 0 {
        return Some(check(
            "memory",
            Some(&f.name),
            Status::Pass,
            format!("{} used, no maxmemory", mib(used)),
            None,
        ));
    }
    let percent = used.saturating_mul(100) / max;
    let (status, hint) = if percent >= MEMORY_WARN_PERCENT {
        (
            Status::Warn,
            Some("raise maxmemory or free memory: at maxmemory a noeviction node refuses every acquisition (OOM)"),
        )
    } else {
        (Status::Pass, None)
    };
    Some(check(
        "memory",
        Some(&f.name),
        status,
        format!("{} used of maxmemory {} ({percent}%)", mib(used), mib(max)),
        hint,
    ))
}

/// Redlock nodes must be independent masters: neither a replica nor a master with replicas.
fn replication_check(f: &NodeFacts) -> Check {
    let node = Some(f.name.as_str());
    match info(f, "role") {
        Some("slave") | Some("replica") => check(
            "replication",
            node,
            Status::Fail,
            format!(
                "the node is a replica of {}:{}",
                info(f, "master_host").unwrap_or("?"),
                info(f, "master_port").unwrap_or("?")
            ),
            Some("Redlock nodes must be independent masters: a replica can lose the lock key on failover; use separate servers without replication"),
        ),
        _ => {
            let replicas: u64 = info(f, "connected_slaves").and_then(|v| v.parse().ok()).unwrap_or(0);
            if replicas > 0 {
                check(
                    "replication",
                    node,
                    Status::Fail,
                    format!("the node has {replicas} connected replica(s)"),
                    Some("replication is asynchronous: a promoted replica may not have the lock key, and two clients hold the lock; use independent nodes without replicas"),
                )
            } else {
                check("replication", node, Status::Pass, "an independent master", None)
            }
        }
    }
}

/// A node of a Redis Cluster.
fn cluster_check(f: &NodeFacts) -> Option<Check> {
    (info(f, "cluster_enabled") == Some("1")).then(|| {
        check(
            "cluster",
            Some(&f.name),
            Status::Fail,
            "cluster_enabled:1, the node is part of a Redis Cluster",
            Some("a cluster is one node, not several: name it with redis+cluster://host:port,host:port (every key then lives on the shard of one hash tag, and its failover is treated as a loss), or use standalone servers for Redlock"),
        )
    })
}

/// A `redis+cluster://` node: every slot covered, and the tag's owner a reachable primary.
fn cluster_shard_check(f: &NodeFacts, cluster: &ClusterFacts) -> Check {
    let node = Some(f.name.as_str());
    let state = info(f, "cluster_state").unwrap_or("?");
    let assigned = info(f, "cluster_slots_assigned").unwrap_or("?");
    let failing = info(f, "cluster_slots_fail").unwrap_or("?");
    let role = info(f, "role").unwrap_or("?");
    let whole = state == "ok" && assigned == "16384" && failing == "0";
    if whole && role == "master" {
        check(
            "cluster",
            node,
            Status::Pass,
            format!(
                "cluster_state ok, all 16384 slots covered; tag {} is slot {} on {} (primary): every lock of this URL lives there",
                cluster.tag, cluster.slot, cluster.owner
            ),
            None,
        )
    } else {
        check(
            "cluster",
            node,
            Status::Fail,
            format!(
                "cluster_state {state}, {assigned} of 16384 slots assigned, {failing} failing; tag {} is slot {} on {} (role {role})",
                cluster.tag, cluster.slot, cluster.owner
            ),
            Some("locks need the tag's shard served by a primary: repair the cluster (redis-cli --cluster check / fix) before relying on it"),
        )
    }
}

/// A cluster shard's or a Sentinel group's replicas (`what` names which): the failover they
/// allow is treated as a loss of data.
fn group_replication_check(f: &NodeFacts, what: &str) -> Check {
    let replicas: u64 = info(f, "connected_slaves")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let (status, detail, hint) = if replicas == 0 {
        (
            Status::Warn,
            format!("{what} has no connected replica: if it fails, no lock can be taken until it is back"),
            Some("give it a replica to promote (--cluster-replicas 1 on a cluster)"),
        )
    } else {
        (
            Status::Pass,
            format!("{what} has {replicas} replica(s); a failover to one is treated as a loss of data (restart quarantine, amnesia guard)"),
            None,
        )
    };
    check("replication", Some(&f.name), status, detail, hint)
}

/// A Sentinel group's or a cluster shard's primary cut off from its replicas (a network split)
/// goes on granting locks until it is demoted, and the failover then loses them while their
/// holders are told nothing until their next extension. `min-replicas-to-write` bounds that
/// window: such a primary refuses writes once its replicas lag by `min-replicas-max-lag`
/// seconds. `None` when CONFIG is refused (the `config` check says so).
fn split_brain_check(f: &NodeFacts) -> Option<Check> {
    let config = f.config.as_ref().ok()?;
    let to_write: u64 = config
        .get("min-replicas-to-write")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let lag: u64 = config
        .get("min-replicas-max-lag")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    Some(if to_write == 0 {
        check(
            "split brain",
            Some(&f.name),
            Status::Warn,
            "min-replicas-to-write is 0: a primary cut off from its replicas (a network split) keeps granting locks until it is demoted, and the failover loses them; their holders learn it at their next extension",
            Some("CONFIG SET min-replicas-to-write 1 and min-replicas-max-lag 10 on the primary and its replicas (and in redis.conf): a primary cut off from its replicas then refuses writes after that lag"),
        )
    } else {
        check(
            "split brain",
            Some(&f.name),
            Status::Pass,
            format!("min-replicas-to-write {to_write}: a primary cut off from its replicas refuses writes after {lag}s; locks it grants before that are lost by the failover (their holders learn it at their next extension)"),
            None,
        )
    })
}

/// The node's clock against the local one, less the measurement's uncertainty.
fn clock_vs_local_check(f: &NodeFacts) -> Option<Check> {
    let (offset, uncertainty) = f.clock_offset?;
    let off = Duration::from_micros(offset.unsigned_abs()).saturating_sub(uncertainty);
    let (status, hint) = skew_verdict(off);
    Some(check(
        "clock vs local",
        Some(&f.name),
        status,
        format!(
            "node clock {} {} the local clock (±{})",
            human(Duration::from_micros(offset.unsigned_abs())),
            if offset >= 0 { "ahead of" } else { "behind" },
            human(uncertainty)
        ),
        hint,
    ))
}

fn config_checks(
    f: &NodeFacts,
    config: &BTreeMap<String, String>,
    limits: Limits,
    checks: &mut Vec<Check>,
) {
    let node = Some(f.name.as_str());
    let get = |key: &str| config.get(key).map(String::as_str);

    match get("maxmemory-policy") {
        Some("noeviction") => checks.push(check("eviction", node, Status::Pass, "maxmemory-policy noeviction", None)),
        Some(policy) => checks.push(check(
            "eviction",
            node,
            Status::Fail,
            format!("maxmemory-policy is {policy} (maxmemory {}): the node may evict lock keys", get("maxmemory").unwrap_or("?")),
            Some("set maxmemory-policy noeviction on lock nodes (CONFIG SET maxmemory-policy noeviction, and in redis.conf)"),
        )),
        None => {}
    }

    let aof = get("appendonly") == Some("yes");
    let fsync = get("appendfsync").unwrap_or("?");
    let rdb = get("save").is_some_and(|s| !s.trim().is_empty());
    let durable = aof && fsync == "always";
    let (status, detail, hint) = if durable {
        (Status::Pass, "AOF with appendfsync always".to_owned(), None)
    } else if aof {
        (
            Status::Warn,
            format!("AOF with appendfsync {fsync}: a crash loses the last writes, lock keys included"),
            Some("use appendfsync always, or keep a restarted node out of the set for at least the TTL"),
        )
    } else if rdb {
        (
            Status::Warn,
            "RDB snapshots only: a restart loses the lock keys written since the last snapshot".to_owned(),
            Some("use appendonly yes with appendfsync always, or no persistence and keep a restarted node out for the TTL"),
        )
    } else {
        (
            Status::Pass,
            "no persistence: a restarted node forgets every lock".to_owned(),
            Some(
                "keep a restarted node out of the set for at least the TTL (see the uptime check)",
            ),
        )
    };
    checks.push(check("persistence", node, status, detail, hint));

    if let Some(uptime) = f
        .info
        .get("uptime_in_seconds")
        .and_then(|v| v.parse::<u64>().ok())
    {
        let uptime = Duration::from_secs(uptime);
        // `uptime_in_seconds` is whole seconds: compare with one second of slack.
        if uptime + Duration::from_secs(1) <= limits.ttl && !durable {
            checks.push(check(
                "uptime",
                node,
                Status::Warn,
                format!(
                    "up for {}, less than the TTL {}: it may have forgotten a lock granted before it restarted",
                    humantime::format_duration(uptime),
                    human(limits.ttl)
                ),
                Some("a restarted node should stay out of the set for at least the TTL; wait, or make restarts delay that long"),
            ));
        } else {
            checks.push(check(
                "uptime",
                node,
                Status::Pass,
                format!("up for {}", humantime::format_duration(uptime)),
                None,
            ));
        }
    }
}

fn skew_verdict(off: Duration) -> (Status, Option<&'static str>) {
    if off >= SKEW_FAIL {
        (Status::Fail, Some("synchronize the clocks (NTP, chrony) and let them slew, not step: a clock jump expires lock keys early"))
    } else if off >= SKEW_WARN {
        (
            Status::Warn,
            Some("check clock synchronization (NTP, chrony); TTLs run on each node's clock"),
        )
    } else {
        (Status::Pass, None)
    }
}

fn duplicate_run_ids(reachable: &[&NodeFacts]) -> Vec<Check> {
    let mut by_id: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for f in reachable {
        if let Some(id) = f.info.get("run_id") {
            by_id.entry(id).or_default().push(&f.name);
        }
    }
    let mut checks = Vec::new();
    for (id, names) in &by_id {
        if names.len() > 1 {
            checks.push(check(
                "independence",
                None,
                Status::Fail,
                format!("{} are the same server (run_id {id})", names.join(" and ")),
                Some("each node must be a separate redis-server; remove the duplicate URL"),
            ));
        }
    }
    if checks.is_empty() && reachable.len() > 1 {
        checks.push(check(
            "independence",
            None,
            Status::Pass,
            format!("{} distinct servers (run_id)", reachable.len()),
            None,
        ));
    }
    checks
}

fn skew_between_nodes(reachable: &[&NodeFacts]) -> Option<Check> {
    let offsets: Vec<(i64, Duration)> = reachable.iter().filter_map(|f| f.clock_offset).collect();
    if offsets.len() < 2 {
        return None;
    }
    let max = offsets.iter().map(|(o, _)| *o).max()?;
    let min = offsets.iter().map(|(o, _)| *o).min()?;
    let spread = Duration::from_micros(max.abs_diff(min));
    let uncertainty: Duration = offsets.iter().map(|(_, u)| *u).max()? * 2;
    let (status, hint) = skew_verdict(spread.saturating_sub(uncertainty));
    Some(check(
        "clock skew",
        None,
        status,
        format!(
            "node clocks differ by up to {} (±{})",
            human(spread),
            human(uncertainty)
        ),
        hint,
    ))
}

/// A write as a lock's: a node that answers every read may still refuse each write (out of
/// memory under noeviction, a replica, a failed snapshot), and then every acquisition fails on
/// it. The key is the doctor's own and expires by itself if the DEL does not arrive.
async fn write_probe(conn: &mut crate::node::Conn, tag: &str) -> Result<(), fencelock::NodeError> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let key = format!("{tag}fencelock:doctor:{}:{nanos}", std::process::id());
    conn.query_why::<Option<String>>(
        redis::cmd("SET")
            .arg(&key)
            .arg("doctor")
            .arg("PX")
            .arg(WRITE_PROBE_TTL_MS),
    )
    .await?;
    conn.query_why::<i64>(redis::cmd("DEL").arg(&key)).await?;
    Ok(())
}

/// Asks one node everything the checks need; for a cluster node, the primary that owns its
/// tag's slot.
async fn gather(node: &Node) -> NodeFacts {
    let Some(cluster) = &node.cluster else {
        let mut facts = gather_at(node, node, "").await;
        facts.sentinel = node.is_sentinel();
        return facts;
    };
    match cluster.owner(PROBE_TIMEOUT).await {
        Ok((owner, slot)) => {
            let tag = cluster.tag();
            let mut facts = gather_at(node, &owner, &tag).await;
            facts.cluster = Some(ClusterFacts {
                tag,
                slot,
                owner: owner.addr.clone(),
            });
            if facts.reachable.is_ok() {
                match owner.connect(PROBE_TIMEOUT).await {
                    Ok(mut conn) => {
                        if let Ok(text) = conn
                            .query::<String>(redis::cmd("CLUSTER").arg("INFO"))
                            .await
                        {
                            facts.info.extend(parse_info(&text));
                        }
                    }
                    Err(why) => facts.reachable = Err(why),
                }
            }
            facts
        }
        Err(why) => {
            let mut facts = empty_facts(node);
            facts.reachable = Err(format!("no owner of the tag's slot found: {why}"));
            facts
        }
    }
}

fn empty_facts(node: &Node) -> NodeFacts {
    NodeFacts {
        name: node.name.clone(),
        reachable: Ok(()),
        refusal: None,
        write: None,
        rtts: Vec::new(),
        info: BTreeMap::new(),
        config: Ok(BTreeMap::new()),
        clock_offset: None,
        set: SetFacts {
            addr: node.addr.clone(),
            ..SetFacts::default()
        },
        cluster: None,
        sentinel: false,
    }
}

/// Asks `at` everything the checks need, reported under `node`'s name; `tag` goes in front of
/// every key read or written (a cluster's).
async fn gather_at(node: &Node, at: &Node, tag: &str) -> NodeFacts {
    let mut facts = NodeFacts {
        name: node.name.clone(),
        reachable: Ok(()),
        refusal: None,
        write: None,
        rtts: Vec::new(),
        info: BTreeMap::new(),
        config: Ok(BTreeMap::new()),
        clock_offset: None,
        set: SetFacts {
            addr: node.addr.clone(),
            ..SetFacts::default()
        },
        cluster: None,
        sentinel: false,
    };
    let mut conn = match at.connect_why(PROBE_TIMEOUT).await {
        Ok(conn) => conn,
        Err(why) => {
            facts.reachable = Err(why.to_string());
            if !matches!(
                why.cause(),
                fencelock::FailureCause::Refused | fencelock::FailureCause::Other
            ) {
                facts.refusal = Some(why);
            }
            return facts;
        }
    };
    for _ in 0..PINGS {
        match conn.query_timed::<String>(&redis::cmd("PING")).await {
            Ok((_, rtt)) => facts.rtts.push(rtt),
            Err(why) => {
                facts.reachable = Err(format!("PING failed: {why}"));
                return facts;
            }
        }
    }
    for section in ["server", "replication", "persistence", "cluster", "memory"] {
        match conn.query::<String>(redis::cmd("INFO").arg(section)).await {
            Ok(text) => facts.info.extend(parse_info(&text)),
            Err(why) => {
                facts.reachable = Err(format!("INFO {section} failed: {why}"));
                return facts;
            }
        }
    }
    let mut config = BTreeMap::new();
    for key in [
        "maxmemory-policy",
        "maxmemory",
        "appendonly",
        "appendfsync",
        "save",
        "min-replicas-to-write",
        "min-replicas-max-lag",
    ] {
        match conn
            .query::<Vec<String>>(redis::cmd("CONFIG").arg("GET").arg(key))
            .await
        {
            Ok(pair) => {
                if let [k, v] = pair.as_slice() {
                    config.insert(k.clone(), v.clone());
                }
            }
            Err(why) => {
                facts.config = Err(why);
                break;
            }
        }
    }
    if facts.config.is_ok() {
        facts.config = Ok(config);
    }
    facts.write = Some(write_probe(&mut conn, tag).await);

    for (key, slot) in [
        (fencelock::protocol::NODE_MARKER_KEY, &mut facts.set.marker),
        (fencelock::protocol::NODE_SET_KEY, &mut facts.set.record),
    ] {
        if let Ok(value) = conn
            .query::<Option<String>>(redis::cmd("GET").arg(format!("{tag}{key}")))
            .await
        {
            *slot = value;
        }
    }

    let before = SystemTime::now();
    if let Ok(((secs, micros), rtt)) = conn.query_timed::<(i64, i64)>(&redis::cmd("TIME")).await {
        let local_mid = before + rtt / 2;
        if let Ok(local) = local_mid.duration_since(UNIX_EPOCH) {
            let node_us = secs.saturating_mul(1_000_000).saturating_add(micros);
            let local_us = i64::try_from(local.as_micros()).unwrap_or(i64::MAX);
            facts.clock_offset = Some((node_us.saturating_sub(local_us), rtt / 2));
        }
    }
    facts
}

/// `fencelock doctor` on Redis nodes.
///
/// # Errors
///
/// A usage failure for a bad node URL; unreachable nodes are a failing check, not an error.
pub(crate) async fn doctor(settings: &Settings, json: bool) -> anyhow::Result<u8> {
    let nodes = Node::parse_all_with_clusters(&settings.nodes, &settings.tls)?;
    let facts = futures_util::future::join_all(nodes.iter().map(gather)).await;
    let limits = Limits {
        ttl: settings.ttl,
        node_timeout: settings.node_timeout,
    };
    let checks = evaluate(&facts, limits);
    let names: Vec<String> = facts.iter().map(|f| f.name.clone()).collect();
    let code = report(&checks, &names, settings, json)?;
    // A refusal that only a change of configuration can fix (a password, a database, a
    // certificate) is told as such by the exit code too, as the lock commands tell it.
    let misconfigured = facts
        .iter()
        .any(|f| f.refusal.as_ref().is_some_and(|e| e.needs_config_change()));
    Ok(if misconfigured {
        crate::exit::CONFIG
    } else {
        code
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::render;
    use crate::probe::testing::worst;

    fn limits() -> Limits {
        Limits {
            ttl: Duration::from_secs(30),
            node_timeout: Duration::from_millis(50),
        }
    }

    fn healthy(name: &str, run_id: &str) -> NodeFacts {
        let info = [
            ("redis_version", "7.0.15"),
            ("run_id", run_id),
            ("role", "master"),
            ("connected_slaves", "0"),
            ("cluster_enabled", "0"),
            ("uptime_in_seconds", "3600"),
            ("used_memory", "1048576"),
            ("maxmemory", "0"),
        ];
        let config = [
            ("maxmemory-policy", "noeviction"),
            ("maxmemory", "0"),
            ("appendonly", "no"),
            ("appendfsync", "everysec"),
            ("save", ""),
        ];
        NodeFacts {
            name: name.into(),
            reachable: Ok(()),
            refusal: None,
            write: Some(Ok(())),
            rtts: vec![Duration::from_micros(300); 5],
            info: info
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            config: Ok(config
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect()),
            clock_offset: Some((200, Duration::from_micros(150))),
            set: SetFacts {
                addr: format!("{name}:1"),
                marker: Some(format!("{run_id} clear")),
                record: None,
            },
            cluster: None,
            sentinel: false,
        }
    }

    /// A `redis+cluster://` node's facts: the tag's owner, a primary with one replica, in a
    /// cluster whose slots are all served.
    fn cluster_node() -> NodeFacts {
        let mut f = healthy("redis+cluster://a:1,b:2", "1");
        for (k, v) in [
            ("cluster_enabled", "1"),
            ("connected_slaves", "1"),
            ("cluster_state", "ok"),
            ("cluster_slots_assigned", "16384"),
            ("cluster_slots_fail", "0"),
        ] {
            f.info.insert(k.into(), v.into());
        }
        f.cluster = Some(ClusterFacts {
            tag: "{fencelock}".into(),
            slot: 1234,
            owner: "a:1".into(),
        });
        f
    }

    #[test]
    fn a_cluster_url_passes_when_its_tags_shard_is_served_and_fails_when_slots_are_not() {
        let facts = vec![cluster_node()];
        let checks = evaluate(&facts, limits());
        assert_eq!(worst(&checks, "cluster"), Some(Status::Pass));
        assert_eq!(worst(&checks, "replication"), Some(Status::Pass));
        let text = render(&checks);
        assert!(text.contains("slot 1234 on a:1"), "{text}");
        let mut down = cluster_node();
        down.info.insert("cluster_state".into(), "fail".into());
        down.info.insert("cluster_slots_fail".into(), "5461".into());
        assert_eq!(
            worst(&evaluate(&[down], limits()), "cluster"),
            Some(Status::Fail)
        );
        let mut lone = cluster_node();
        lone.info.insert("connected_slaves".into(), "0".into());
        assert_eq!(
            worst(&evaluate(&[lone], limits()), "replication"),
            Some(Status::Warn)
        );
    }

    #[test]
    fn a_managed_primary_without_min_replicas_to_write_warns_of_a_split_brain() {
        let mut open = cluster_node();
        let config = open.config.as_mut().unwrap();
        config.insert("min-replicas-to-write".into(), "0".into());
        config.insert("min-replicas-max-lag".into(), "10".into());
        let checks = evaluate(&[open.clone()], limits());
        assert_eq!(worst(&checks, "split brain"), Some(Status::Warn));
        assert!(render(&checks).contains("min-replicas-to-write 1"));
        open.config
            .as_mut()
            .unwrap()
            .insert("min-replicas-to-write".into(), "1".into());
        let checks = evaluate(&[open.clone()], limits());
        assert_eq!(worst(&checks, "split brain"), Some(Status::Pass));
        assert!(render(&checks).contains("refuses writes after 10s"));
        // A plain node has no failover: no such check.
        let plain = healthy("redis://a:1", "1");
        assert_eq!(worst(&evaluate(&[plain], limits()), "split brain"), None);
    }

    #[test]
    fn a_node_that_records_another_set_fails() {
        let mut facts = three();
        assert_eq!(
            worst(&evaluate(&facts, limits()), "node set"),
            Some(Status::Pass)
        );
        let same = "1 a:1\n2 b:1\n3 c:1";
        facts[0].set.record = Some(same.into());
        assert_eq!(
            worst(&evaluate(&facts, limits()), "node set"),
            Some(Status::Pass)
        );
        // Nodes b and c serve a, b and d: this list (a, b, c) is another set.
        facts[1].set.record = Some("1 a:1\n2 b:1\n9 d:1".into());
        let checks = evaluate(&facts, limits());
        assert_eq!(
            worst(&checks, "node set"),
            Some(Status::Fail),
            "{checks:#?}"
        );
        let failed = checks.iter().find(|c| c.check == "node set").unwrap();
        assert!(
            failed.detail.contains("[a:1, b:1, d:1]"),
            "{}",
            failed.detail
        );
        assert!(
            failed.detail.contains("[a:1, b:1, c:1]"),
            "{}",
            failed.detail
        );
    }

    fn three() -> Vec<NodeFacts> {
        vec![healthy("a", "1"), healthy("b", "2"), healthy("c", "3")]
    }

    #[test]
    fn a_clean_set_passes() {
        let checks = evaluate(&three(), limits());
        assert!(
            checks.iter().all(|c| c.status == Status::Pass),
            "{checks:#?}"
        );
    }

    #[test]
    fn redis_below_5_fails() {
        let mut facts = three();
        facts[2]
            .info
            .insert("redis_version".into(), "4.0.14".into());
        let checks = evaluate(&facts, limits());
        let failed: Vec<&Check> = checks.iter().filter(|c| c.check == "version").collect();
        assert_eq!(failed.len(), 1, "{checks:#?}");
        assert_eq!(failed[0].node.as_deref(), Some("c"));
        assert_eq!(failed[0].status, Status::Fail);
        assert!(failed[0]
            .detail
            .starts_with("redis 4.0.14: fencelock's scripts need Redis 5 or newer"));
        assert_eq!(failed[0].hint.as_deref(), Some("upgrade the node"));
        facts[2].info.insert("redis_version".into(), "5.0.0".into());
        assert_eq!(worst(&evaluate(&facts, limits()), "version"), None);
    }

    #[test]
    fn eviction_policies_fail() {
        let mut facts = three();
        if let Ok(config) = &mut facts[1].config {
            config.insert("maxmemory-policy".into(), "allkeys-lru".into());
        }
        assert_eq!(
            worst(&evaluate(&facts, limits()), "eviction"),
            Some(Status::Fail)
        );
        if let Ok(config) = &mut facts[1].config {
            config.insert("maxmemory-policy".into(), "volatile-ttl".into());
        }
        assert_eq!(
            worst(&evaluate(&facts, limits()), "eviction"),
            Some(Status::Fail)
        );
    }

    #[test]
    fn replicas_and_masters_with_replicas_fail() {
        let mut facts = three();
        facts[0].info.insert("connected_slaves".into(), "1".into());
        facts[1].info.insert("role".into(), "slave".into());
        let checks = evaluate(&facts, limits());
        let fails: Vec<_> = checks
            .iter()
            .filter(|c| c.check == "replication" && c.status == Status::Fail)
            .collect();
        assert_eq!(fails.len(), 2, "{checks:#?}");
    }

    #[test]
    fn the_same_server_twice_fails() {
        let mut facts = three();
        facts[2].info.insert("run_id".into(), "1".into());
        assert_eq!(
            worst(&evaluate(&facts, limits()), "independence"),
            Some(Status::Fail)
        );
    }

    #[test]
    fn cluster_mode_fails() {
        let mut facts = three();
        facts[0].info.insert("cluster_enabled".into(), "1".into());
        assert_eq!(
            worst(&evaluate(&facts, limits()), "cluster"),
            Some(Status::Fail)
        );
    }

    #[test]
    fn lax_fsync_warns_and_always_passes() {
        let mut facts = three();
        if let Ok(config) = &mut facts[0].config {
            config.insert("appendonly".into(), "yes".into());
        }
        assert_eq!(
            worst(&evaluate(&facts, limits()), "persistence"),
            Some(Status::Warn)
        );
        if let Ok(config) = &mut facts[0].config {
            config.insert("appendfsync".into(), "always".into());
        }
        assert_eq!(
            worst(&evaluate(&facts, limits()), "persistence"),
            Some(Status::Pass)
        );
    }

    #[test]
    fn a_recent_restart_warns() {
        let mut facts = three();
        facts[0].info.insert("uptime_in_seconds".into(), "3".into());
        assert_eq!(
            worst(&evaluate(&facts, limits()), "uptime"),
            Some(Status::Warn)
        );
    }

    #[test]
    fn slow_nodes_warn_then_fail() {
        let mut facts = three();
        facts[0].rtts = vec![Duration::from_millis(30)];
        assert_eq!(
            worst(&evaluate(&facts, limits()), "round trip"),
            Some(Status::Warn)
        );
        facts[0].rtts = vec![Duration::from_millis(60)];
        assert_eq!(
            worst(&evaluate(&facts, limits()), "round trip"),
            Some(Status::Fail)
        );
    }

    #[test]
    fn clock_skew_is_measured_against_the_uncertainty() {
        let mut facts = three();
        facts[0].clock_offset = Some((2_000_000, Duration::from_micros(100)));
        let checks = evaluate(&facts, limits());
        assert_eq!(worst(&checks, "clock vs local"), Some(Status::Fail));
        assert_eq!(worst(&checks, "clock skew"), Some(Status::Fail));
        facts[0].clock_offset = Some((150_000, Duration::from_millis(100)));
        let checks = evaluate(&facts, limits());
        assert_eq!(worst(&checks, "clock vs local"), Some(Status::Pass));
    }

    #[test]
    fn unreachable_nodes_fail_and_cost_the_quorum() {
        let mut facts = three();
        facts[0].reachable = Err("connection refused".into());
        let checks = evaluate(&facts, limits());
        assert_eq!(worst(&checks, "reachable"), Some(Status::Fail));
        assert_eq!(worst(&checks, "quorum"), Some(Status::Warn));
        facts[1].reachable = Err("connection refused".into());
        assert_eq!(
            worst(&evaluate(&facts, limits()), "quorum"),
            Some(Status::Fail)
        );
    }

    #[test]
    fn a_node_that_refuses_writes_fails_and_memory_near_maxmemory_warns() {
        let mut facts = three();
        facts[1].write = Some(Err("OOM stand-in".into()));
        let checks = evaluate(&facts, limits());
        assert_eq!(worst(&checks, "write"), Some(Status::Fail), "{checks:#?}");
        facts[1].write = Some(Ok(()));
        facts[2].info.insert("maxmemory".into(), "1100000".into());
        let checks = evaluate(&facts, limits());
        assert_eq!(worst(&checks, "memory"), Some(Status::Warn), "{checks:#?}");
        facts[2].info.insert("maxmemory".into(), "4194304".into());
        assert_eq!(
            worst(&evaluate(&facts, limits()), "memory"),
            Some(Status::Pass)
        );
    }

    #[test]
    fn even_counts_warn() {
        let facts = vec![healthy("a", "1"), healthy("b", "2")];
        assert_eq!(
            worst(&evaluate(&facts, limits()), "node count"),
            Some(Status::Warn)
        );
    }

    #[test]
    fn the_table_has_a_hint_under_each_problem() {
        let mut facts = three();
        facts[0].info.insert("cluster_enabled".into(), "1".into());
        let text = render(&evaluate(&facts, limits()));
        assert!(text.contains("fail  cluster"), "{text}");
        assert!(text.contains("hint: a cluster is one node"), "{text}");
    }
}
