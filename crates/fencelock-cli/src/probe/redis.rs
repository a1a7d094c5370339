//! A Redis node set's reading for `inspect` (what each node holds for one resource), for
//! `doctor` (`redis/doctor.rs`: what each node is and how it is configured) and for the lock
//! commands' errors (a key of the wrong type). Read-only: it never changes a key.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::show_holder;
use crate::exit::{self, Failure};
use crate::node::Node;
use crate::settings::Settings;

pub(crate) mod doctor;

/// Bound on each inspect request: long enough for a loaded node, short enough for a dead one.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What one node holds.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct NodeState {
    pub(crate) node: String,
    pub(crate) reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// `string` for a lock key, `none` when absent, anything else is a key of the wrong type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key_type: Option<String>,
    /// The holder's owner value (the value of the key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<String>,
    /// Remaining time to live in milliseconds (`-1`: no TTL, which a lock key never lacks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pttl_ms: Option<i64>,
    /// The node's fence counter for the resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fence_counter: Option<String>,
    /// How many fencelock waiters stand in the resource's line on this node (lapsed leases
    /// included until a request drops them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) waiting: Option<u64>,
    /// Who holds it, as its client stored it (in the lock key's value after the token, or an
    /// older client's `fencelock:holder:<resource>`; see `fencelock::Holder`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<String>,
    /// A semaphore of this name: its slots held on this node (`fencelock::protocol::permit_key`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) permits: Vec<Slot>,
    /// A read-write lock's readers on this node, while the key holds the readers' marker.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) readers: Vec<Reader>,
    /// A read-write lock's writer record: the largest fencing token a writer recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) writer_record: Option<String>,
    /// An election of this name: its newest log entry (`<term> <value>`) and its lock key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) leader: Option<LeaderEntry>,
    /// A `redis+cluster://` node: where its keys were read (the tag's slot and its primary).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cluster: Option<ClusterPlace>,
}

/// Where a cluster node's keys live: the slot of its hash tag and the primary that owns it now.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct ClusterPlace {
    /// The hash tag every key of the node carries (`{fencelock}`).
    pub(crate) tag: String,
    pub(crate) slot: u16,
    /// `host:port` of the primary that owns the slot.
    pub(crate) primary: String,
}

/// One held slot of a semaphore on one node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) slot: u32,
    pub(crate) owner: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<String>,
}

/// One reader of a read-write lock on one node: its owner value and the time its entry has
/// left (ms, the node's clock).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct Reader {
    pub(crate) owner: String,
    pub(crate) left_ms: i64,
}

/// The newest entry of an election's log on one node, and who holds its lock key.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct LeaderEntry {
    pub(crate) term: u64,
    pub(crate) value: String,
    /// The election's lock key is held (by the leader, unless it resigned or died since).
    pub(crate) held: bool,
}

impl NodeState {
    fn unreachable(node: &Node, why: String) -> NodeState {
        NodeState {
            node: node.name.clone(),
            reachable: false,
            error: Some(why),
            key_type: None,
            owner: None,
            pttl_ms: None,
            fence_counter: None,
            waiting: None,
            holder: None,
            permits: Vec::new(),
            readers: Vec::new(),
            writer_record: None,
            leader: None,
            cluster: None,
        }
    }

    /// Whether the key is a string without a TTL that is not an owner value (32 lowercase hex
    /// digits, alone or with the holder after a space): some program's value, not a lock whose
    /// TTL was removed (that one is waited for).
    pub(crate) fn is_plain_value(&self) -> bool {
        let owner_like = self
            .owner
            .as_deref()
            .is_some_and(fencelock::protocol::is_owner_value);
        self.key_type.as_deref() == Some("string") && self.pttl_ms == Some(-1) && !owner_like
    }

    /// Whether the key exists but is not a string, so it cannot be a lock key.
    pub(crate) fn wrong_type(&self) -> Option<&str> {
        self.key_type
            .as_deref()
            .filter(|t| *t != "string" && *t != "none")
    }
}

async fn probe_node(node: &Node, resource: &str, timeout: Duration) -> NodeState {
    let Some(cluster) = &node.cluster else {
        return probe_keys(node, resource, "", timeout).await;
    };
    // A cluster node: its keys carry the tag and live on the primary that owns the tag's slot.
    match cluster.owner(timeout).await {
        Ok((primary, slot)) => {
            let tag = cluster.tag();
            let mut state = probe_keys(&primary, resource, &tag, timeout).await;
            state.node = node.name.clone();
            state.cluster = Some(ClusterPlace {
                tag,
                slot,
                primary: primary.addr,
            });
            state
        }
        Err(why) => NodeState::unreachable(node, why),
    }
}

