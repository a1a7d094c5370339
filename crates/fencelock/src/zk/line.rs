//! The ZooKeeper lock's paths and its line of waiters: pure logic, no I/O.

/// The directory under the chroot where the locks live, one child per resource.
pub(crate) const LOCKS_DIR: &str = "/fencelock/locks";

/// The directory under the chroot where the semaphores live, one child per semaphore.
pub(crate) const SEMAPHORES_DIR: &str = "/fencelock/semaphores";

/// The directory under the chroot where the write locks' tokens are recorded for readers, one
/// persistent node per resource.
pub(crate) const WRITERS_DIR: &str = "/fencelock/writers";

/// What a read lock's owner tag ends with: its node is `<owner>-read-lock-<sequence>`.
const READER: &str = "-read";

/// What a semaphore's slot node is called before its number: `slot-<i>`.
const SLOT: &str = "slot-";

/// What separates a waiter's owner value from its sequence number in a node's name (Curator's
/// protected names carry `-lock-` too).
const MARK: &str = "-lock-";

/// A resource as one ZooKeeper path segment: ASCII letters, digits and `-_.:@+=,~` as they are,
/// every other byte of its UTF-8 as `%XX` (`/` would nest nodes, and ZooKeeper refuses some
/// characters); a segment of dots only (`.` and `..` are not node names) has its dots encoded.
/// The empty resource is `%`, which no non-empty resource encodes to.
pub(crate) fn segment(resource: &str) -> String {
    if resource.is_empty() {
        return "%".to_string();
    }
    let dots_only = resource.bytes().all(|b| b == b'.');
    let mut out = String::with_capacity(resource.len());
    for b in resource.bytes() {
        let plain = b.is_ascii_alphanumeric() || b"-_.:@+=,~".contains(&b);
        if plain && !(dots_only && b == b'.') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The node under which the waiters of `resource` line up: `<chroot>/fencelock/locks/<resource>`.
pub(crate) fn lock_dir(chroot: &str, resource: &str) -> String {
    format!("{chroot}{LOCKS_DIR}/{}", segment(resource))
}

/// The directory of the semaphore `name`: `<chroot>/fencelock/semaphores/<name>`.
pub(crate) fn semaphore_dir(chroot: &str, name: &str) -> String {
    format!("{chroot}{SEMAPHORES_DIR}/{}", segment(name))
}

/// The node where the write locks of `resource` record their tokens for its readers.
pub(crate) fn writer_record(chroot: &str, resource: &str) -> String {
    format!("{chroot}{WRITERS_DIR}/{}", segment(resource))
}

/// The owner tag of a read lock's node: `<owner>-read` (owner values are hex, without `-`).
pub(crate) fn reader_tag(owner: &str) -> String {
    format!("{owner}{READER}")
}

/// The name of a semaphore's slot `i`.
pub(crate) fn slot_name(i: usize) -> String {
    format!("{SLOT}{i}")
}

/// The slot a child of a semaphore's directory holds, `None` for a waiter's node.
pub(crate) fn slot_of(name: &str) -> Option<usize> {
    let digits = name.strip_prefix(SLOT)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether the waiter's node `name` is a read lock's.
pub(crate) fn is_reader(name: &str) -> bool {
    name.rsplit_once(MARK)
        .is_some_and(|(tag, _)| tag.ends_with(READER))
}

/// The prefix of a waiter's node, given to the sequential create: `<owner>-lock-`. The owner
/// value makes the name findable again when the create's answer is lost (Curator's protected
/// mode), and unique even when the directory is deleted and made again (its sequence restarts).
pub(crate) fn node_prefix(owner: &str) -> String {
    format!("{owner}{MARK}")
}

/// The sequence number of a waiter's node name (`...-lock-0000000042`), `None` for a name that
/// is not a waiter's.
pub(crate) fn sequence(name: &str) -> Option<i64> {
    let (_, digits) = name.rsplit_once(MARK)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What a waiter waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// A lock or a write lock: to be first in line (readers ahead count too, so a writer
    /// waits for the readers that came before it, and readers after it wait for it).
    Exclusive,
    /// A read lock: no writer (a node that is not a reader's) ahead.
    Shared,
    /// A permit of a semaphore of this many: fewer than that many waiters ahead.
    Permits(usize),
}

/// Where a waiter stands in line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// Nothing ahead keeps it out: it holds (a permit: it is admitted).
    First,
    /// It waits; this node ahead is the one to watch (only that one: when the holder goes, one
    /// waiter wakes, not all of them). For a lock, the node just before it; for a read lock,
    /// the nearest writer before it; for a permit, the waiter just before it.
    Behind(String),
    /// A permit's first waiter (exactly N ahead): any holder's release lets it in, so it
    /// watches the directory's children.
    Next,
    /// Its node is not among the children (deleted: the session expired, or someone deleted it).
    Gone,
}

/// Where the waiter whose node is named `mine` stands among `children` (the directory's
/// children, in any order; names that are not waiters' are ignored) under `rule`.
pub(crate) fn place(children: &[String], mine: &str, rule: Rule) -> Place {
    let Some(my_seq) = sequence(mine) else {
        return Place::Gone;
    };
    if !children.iter().any(|c| c == mine) {
        return Place::Gone;
    }
    let ahead = children
        .iter()
        .filter_map(|c| sequence(c).map(|s| (s, c)))
        .filter(|(s, _)| *s < my_seq);
    let blocking = match rule {
        Rule::Exclusive => ahead.max_by_key(|(s, _)| *s),
        Rule::Shared => ahead.filter(|(_, c)| !is_reader(c)).max_by_key(|(s, _)| *s),
        Rule::Permits(n) => {
            let ahead: Vec<_> = ahead.collect();
            if ahead.len() < n {
                return Place::First;
            }
            if ahead.len() == n {
                return Place::Next;
            }
            ahead.into_iter().max_by_key(|(s, _)| *s)
        }
    };
    match blocking {
        None => Place::First,
        Some((_, name)) => Place::Behind(name.clone()),
    }
}

/// The node of `owner` among `children`, if any: a create whose answer was lost may have made it.
pub(crate) fn find_own<'a>(children: &'a [String], owner: &str) -> Option<&'a String> {
    let prefix = node_prefix(owner);
    children
        .iter()
        .find(|c| c.starts_with(&prefix) && sequence(c).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn resources_become_one_safe_segment() {
        assert_eq!(segment("order:42"), "order:42");
        assert_eq!(segment("a/b"), "a%2Fb");
        assert_eq!(segment("100%"), "100%25");
        assert_eq!(segment("."), "%2E");
        assert_eq!(segment(".."), "%2E%2E");
        assert_eq!(segment("a.b"), "a.b");
        assert_eq!(segment(""), "%");
        assert_eq!(segment("é"), "%C3%A9");
        assert_eq!(lock_dir("/apps", "x/y"), "/apps/fencelock/locks/x%2Fy");
        assert_eq!(lock_dir("", "x"), "/fencelock/locks/x");
    }

    #[test]
    fn sequences_are_read_from_the_end_of_the_name() {
        assert_eq!(sequence("ab12-lock-0000000042"), Some(42));
        assert_eq!(sequence("a-lock-b-lock-0000000007"), Some(7));
        assert_eq!(sequence("ab12-lock-"), None);
        assert_eq!(sequence("ab12-lock-12x"), None);
        assert_eq!(sequence("other"), None);
    }

    #[test]
    fn the_lowest_sequence_holds_and_each_waiter_watches_the_one_just_before_it() {
        let children = names(&[
            "c-lock-0000000012",
            "a-lock-0000000003",
            "stray",
            "b-lock-0000000007",
            "d-lock-0000000020",
        ]);
        let x = Rule::Exclusive;
        assert_eq!(place(&children, "a-lock-0000000003", x), Place::First);
        assert_eq!(
            place(&children, "b-lock-0000000007", x),
            Place::Behind("a-lock-0000000003".into())
        );
        // Its predecessor, not the holder: no herd when the holder goes.
        assert_eq!(
            place(&children, "d-lock-0000000020", x),
            Place::Behind("c-lock-0000000012".into())
        );
        assert_eq!(place(&children, "e-lock-0000000021", x), Place::Gone);
        assert_eq!(place(&children, "stray", x), Place::Gone);
    }

    #[test]
    fn readers_wait_only_for_writers_ahead_and_writers_for_everyone_ahead() {
        let children = names(&[
            "a-read-lock-0000000001",
            "b-read-lock-0000000002",
            "c-lock-0000000003",
            "d-read-lock-0000000004",
            "e-read-lock-0000000005",
        ]);
        let (r, w) = (Rule::Shared, Rule::Exclusive);
        assert!(is_reader("a-read-lock-0000000001"));
        assert!(!is_reader("c-lock-0000000003"));
        assert_eq!(place(&children, "a-read-lock-0000000001", r), Place::First);
        assert_eq!(place(&children, "b-read-lock-0000000002", r), Place::First);
        // The writer waits for the readers before it...
        assert_eq!(
            place(&children, "c-lock-0000000003", w),
            Place::Behind("b-read-lock-0000000002".into())
        );
        // ...and the readers after it wait for it (a waiting writer is ahead of them), each
        // watching the writer, not the reader just before it.
        assert_eq!(
            place(&children, "d-read-lock-0000000004", r),
            Place::Behind("c-lock-0000000003".into())
        );
        assert_eq!(
            place(&children, "e-read-lock-0000000005", r),
            Place::Behind("c-lock-0000000003".into())
        );
    }

    #[test]
    fn a_permit_is_admitted_with_fewer_than_n_ahead_and_only_the_first_waiter_watches_all() {
        let children = names(&[
            "slot-0",
            "a-lock-0000000001",
            "slot-1",
            "b-lock-0000000002",
            "c-lock-0000000003",
            "d-lock-0000000004",
        ]);
        let p = Rule::Permits(2);
        assert_eq!(place(&children, "a-lock-0000000001", p), Place::First);
        assert_eq!(place(&children, "b-lock-0000000002", p), Place::First);
        assert_eq!(place(&children, "c-lock-0000000003", p), Place::Next);
        assert_eq!(
            place(&children, "d-lock-0000000004", p),
            Place::Behind("c-lock-0000000003".into())
        );
        assert_eq!(slot_of("slot-1"), Some(1));
        assert_eq!(slot_of("slot-"), None);
        assert_eq!(slot_of("a-lock-0000000001"), None);
        assert_eq!(slot_name(7), "slot-7");
    }

    #[test]
    fn a_lost_create_is_found_by_its_owner_prefix() {
        let children = names(&["x-lock-0000000001", "yz-lock-0000000002", "y-lock-"]);
        assert_eq!(
            find_own(&children, "yz").map(String::as_str),
            Some("yz-lock-0000000002")
        );
        assert_eq!(find_own(&children, "y"), None);
    }
}
