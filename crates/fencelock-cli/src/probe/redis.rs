//! A Redis node set's reading for `inspect` (what each node holds for one resource), for
//! `doctor` (`redis/doctor.rs`: what each node is and how it is configured) and for the lock
//! commands' errors (a key of the wrong type). Read-only: it never changes a key.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::show_holder;
use crate::exit;
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
    /// The holder's token (the value of the key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) token: Option<String>,
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
    /// Who holds it, as its client stored it (`fencelock:holder:<resource>`, see
    /// `fencelock::Holder`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<String>,
}

impl NodeState {
    fn unreachable(node: &Node, why: String) -> NodeState {
        NodeState {
            node: node.name.clone(),
            reachable: false,
            error: Some(why),
            key_type: None,
            token: None,
            pttl_ms: None,
            fence_counter: None,
            waiting: None,
            holder: None,
        }
    }

    /// Whether the key is a string without a TTL that is not an owner token (32 lowercase hex
    /// digits): some program's value, not a lock whose TTL was removed (that one is waited for).
    pub(crate) fn is_plain_value(&self) -> bool {
        let token_like = self.token.as_deref().is_some_and(|t| {
            t.len() == 32
                && t.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        self.key_type.as_deref() == Some("string") && self.pttl_ms == Some(-1) && !token_like
    }

    /// Whether the key exists but is not a string, so it cannot be a lock key.
    pub(crate) fn wrong_type(&self) -> Option<&str> {
        self.key_type
            .as_deref()
            .filter(|t| *t != "string" && *t != "none")
    }
}

async fn probe_node(node: &Node, resource: &str, timeout: Duration) -> NodeState {
    let mut conn = match node.connect(timeout).await {
        Ok(conn) => conn,
        Err(why) => return NodeState::unreachable(node, why),
    };
    let key_type = match conn.query::<String>(redis::cmd("TYPE").arg(resource)).await {
        Ok(t) => t,
        Err(why) => return NodeState::unreachable(node, format!("TYPE failed: {why}")),
    };
    let mut state = NodeState {
        node: node.name.clone(),
        reachable: true,
        error: None,
        key_type: Some(key_type.clone()),
        token: None,
        pttl_ms: None,
        fence_counter: None,
        waiting: None,
        holder: None,
    };
    if key_type != "none" {
        state.pttl_ms = conn
            .query::<i64>(redis::cmd("PTTL").arg(resource))
            .await
            .ok();
    }
    if key_type == "string" {
        match conn
            .query::<Option<String>>(redis::cmd("GET").arg(resource))
            .await
        {
            Ok(token) => state.token = token,
            Err(why) => state.error = Some(format!("GET failed: {why}")),
        }
        let holder_key = fencelock::protocol::holder_key(resource);
        match conn
            .query::<Option<String>>(redis::cmd("GET").arg(&holder_key))
            .await
        {
            Ok(holder) => state.holder = holder,
            Err(why) => state.error = Some(format!("GET {holder_key} failed: {why}")),
        }
    }
    // The node's fence counter (one per node); a legacy per-resource counter left by an older
    // version counts too until the resource's next fenced grant deletes it.
    let keys = [
        fencelock::protocol::FENCE_COUNTER_KEY.to_string(),
        fencelock::protocol::counter_key(resource),
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
    let line_key = fencelock::protocol::queue_key(resource);
    match conn.query::<u64>(redis::cmd("ZCARD").arg(&line_key)).await {
        Ok(n) => state.waiting = Some(n),
        Err(why) => state.error = Some(format!("ZCARD {line_key} failed: {why}")),
    }
    state
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
    /// The token that holds a quorum, if any.
    pub(crate) holder: Option<String>,
    /// On how many nodes the most common token is set.
    pub(crate) holder_nodes: usize,
    /// The largest fence counter seen.
    pub(crate) max_fence_counter: Option<u64>,
    /// Nodes where the key exists with a type that is not a string.
    pub(crate) wrong_type: Vec<String>,
    /// Who holds it, as the holder's client stored it on a node that holds its token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder_label: Option<String>,
}

/// Summarizes the node states. No I/O.
pub(crate) fn summarize(states: &[NodeState]) -> Summary {
    let quorum = states.len() / 2 + 1;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in states {
        if let Some(t) = &s.token {
            *counts.entry(t).or_default() += 1;
        }
    }
    let top = counts.iter().max_by_key(|(_, n)| **n);
    let holder_label = top.and_then(|(token, _)| {
        states
            .iter()
            .filter(|s| s.token.as_deref() == Some(*token))
            .find_map(|s| s.holder.clone())
    });
    Summary {
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
    if !summary.wrong_type.is_empty() {
        let _ = writeln!(
            out,
            "the key {resource:?} holds non-lock data on {}: choose another resource name, or delete that key if it is stale",
            summary.wrong_type.join(", ")
        );
    }
    out
}

/// Whether a quorum holds the lock, in words.
fn verdict(states: &[NodeState], summary: &Summary) -> String {
    match &summary.holder {
        Some(token) => format!(
            "held by token {token} on {} of {} node(s) (quorum {})",
            summary.holder_nodes,
            states.len(),
            summary.quorum
        ),
        None if summary.holder_nodes > 0 => format!(
            "not held: the largest group of equal tokens is on {} node(s), short of the quorum {} (leftovers expire by their TTL)",
            summary.holder_nodes, summary.quorum
        ),
        None => format!("not held on any of {} node(s)", states.len()),
    }
}

/// One reachable node's line of the table.
#[derive(Debug)]
struct Row<'a> {
    state: String,
    token: &'a str,
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
            token: s.token.as_deref().unwrap_or("-"),
            pttl: fmt_pttl(s.pttl_ms),
            waiting: s.waiting.map_or("-".to_owned(), |n| n.to_string()),
            fence: s.fence_counter.as_deref().unwrap_or("-"),
        })
    }
}