/// What `node` holds for `resource`, every key name with `tag` in front (empty but on a
/// cluster; a key a script derives from another, the holder's, is derived from the tagged one).
async fn probe_keys(node: &Node, resource: &str, tag: &str, timeout: Duration) -> NodeState {
    let key = |name: String| format!("{tag}{name}");
    let lock_key = key(resource.to_string());
    let mut conn = match node.connect(timeout).await {
        Ok(conn) => conn,
        Err(why) => return NodeState::unreachable(node, why),
    };
    let key_type = match conn
        .query::<String>(redis::cmd("TYPE").arg(&lock_key))
        .await
    {
        Ok(t) => t,
        Err(why) => return NodeState::unreachable(node, format!("TYPE failed: {why}")),
    };
    let mut state = NodeState {
        node: node.name.clone(),
        reachable: true,
        error: None,
        key_type: Some(key_type.clone()),
        owner: None,
        pttl_ms: None,
        fence_counter: None,
        waiting: None,
        holder: None,
        permits: Vec::new(),
        readers: Vec::new(),
        writer_record: None,
        leader: None,
        cluster: None,
    };
    if key_type != "none" {
        state.pttl_ms = conn
            .query::<i64>(redis::cmd("PTTL").arg(&lock_key))
            .await
            .ok();
    }
    if key_type == "string" {
        match conn
            .query::<Option<String>>(redis::cmd("GET").arg(&lock_key))
            .await
        {
            Ok(owner) => state.owner = owner,
            Err(why) => state.error = Some(format!("GET failed: {why}")),
        }
        match holder_of(&mut conn, &lock_key, state.owner.as_deref()).await {
            Ok(holder) => state.holder = holder,
            Err(why) => state.error = Some(why),
        }
    }
    // The node's fence counter (one per node); a legacy per-resource counter left by an older
    // version counts too until the resource's next fenced grant deletes it.
    let keys = [
        key(fencelock::protocol::FENCE_COUNTER_KEY.to_string()),
        key(fencelock::protocol::counter_key(resource)),
    ];
    match conn
        .query::<Vec<Option<String>>>(redis::cmd("MGET").arg(&keys[..]))
        .await
    {
        Ok(counters) => {
            state.fence_counter = counters
                .into_iter()
                .flatten()
                .max_by_key(|c| c.parse::<u64>().unwrap_or(0));
        }
        Err(why) => state.error = Some(format!("MGET {} failed: {why}", keys.join(" "))),
    }
    let line_key = key(fencelock::protocol::queue_key(resource));
    match conn.query::<u64>(redis::cmd("ZCARD").arg(&line_key)).await {
        Ok(n) => state.waiting = Some(n),
        Err(why) => state.error = Some(format!("ZCARD {line_key} failed: {why}")),
    }
    if let Err(why) = family(&mut conn, resource, tag, &mut state).await {
        state.error = Some(why);
    }
    state
}

/// Reads an older client's holder side key KEYS[1] and the TTLs of it and its lock key KEYS[2].
const SIDE_KEY_LUA: &str =
    "return {redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1]), redis.call('pttl', KEYS[2])}";

/// Who holds lock key `key` whose value is `owner`: the holder carried in the value (this
/// version's clients), else an older client's side key (`fencelock:holder:<key>`) read with
/// both TTLs, and taken only when its TTL is the lock's (older scripts set and extend both
/// together): a side key left behind by a lost lock key names nobody who holds it now.
async fn holder_of(
    conn: &mut crate::node::Conn,
    key: &str,
    owner: Option<&str>,
) -> Result<Option<String>, String> {
    use fencelock::protocol;
    let Some(owner) = owner else {
        return Ok(None);
    };
    if let Some(holder) = protocol::owner_holder(owner) {
        return Ok(Some(holder.to_string()));
    }
    let side = protocol::holder_key(key);
    // One script, so that both TTLs are read at one instant (a script sees one time).
    let mut read = redis::cmd("EVAL");
    read.arg(SIDE_KEY_LUA).arg(2).arg(&side).arg(key);
    let (label, side_ms, lock_ms): (Option<String>, i64, i64) = conn
        .query(&read)
        .await
        .map_err(|why| format!("reading {side} failed: {why}"))?;
    let same_ttl =
        lock_ms > 0 && side_ms > 0 && (lock_ms - side_ms).abs() <= protocol::LEGACY_HOLDER_SLACK_MS;
    Ok(label.filter(|_| same_ttl))
}

