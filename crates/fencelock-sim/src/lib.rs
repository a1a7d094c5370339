//! fencelock's deterministic simulation (issue 28): simulated Redis nodes that run the library's
//! own Lua scripts (the texts `fencelock::protocol::ALL_SCRIPTS` assembles, never a copy) in
//! Lua 5.1, over an in-memory keyspace whose expiries follow each node's own simulated clock.
//! `tests/conformance.rs` holds every reply to a real redis-server's. See docs/simulation.md.

pub mod clock;
mod keyspace;
pub mod logs;
pub mod net;
mod node;
pub mod resp;
pub mod run;
pub mod slots;

pub use keyspace::{Keyspace, Migrated};
pub use node::{sha1, Node, Persistence};
pub use resp::Reply;

/// The scripts a client loads on every new connection, by name, in the order of
/// `fencelock::protocol::ALL_SCRIPTS`.
pub const SCRIPT_NAMES: [&str; 15] = [
    "acquire_many",
    "acquire_queued",
    "acquire_fenced",
    "write_back",
    "release",
    "extend",
    "mark",
    "announce_ahead",
    "reseed",
    "election_append",
    "acquire_permit",
    "read_acquire",
    "read_extend",
    "read_release",
    "write_record",
];

/// The text of the script named `name` (one of [`SCRIPT_NAMES`]).
pub fn script(name: &str) -> &'static str {
    let i = SCRIPT_NAMES
        .iter()
        .position(|n| *n == name)
        .unwrap_or_else(|| panic!("no script named {name}; the names: {SCRIPT_NAMES:?}"));
    fencelock::protocol::ALL_SCRIPTS[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_match_the_published_texts() {
        use fencelock::protocol as p;
        assert_eq!(script("acquire_fenced"), p::ACQUIRE_FENCED_SCRIPT);
        assert_eq!(script("write_back"), p::WRITE_BACK_SCRIPT);
        assert_eq!(script("release"), p::RELEASE_SCRIPT);
        assert_eq!(script("announce_ahead"), p::ANNOUNCE_AHEAD_SCRIPT);
        assert_eq!(script("acquire_permit"), p::ACQUIRE_PERMIT_SCRIPT);
        assert_eq!(script("read_acquire"), p::READ_ACQUIRE_SCRIPT);
        assert_eq!(script("read_extend"), p::READ_EXTEND_SCRIPT);
        assert_eq!(script("read_release"), p::READ_RELEASE_SCRIPT);
        assert_eq!(script("write_record"), p::WRITE_RECORD_SCRIPT);
        assert!(script("extend").starts_with(p::ANNOUNCE_FUNCTION));
        assert!(
            script("acquire_many").contains("acquire_many")
                || script("acquire_many").starts_with(p::ANNOUNCE_FUNCTION)
        );
    }
}