/// What the node's key is: free, held by the quorum's holder, held by another, or not a lock
/// key.
fn key_state(s: &NodeState, summary: &Summary) -> String {
    match (s.key_type.as_deref(), &s.token) {
        (Some("none"), _) => "free".to_owned(),
        (Some("string"), Some(t)) if summary.holder.as_deref() == Some(t) => "held".to_owned(),
        (Some("string"), Some(_)) => "held (other)".to_owned(),
        (Some(other), _) => format!("wrong type: {other}"),
        (None, _) => "?".to_owned(),
    }
}

/// Per node: state, token, PTTL, waiting, fence counter; the error of an unreachable one.
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
    let token_w = column(|r| r.token.len(), 5);
    let _ = writeln!(
        out,
        "{:<width$}  {:<state_w$}  {:<token_w$}  {:>8}  {:>7}  FENCE",
        "NODE", "STATE", "TOKEN", "PTTL", "WAITING"
    );
    for (s, row) in states.iter().zip(&rows) {
        let Some(Row {
            state,
            token,
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
            "{:<width$}  {state:<state_w$}  {token:<token_w$}  {pttl:>8}  {waiting:>7}  {fence}",
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
    let nodes = Node::parse_all(&settings.nodes, &settings.tls)?;
    let timeout = PROBE_TIMEOUT.max(settings.node_timeout);
    let states = probe(&nodes, resource, timeout).await;
    let summary = summarize(&states);
    if json {
        let value = serde_json::json!({
            "resource": resource,
            "fence_counter_key": fencelock::protocol::FENCE_COUNTER_KEY,
            "line_key": fencelock::protocol::queue_key(resource),
            "nodes": states,
            "summary": summary,
        });
        println!("{value}");
    } else {
        print!("{}", render(resource, &states, &summary));
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(token: Option<&str>, key_type: &str) -> NodeState {
        NodeState {
            node: "n".into(),
            reachable: true,
            error: None,
            key_type: Some(key_type.into()),
            token: token.map(Into::into),
            pttl_ms: Some(5000),
            fence_counter: Some("7".into()),
            waiting: Some(0),
            holder: token.map(|t| format!("host=h pid=1 label=job {t}")),
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