/// What the primitives built on lock keys keep under `resource` on this node: a semaphore's
/// slots, a read-write lock's readers and writer record, an election's log. Each is read
/// where the library writes it (`fencelock::protocol`'s key names).
async fn family(
    conn: &mut crate::node::Conn,
    resource: &str,
    tag: &str,
    state: &mut NodeState,
) -> Result<(), String> {
    use fencelock::protocol;
    let key = |name: String| format!("{tag}{name}");
    let max = fencelock::MAX_PERMITS;
    let slots: Vec<String> = (0..max)
        .map(|i| key(protocol::permit_key(resource, i)))
        .collect();
    let owners: Vec<Option<String>> = conn.query(redis::cmd("MGET").arg(&slots[..])).await?;
    for (i, (key, owner)) in (0..max).zip(slots.iter().zip(owners)) {
        if let Some(owner) = owner {
            let holder = holder_of(conn, key, Some(&owner)).await?;
            state.permits.push(Slot {
                slot: i,
                owner,
                holder,
            });
        }
    }
    if state.owner.as_deref() == Some(protocol::READERS_MARKER) {
        let (secs, micros): (i64, i64) = conn.query(&redis::cmd("TIME")).await?;
        let now_ms = secs * 1000 + micros / 1000;
        let readers: Vec<(String, f64)> = conn
            .query(
                redis::cmd("ZRANGE")
                    .arg(key(protocol::readers_key(resource)))
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"),
            )
            .await?;
        // Entries whose time ran out are left for the next script to drop: not readers.
        state.readers = readers
            .into_iter()
            .map(|(owner, until)| Reader {
                owner,
                left_ms: until as i64 - now_ms,
            })
            .filter(|r| r.left_ms > 0)
            .collect();
    }
    state.writer_record = conn
        .query(redis::cmd("GET").arg(key(protocol::writer_key(resource))))
        .await?;
    let newest: Vec<String> = conn
        .query(
            redis::cmd("ZREVRANGE")
                .arg(key(protocol::leaders_key(resource)))
                .arg(0)
                .arg(0),
        )
        .await?;
    if let Some((term, value)) = newest.first().and_then(|e| e.split_once(' ')) {
        let held: i64 = conn
            .query(redis::cmd("EXISTS").arg(key(protocol::election_key(resource))))
            .await?;
        state.leader = Some(LeaderEntry {
            term: term.parse().unwrap_or(0),
            value: value.to_owned(),
            held: held == 1,
        });
    }
    Ok(())
}

/// Asks every node, concurrently.
pub(crate) async fn probe(nodes: &[Node], resource: &str, timeout: Duration) -> Vec<NodeState> {
    futures_util::future::join_all(nodes.iter().map(|n| probe_node(n, resource, timeout))).await
}

/// The one-line verdict over all nodes.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    pub(crate) quorum: usize,
    pub(crate) reachable: usize,
    /// The owner that holds a quorum, if any.
    pub(crate) holder: Option<String>,
    /// On how many nodes the most common owner is set.
    pub(crate) holder_nodes: usize,
    /// The largest fence counter seen.
    pub(crate) max_fence_counter: Option<u64>,
    /// Nodes where the key exists with a type that is not a string.
    pub(crate) wrong_type: Vec<String>,
    /// Who holds it, as the holder's client stored it on a node that holds its owner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder_label: Option<String>,
    /// A semaphore's permits held on a quorum: slot, owner, on how many nodes, holder label.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) permits: Vec<(u32, String, usize, Option<String>)>,
    /// A read-write lock's readers on a quorum: owner, on how many nodes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) readers: Vec<(String, usize)>,
    /// An election's newest leader on a quorum of logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) leader: Option<LeaderEntry>,
}

