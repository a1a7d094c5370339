//! The node set's record: which nodes a client's quorum is a majority of, kept on the nodes so
//! that clients configured with different node lists find each other out. No I/O: the reads
//! and writes are in `redis/nodeset.rs`. Public (hidden from the docs) for the CLI's `doctor`
//! and `nodes --record`; not part of the API.
//!
//! # Why
//!
//! Redlock's safety is that two majorities of one set of N nodes share a node. Two clients
//! given different lists (nodes 1-5 and nodes 4-8, as a rolling replacement leaves them) have
//! majorities that need not meet: both hold the lock. Nothing in a grant can tell, so the
//! lists are compared where they meet: on the nodes.
//!
//! # What a node stores (a protocol change)
//!
//! - Its identity: the run id in its restart marker (`fencelock:node`, see `quarantine.rs`),
//!   written once by the first client that sees the node's data and kept with that data. A
//!   URL is not an identity: clients may spell one node as a host name or an address, with
//!   `redis://` or `rediss://`, and all of them read the same marker. A node that loses its
//!   data gets a new identity with its new marker: it is a new node as far as the locks go.
//! - The record [`RECORD_KEY`] (no TTL, lives with the data): the node set as the client that
//!   wrote it saw it, one member per line, `<identity or -> <host:port>`. Written with `SET
//!   NX` by the first client that finds none (a new node, or one that lost its data), never
//!   rewritten by a client (`fencelock nodes --record` rewrites it, for an operator who changed
//!   the set on purpose).
//!
//! # The rule
//!
//! A client counts no node before it has read the record of every node it can reach (at most
//! the connect timeout), and counts none at all if one record does not describe its own set:
//! a record of another size, or one in which one of its nodes has no member. A node of the
//! client is a member of a record when their identities are equal, or their host:port are, or
//! some record or connection links the two (one node spelled two ways; a node whose data was
//! lost, reached at the address the record gives). Members are matched one to one.
//!
//! Then every node a client counts is a member of each record it read, and all records it
//! read describe sets of its own size N: two clients that read one common node count within one
//! set of N nodes, whose majorities meet. Two clients that never reach a common node (the
//! nodes they share are down whenever either connects) cannot be told apart from two separate
//! deployments: that case is not detected, and the docs say how to replace a node without it.
//!
//! The check runs when a connection is set up, never per grant: a node whose record changed
//! under a live connection (an operator's `--record`) is compared at the next connection.

/// The key of the node set's record on every node.
pub const RECORD_KEY: &str = "fencelock:nodes";

/// The first words of the error of a node refused for its record.
pub const CONFLICT: &str = "another node set";

/// One member of a recorded node set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The node's identity (its marker's run id), if the writer knew it.
    pub id: Option<String>,
    /// `host:port` as the writer spelled it.
    pub addr: String,
}

/// The record's text: one member per line, sorted by address.
pub fn encode(members: &[Member]) -> String {
    let mut lines: Vec<String> = members
        .iter()
        .map(|m| format!("{} {}", m.id.as_deref().unwrap_or("-"), m.addr))
        .collect();
    lines.sort_by(|a, b| {
        let addr = |l: &str| l.split_once(' ').map(|(_, a)| a.to_owned());
        addr(a).cmp(&addr(b))
    });
    lines.join("\n")
}

/// A record's members; `None` for a text that is not a record (then it counts as another set).
pub fn decode(text: &str) -> Option<Vec<Member>> {
    text.lines()
        .map(|line| {
            let (id, addr) = line.split_once(' ')?;
            if id.is_empty() || addr.is_empty() {
                return None;
            }
            Some(Member {
                id: (id != "-").then(|| id.to_owned()),
                addr: addr.to_owned(),
            })
        })
        .collect()
}

/// The identity of a node from its marker's value (`<run id>` or `<run id> clear`).
pub fn identity(marker: &str) -> Option<&str> {
    marker.split_whitespace().next()
}

/// Classes of names (identities and addresses) that denote one node: union-find over strings.
#[derive(Debug, Default)]
struct Aliases {
    names: Vec<String>,
    parent: Vec<usize>,
}

impl Aliases {
    fn index(&mut self, name: String) -> usize {
        if let Some(i) = self.names.iter().position(|n| *n == name) {
            return i;
        }
        self.names.push(name);
        self.parent.push(self.parent.len());
        self.parent.len() - 1
    }

    fn root(&self, mut i: usize) -> usize {
        while self.parent[i] != i {
            i = self.parent[i];
        }
        i
    }

    fn link(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.root(a), self.root(b));
        self.parent[ra] = rb;
    }

    /// The class of a member: its address, linked with its identity when known.
    fn of(&mut self, m: &Member) -> usize {
        let addr = self.index(format!("addr {}", m.addr));
        if let Some(id) = &m.id {
            let id = self.index(format!("id {id}"));
            self.link(addr, id);
        }
        addr
    }
}

