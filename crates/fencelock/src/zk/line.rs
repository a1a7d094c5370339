//! The ZooKeeper lock's paths and its line of waiters: pure logic, no I/O.

/// The directory under the chroot where the locks live, one child per resource.
pub(crate) const LOCKS_DIR: &str = "/fencelock/locks";

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

/// Where a waiter stands in line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// Its node has the lowest sequence: it holds the lock.
    First,
    /// It waits; the node just before it in line is the one to watch (only that one: when the
    /// holder goes, one waiter wakes, not all of them).
    Behind(String),
    /// Its node is not among the children (deleted: the session expired, or someone deleted it).
    Gone,
}

/// Where the waiter whose node is named `mine` stands among `children` (the directory's
/// children, in any order; names that are not waiters' are ignored).
pub(crate) fn place(children: &[String], mine: &str) -> Place {
    let Some(my_seq) = sequence(mine) else {
        return Place::Gone;
    };
    if !children.iter().any(|c| c == mine) {
        return Place::Gone;
    }
    let predecessor = children
        .iter()
        .filter_map(|c| sequence(c).map(|s| (s, c)))
        .filter(|(s, _)| *s < my_seq)
        .max_by_key(|(s, _)| *s);
    match predecessor {
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
        assert_eq!(place(&children, "a-lock-0000000003"), Place::First);
        assert_eq!(
            place(&children, "b-lock-0000000007"),
            Place::Behind("a-lock-0000000003".into())
        );
        // Its predecessor, not the holder: no herd when the holder goes.
        assert_eq!(
            place(&children, "d-lock-0000000020"),
            Place::Behind("c-lock-0000000012".into())
        );
        assert_eq!(place(&children, "e-lock-0000000021"), Place::Gone);
        assert_eq!(place(&children, "stray"), Place::Gone);
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