/// Summarizes the node states. No I/O.
pub(crate) fn summarize(states: &[NodeState]) -> Summary {
    let quorum = states.len() / 2 + 1;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in states {
        if let Some(t) = &s.owner {
            *counts.entry(t).or_default() += 1;
        }
    }
    let top = counts.iter().max_by_key(|(_, n)| **n);
    let holder_label = top.and_then(|(owner, _)| {
        states
            .iter()
            .filter(|s| s.owner.as_deref() == Some(*owner))
            .find_map(|s| s.holder.clone())
    });
    let mut permits: BTreeMap<(u32, &str), (usize, Option<&str>)> = BTreeMap::new();
    let mut readers: BTreeMap<&str, usize> = BTreeMap::new();
    let mut leaders: BTreeMap<(u64, &str), (usize, bool)> = BTreeMap::new();
    for s in states {
        for p in &s.permits {
            let e = permits.entry((p.slot, &p.owner)).or_default();
            e.0 += 1;
            e.1 = e.1.or(p.holder.as_deref());
        }
        for r in &s.readers {
            *readers.entry(&r.owner).or_default() += 1;
        }
        if let Some(l) = &s.leader {
            let e = leaders.entry((l.term, &l.value)).or_default();
            e.0 += 1;
            e.1 |= l.held;
        }
    }
    Summary {
        permits: permits
            .into_iter()
            .filter(|(_, (n, _))| *n >= quorum)
            .map(|((slot, owner), (n, holder))| {
                (slot, owner.to_owned(), n, holder.map(str::to_owned))
            })
            .collect(),
        readers: readers
            .into_iter()
            .filter(|(_, n)| *n >= quorum)
            .map(|(owner, n)| (owner.to_owned(), n))
            .collect(),
        // The newest term a quorum of logs holds: what an observer reports.
        leader: leaders
            .into_iter()
            .rev()
            .find(|(_, (n, _))| *n >= quorum)
            .map(|((term, value), (_, held))| LeaderEntry {
                term,
                value: value.to_owned(),
                held,
            }),
        holder_label,
        quorum,
        reachable: states.iter().filter(|s| s.reachable).count(),
        holder: top
            .filter(|(_, n)| **n >= quorum)
            .map(|(t, _)| (*t).to_owned()),
        holder_nodes: top.map_or(0, |(_, n)| *n),
        max_fence_counter: states
            .iter()
            .filter_map(|s| s.fence_counter.as_deref()?.parse::<u64>().ok())
            .max(),
        wrong_type: states
            .iter()
            .filter_map(|s| s.wrong_type().map(|t| format!("{} ({t})", s.node)))
            .collect(),
    }
}

/// If the resource's key is not a lock key on some node, a sentence saying so, for errors of
/// the lock commands (a list at the resource name looks like "held by another owner" to SET NX).
pub(crate) async fn explain_wrong_type(settings: &Settings, resource: &str) -> Option<String> {
    let nodes = Node::parse_all(&settings.nodes, &settings.tls).ok()?;
    let states = probe(&nodes, resource, PROBE_TIMEOUT).await;
    let summary = summarize(&states);
    if !summary.wrong_type.is_empty() {
        return Some(format!(
            "the key {resource:?} is not a lock key on {}: some other data uses this name (WRONGTYPE); choose another resource name, or delete that key if it is stale",
            summary.wrong_type.join(", ")
        ));
    }
    let plain: Vec<&str> = states
        .iter()
        .filter(|s| s.is_plain_value())
        .map(|s| s.node.as_str())
        .collect();
    (!plain.is_empty()).then(|| {
        format!(
            "the key {resource:?} on {} is a plain value without a TTL, not a fencelock lock: delete it or choose another name",
            plain.join(", ")
        )
    })
}

fn fmt_pttl(pttl: Option<i64>) -> String {
    match pttl {
        None | Some(-2) => "-".into(),
        Some(-1) => "no TTL".into(),
        Some(ms) => format!("{:.1}s", ms as f64 / 1000.0),
    }
}

fn render(resource: &str, states: &[NodeState], summary: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "lock {resource:?}: {}", verdict(states, summary));
    if let Some(label) = &summary.holder_label {
        let _ = writeln!(out, "holder: {}", show_holder(label));
    }
    if summary.reachable < states.len() {
        let _ = writeln!(
            out,
            "{} of {} node(s) unreachable: what they hold is unknown",
            states.len() - summary.reachable,
            states.len()
        );
    }
    write_table(&mut out, states, summary);
    for s in states {
        if let Some(place) = &s.cluster {
            let _ = writeln!(
                out,
                "{}: a Redis Cluster; keys tagged {} in slot {}, read on its primary {}",
                s.node, place.tag, place.slot, place.primary
            );
        }
    }
    let _ = writeln!(
        out,
        "NODE COUNTER: each node's fence counter, one per node and shared by every resource on it (a fenced grant's token is above it), not this lock's"
    );
    write_family(&mut out, resource, summary);
    if !summary.wrong_type.is_empty() {
        let _ = writeln!(
            out,
            "the key {resource:?} holds non-lock data on {}: choose another resource name, or delete that key if it is stale",
            summary.wrong_type.join(", ")
        );
    }
    out
}

