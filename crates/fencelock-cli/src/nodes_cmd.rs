//! `fencelock nodes`: the node URLs the other commands use, for programs built on the library
//! (`fencelock::Config::from_env` reads `FENCELOCK_NODES`).

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