/// Checks the records read from the nodes (`(address of the node it came from, members)`)
/// against the client's own set, as far as it knows it (`own`: each node's address and, once
/// connected, its identity). `Ok` when every record describes the client's set; else the
/// configuration error, naming both sets.
pub fn check(own: &[Member], records: &[(String, Vec<Member>)]) -> Result<(), String> {
    let mut aliases = Aliases::default();
    for m in own {
        aliases.of(m);
    }
    for (_, record) in records {
        for m in record {
            aliases.of(m);
        }
    }
    for (from, record) in records {
        if let Some(why) = mismatch(&mut aliases, own, record) {
            return Err(format!(
                "{CONFLICT}: node {from} serves the node set [{}], this client is configured with [{}] ({why}). Clients given different node lists can both hold a lock. Give every client the same list; if the set was changed on purpose, stop every client of the old set, then record the new one with `fencelock nodes --record` (see \"Replacing a node\" in docs/guarantees.md)",
                list(record),
                list(own),
            ));
        }
    }
    Ok(())
}

/// Why `record` does not describe the set `own`, if it does not.
fn mismatch(aliases: &mut Aliases, own: &[Member], record: &[Member]) -> Option<String> {
    if record.len() != own.len() {
        return Some(format!(
            "{} node(s) there, {} here",
            record.len(),
            own.len()
        ));
    }
    let classes: Vec<usize> = record.iter().map(|m| aliases.of(m)).collect();
    let mut taken = vec![false; record.len()];
    for m in own {
        let class = aliases.of(m);
        let root = aliases.root(class);
        let found = classes
            .iter()
            .enumerate()
            .find(|(i, c)| !taken[*i] && aliases.root(**c) == root);
        match found {
            Some((i, _)) => taken[i] = true,
            None => return Some(format!("{} is not in it", m.addr)),
        }
    }
    None
}

fn list(members: &[Member]) -> String {
    let mut addrs: Vec<&str> = members.iter().map(|m| m.addr.as_str()).collect();
    addrs.sort_unstable();
    addrs.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: Option<&str>, addr: &str) -> Member {
        Member {
            id: id.map(str::to_owned),
            addr: addr.to_owned(),
        }
    }

    fn set(range: std::ops::RangeInclusive<u8>) -> Vec<Member> {
        range
            .map(|i| m(Some(&format!("id{i}")), &format!("h:{i}")))
            .collect()
    }

    #[test]
    fn a_record_round_trips_and_junk_is_not_one() {
        let members = vec![m(Some("abc"), "h:2"), m(None, "h:1")];
        let text = encode(&members);
        assert_eq!(text, "- h:1\nabc h:2");
        let mut back = decode(&text).unwrap();
        back.reverse();
        assert_eq!(back, members);
        assert_eq!(decode("nonsense"), None);
        assert_eq!(identity("f00 clear"), Some("f00"));
    }

    #[test]
    fn overlapping_lists_conflict_and_the_error_names_both() {
        let a = set(1..=5);
        let b = set(4..=8);
        let err = check(&b, &[("h:4".into(), a.clone())]).unwrap_err();
        assert!(err.starts_with(CONFLICT), "{err}");
        assert!(err.contains("[h:1, h:2, h:3, h:4, h:5]"), "{err}");
        assert!(err.contains("[h:4, h:5, h:6, h:7, h:8]"), "{err}");
        // One node replaced by a new one at a new address: still another set.
        let mut c = set(2..=5);
        c.push(m(Some("fresh"), "h:9"));
        assert!(check(&c, &[("h:2".into(), a.clone())]).is_err());
        // A subset of the same size is impossible, a smaller list is another set.
        assert!(check(&set(1..=3), &[("h:1".into(), a.clone())]).is_err());
        assert!(check(&a, &[("h:1".into(), a.clone())]).is_ok());
    }

    #[test]
    fn spellings_and_lost_data_are_the_same_set() {
        let a = set(1..=3);
        // Another spelling of node 2, matched by its identity.
        let own = vec![
            m(Some("id1"), "h:1"),
            m(Some("id2"), "ip:2"),
            m(Some("id3"), "h:3"),
        ];
        assert!(check(&own, &[("h:1".into(), a.clone())]).is_ok());
        // Node 3 lost its data (a new identity) at the address the record gives.
        let own = vec![
            m(Some("id1"), "h:1"),
            m(Some("id2"), "h:2"),
            m(Some("new3"), "h:3"),
        ];
        assert!(check(&own, &[("h:1".into(), a.clone())]).is_ok());
        // Both: lost data and another spelling, linked by the record the node itself got
        // from a client that spells it as the first record does.
        let own = vec![
            m(Some("id1"), "h:1"),
            m(Some("id2"), "h:2"),
            m(Some("new3"), "ip:3"),
        ];
        assert!(check(&own, &[("h:1".into(), a.clone())]).is_err());
        let relinked = vec![
            m(Some("id1"), "h:1"),
            m(Some("id2"), "h:2"),
            m(Some("new3"), "h:3"),
        ];
        assert!(check(
            &own,
            &[("h:1".into(), a.clone()), ("ip:3".into(), relinked)]
        )
        .is_ok());
        // Unknown identities (nodes not reached yet) match by address.
        let own = vec![m(Some("id1"), "h:1"), m(None, "h:2"), m(None, "h:3")];
        assert!(check(&own, &[("h:1".into(), a)]).is_ok());
    }

    #[test]
    fn members_match_one_to_one() {
        // Two addresses of one node do not fill two places of a record.
        let a = vec![m(Some("x"), "h:1"), m(Some("y"), "h:2")];
        let own = vec![m(Some("x"), "h:1"), m(Some("x"), "ip:1")];
        assert!(check(&own, &[("h:1".into(), a)]).is_err());
    }
}