/// A semaphore's permits, a read-write lock's readers and an election's leader, when the nodes
/// keep any under this name.
fn write_family(out: &mut String, resource: &str, summary: &Summary) {
    if !summary.permits.is_empty() {
        let _ = writeln!(
            out,
            "semaphore {resource:?}: {} permit(s) held",
            summary.permits.len()
        );
        for (slot, owner, nodes, holder) in &summary.permits {
            let by = holder
                .as_deref()
                .map(|h| format!(" by {}", show_holder(h)))
                .unwrap_or_default();
            let _ = writeln!(out, "  permit {slot}: owner {owner}{by} on {nodes} node(s)");
        }
    }
    if !summary.readers.is_empty() {
        let _ = writeln!(
            out,
            "read-write lock {resource:?}: {} reader(s), no writer",
            summary.readers.len()
        );
        for (owner, nodes) in &summary.readers {
            let _ = writeln!(out, "  reader: owner {owner} on {nodes} node(s)");
        }
    }
    if let Some(leader) = &summary.leader {
        let _ = writeln!(
            out,
            "election {resource:?}: leader {:?}, term {}{}",
            leader.value,
            leader.term,
            if leader.held {
                ""
            } else {
                " (its lock is free now: it resigned or died; the next leader takes a higher term)"
            }
        );
    }
}

/// Whether a quorum holds the lock, in words.
fn verdict(states: &[NodeState], summary: &Summary) -> String {
    if summary.reachable < summary.quorum {
        return format!(
            "unknown: {} of {} node(s) reachable, a quorum needs {}",
            summary.reachable,
            states.len(),
            summary.quorum
        );
    }
    match &summary.holder {
        Some(owner) if owner == fencelock::protocol::READERS_MARKER => format!(
            "held by {} reader(s) (a read-write lock) on {} of {} node(s) (quorum {})",
            summary.readers.len(),
            summary.holder_nodes,
            states.len(),
            summary.quorum
        ),
        Some(owner) => format!(
            "held by owner {owner} on {} of {} node(s) (quorum {})",
            summary.holder_nodes,
            states.len(),
            summary.quorum
        ),
        None if summary.holder_nodes > 0 => format!(
            "not held: the largest group of equal owners is on {} node(s), short of the quorum {} (leftovers expire by their TTL)",
            summary.holder_nodes, summary.quorum
        ),
        None if !summary.permits.is_empty() => format!(
            "a semaphore: {} permit(s) held, the name itself is not held as a lock",
            summary.permits.len()
        ),
        None => format!("not held on any of {} node(s)", states.len()),
    }
}

/// One reachable node's line of the table.
#[derive(Debug)]
struct Row<'a> {
    state: String,
    owner: &'a str,
    pttl: String,
    waiting: String,
    fence: &'a str,
}

impl Row<'_> {
    /// The row of `s`, `None` when it could not be reached.
    fn of<'a>(s: &'a NodeState, summary: &Summary) -> Option<Row<'a>> {
        if !s.reachable {
            return None;
        }
        Some(Row {
            state: key_state(s, summary),
            owner: s.owner.as_deref().unwrap_or("-"),
            pttl: fmt_pttl(s.pttl_ms),
            waiting: s.waiting.map_or("-".to_owned(), |n| n.to_string()),
            fence: s.fence_counter.as_deref().unwrap_or("-"),
        })
    }
}

/// What the node's key is: free, held by the quorum's holder, held by another, or not a lock
/// key.
fn key_state(s: &NodeState, summary: &Summary) -> String {
    match (s.key_type.as_deref(), &s.owner) {
        (Some("none"), _) => "free".to_owned(),
        (Some("string"), Some(t)) if summary.holder.as_deref() == Some(t) => "held".to_owned(),
        (Some("string"), Some(_)) => "held (other)".to_owned(),
        (Some(other), _) => format!("wrong type: {other}"),
        (None, _) => "?".to_owned(),
    }
}

