//! The oldest Redis fencelock's scripts run on: pure logic, no I/O.
//!
//! The scripts read the node's clock (`TIME`) before they write. Redis 4 refuses a write after a
//! non-deterministic command in a script (it replicates scripts verbatim; Redis 5 replicates
//! their effects), so there a script fails half-way, after some of its writes. A connection reads
//! `redis_version` from the `INFO server` it already asks for (see `conn.rs`) and refuses an older
//! node; `fencelock doctor` fails it.

/// The oldest major version of Redis the scripts run on.
pub(crate) const MIN_MAJOR: u64 = 5;

/// The description of the error a refused node's connection fails with; `describe` recognises
/// it by this and shows the detail alone.
pub(crate) const UNSUPPORTED: &str = "unsupported Redis version";

/// Whether a node that reports `version` (`INFO server`'s `redis_version`, such as "4.0.14") is
/// too old for the scripts. A version that does not start with a number is not judged: servers
/// that speak the protocol report odd strings, and a real Redis always reports `x.y.z`.
pub(crate) fn too_old(version: &str) -> bool {
    let major = version.trim().split('.').next().unwrap_or("");
    major.parse::<u64>().is_ok_and(|m| m < MIN_MAJOR)
}

/// Why a node at `node` (as votes name it) that reports `version` is refused, if it is.
pub(crate) fn refusal(version: &str, node: &str) -> Option<String> {
    too_old(version).then(|| {
        format!(
            "redis {} on {node}: fencelock's scripts need Redis {MIN_MAJOR} or newer; upgrade the node",
            version.trim()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_below_5_are_too_old() {
        for old in ["4.0.14", "3.2.12", "2.8.24", "4.9.105", " 4.0.0 "] {
            assert!(too_old(old), "{old}");
        }
        for new in [
            "5.0.0",
            "5.0.14",
            "6.2.14",
            "7.0.15",
            "7.4.1",
            "10.0.0",
            "255.255.255",
        ] {
            assert!(!too_old(new), "{new}");
        }
    }

    #[test]
    fn an_unreadable_version_is_not_judged() {
        for odd in ["", "?", "v7", "unknown", "x.4.0"] {
            assert!(!too_old(odd), "{odd:?}");
        }
    }

    #[test]
    fn the_refusal_names_the_version_the_node_and_the_way_out() {
        assert_eq!(
            refusal("4.0.14", "redis://127.0.0.1:6380/0").as_deref(),
            Some(
                "redis 4.0.14 on redis://127.0.0.1:6380/0: fencelock's scripts need Redis 5 or newer; upgrade the node"
            )
        );
        assert_eq!(refusal("5.0.0", "redis://127.0.0.1:6380/0"), None);
    }
}
