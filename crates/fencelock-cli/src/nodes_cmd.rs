//! `fencelock nodes`: the node URLs the other commands use, for programs built on the library
//! (`fencelock::Config::from_env` reads `FENCELOCK_NODES`); `nodes --record`: the operator's
//! rewrite of the node set recorded on the nodes (`fencelock::nodeset`).

use crate::cli::Global;
use crate::exit;
use crate::settings;

/// Prints the nodes: comma separated, or as an `export` line for `eval`, or as JSON.
///
/// # Errors
///
/// As [`settings::resolve`]: a usage failure when no nodes are configured anywhere.
pub(crate) fn nodes(global: &Global, export: bool) -> anyhow::Result<u8> {
    let settings = settings::resolve(global)?;
    let list = settings.nodes.join(",");
    if global.json {
        let value = serde_json::json!({
            "nodes": settings.nodes,
            "source": settings.source.to_string(),
            "env": format!("FENCELOCK_NODES={list}"),
        });
        println!("{value}");
    } else if export {
        println!("export FENCELOCK_NODES={}", shell_quote(&list));
    } else {
        println!("{list}");
    }
    Ok(exit::OK)
}

/// How long `--record` waits for each node.
const RECORD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `nodes --record`: writes this list, with each node's identity, as the node set on every node.
///
/// # Errors
///
/// A usage failure for a bad list; an unavailable failure, writing nothing, when a node does
/// not answer (a set recorded on some nodes only would leave two records).
pub(crate) async fn record(global: &Global) -> anyhow::Result<u8> {
    use fencelock::nodeset::{self, Member};
    use fencelock::protocol::{NODE_MARKER_KEY, NODE_SET_KEY};
    let settings = settings::resolve(global)?;
    let nodes = crate::node::Node::parse_all(&settings.nodes, &settings.tls)?;
    let mut conns = Vec::with_capacity(nodes.len());
    let mut members = Vec::with_capacity(nodes.len());
    for node in &nodes {
        let fail = |why: String| {
            exit::Failure::new(
                exit::UNAVAILABLE,
                format!("node {}: {why}; nothing was recorded: every node must answer to record the set", node.name),
            )
        };
        let mut conn = node.connect(RECORD_TIMEOUT).await.map_err(fail)?;
        let marker: Option<String> = conn
            .query(redis::cmd("GET").arg(NODE_MARKER_KEY))
            .await
            .map_err(fail)?;
        members.push(Member {
            id: marker
                .as_deref()
                .and_then(nodeset::identity)
                .map(str::to_owned),
            addr: node.addr.clone(),
        });
        conns.push(conn);
    }
    let text = nodeset::encode(&members);
    for (node, conn) in nodes.iter().zip(&mut conns) {
        conn.query::<()>(redis::cmd("SET").arg(NODE_SET_KEY).arg(&text))
            .await
            .map_err(|why| {
                exit::Failure::new(
                    exit::UNAVAILABLE,
                    format!("node {}: recording the node set failed: {why}; run the command again once it answers", node.name),
                )
            })?;
    }
    let addrs: Vec<&str> = members.iter().map(|m| m.addr.as_str()).collect();
    if global.json {
        println!("{}", serde_json::json!({ "recorded": addrs }));
    } else {
        eprintln!(
            "fencelock: recorded the node set [{}] on {} node(s)",
            addrs.join(", "),
            nodes.len()
        );
    }
    Ok(exit::OK)
}

/// `text` as one shell word: as it is when it holds only safe characters, else in single quotes.
fn shell_quote(text: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:,@=+%".contains(c);
    if !text.is_empty() && text.chars().all(safe) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_what_the_shell_would_split_or_expand() {
        assert_eq!(
            shell_quote("redis://127.0.0.1:7001,redis://127.0.0.1:7002"),
            "redis://127.0.0.1:7001,redis://127.0.0.1:7002"
        );
        assert_eq!(
            shell_quote("redis://:pa$s'w@h:1"),
            r"'redis://:pa$s'\''w@h:1'"
        );
    }
}