/// Per node: state, owner, PTTL, waiting, fence counter; the error of an unreachable one.
fn write_table(out: &mut String, states: &[NodeState], summary: &Summary) {
    let rows: Vec<Option<Row<'_>>> = states.iter().map(|s| Row::of(s, summary)).collect();
    let width = states
        .iter()
        .map(|s| s.node.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let column = |len: fn(&Row<'_>) -> usize, least: usize| {
        rows.iter()
            .flatten()
            .map(len)
            .max()
            .unwrap_or(least)
            .max(least)
    };
    let state_w = column(|r| r.state.len(), 5);
    let owner_w = column(|r| r.owner.len(), 5);
    let _ = writeln!(
        out,
        "{:<width$}  {:<state_w$}  {:<owner_w$}  {:>8}  {:>7}  NODE COUNTER",
        "NODE", "STATE", "OWNER", "PTTL", "WAITING"
    );
    for (s, row) in states.iter().zip(&rows) {
        let Some(Row {
            state,
            owner,
            pttl,
            waiting,
            fence,
        }) = row
        else {
            let _ = writeln!(
                out,
                "{:<width$}  unreachable: {}",
                s.node,
                s.error.as_deref().unwrap_or("?")
            );
            continue;
        };
        let _ = writeln!(
            out,
            "{:<width$}  {state:<state_w$}  {owner:<owner_w$}  {pttl:>8}  {waiting:>7}  {fence}",
            s.node
        );
        if let Some(err) = &s.error {
            let _ = writeln!(out, "{:<width$}  note: {err}", "");
        }
    }
}

/// `fencelock inspect RESOURCE` on Redis nodes.
///
/// # Errors
///
/// A usage failure for a bad node URL; unreachable nodes are shown, not errors.
pub(crate) async fn inspect(settings: &Settings, resource: &str, json: bool) -> anyhow::Result<u8> {
    // A cluster node is read on the primary that owns its tag's slot now.
    let nodes = Node::parse_all_with_clusters(&settings.nodes, &settings.tls)?;
    let timeout = PROBE_TIMEOUT.max(settings.node_timeout);
    let states = probe(&nodes, resource, timeout).await;
    let summary = summarize(&states);
    let blind = (summary.reachable < summary.quorum).then(|| {
        format!(
            "inspect {resource:?}: {} of {} node(s) reachable, a quorum needs {}: whether it is held is unknown; check the nodes (`fencelock doctor`)",
            summary.reachable,
            states.len(),
            summary.quorum
        )
    });
    if json {
        let value = serde_json::json!({
            "resource": resource,
            "fence_counter_key": fencelock::protocol::FENCE_COUNTER_KEY,
            "fence_counter_scope": "node",
            "line_key": fencelock::protocol::queue_key(resource),
            "nodes": states,
            "summary": summary,
            "error": blind,
        });
        println!("{value}");
    } else {
        print!("{}", render(resource, &states, &summary));
    }
    match blind {
        // No quorum read: "not held" would be a guess. The table above shows why per node.
        Some(message) => Err(Failure::new(exit::UNAVAILABLE, message).into()),
        None => Ok(exit::OK),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(owner: Option<&str>, key_type: &str) -> NodeState {
        NodeState {
            node: "n".into(),
            reachable: true,
            error: None,
            key_type: Some(key_type.into()),
            owner: owner.map(Into::into),
            pttl_ms: Some(5000),
            fence_counter: Some("7".into()),
            waiting: Some(0),
            holder: owner.map(|t| format!("host=h pid=1 label=job {t}")),
            permits: Vec::new(),
            readers: Vec::new(),
            writer_record: None,
            leader: None,
            cluster: None,
        }
    }

    #[test]
    fn a_quorum_of_equal_tokens_is_the_holder() {
        let states = [
            state(Some("a"), "string"),
            state(Some("a"), "string"),
            state(None, "none"),
        ];
        let summary = summarize(&states);
        assert_eq!(summary.holder.as_deref(), Some("a"));
        assert_eq!(summary.holder_nodes, 2);
        assert_eq!(summary.max_fence_counter, Some(7));
        assert_eq!(
            summary.holder_label.as_deref(),
            Some("host=h pid=1 label=job a")
        );
        assert!(render("r", &states, &summary).contains("holder: \"job a\" (process 1 on h)"));
    }

    #[test]
    fn split_tokens_hold_nothing() {
        let states = [
            state(Some("a"), "string"),
            state(Some("b"), "string"),
            state(None, "none"),
        ];
        assert_eq!(summarize(&states).holder, None);
    }

    #[test]
    fn a_list_is_a_key_of_the_wrong_type() {
        let states = [
            state(None, "list"),
            state(None, "none"),
            state(None, "none"),
        ];
        let summary = summarize(&states);
        assert_eq!(summary.wrong_type.len(), 1);
        assert!(render("r", &states, &summary).contains("wrong type: list"));
    }
}
