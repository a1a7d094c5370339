//! Where a lock lives in etcd's key space (the names only, so that `protocol` can give them
//! without the etcd backend built): pure logic, no I/O.
//!
//! Every lock of a resource is a queue of keys under one prefix,
//! `fencelock/<resource, escaped>/`; the waiter keys under it are `etcd/keys.rs`'s.

/// The root of every key fencelock writes, so its keys are easy to find and to tell from an
/// application's own.
pub(crate) const ROOT: &str = "fencelock/";

/// The prefix of the queue of `resource`: `fencelock/<escaped resource>/`.
///
/// `/` and `%` in the resource are percent-escaped (`%2F`, `%25`): otherwise the queue of
/// `"a"` (prefix `fencelock/a/`) would also hold the keys of `"a/b"`, and the two resources
/// would exclude each other, or worse, a waiter of one would wait behind the other.
pub(crate) fn queue_prefix(resource: &str) -> String {
    let mut prefix = String::with_capacity(ROOT.len() + resource.len() + 1);
    prefix.push_str(ROOT);
    for c in resource.chars() {
        match c {
            '%' => prefix.push_str("%25"),
            '/' => prefix.push_str("%2F"),
            c => prefix.push(c),
        }
    }
    prefix.push('/');
    prefix
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_resource_prefix_contains_another() {
        // "a/b" must not land inside the queue of "a", nor "a%2Fb" on top of "a/b".
        let names = ["a", "a/b", "a%2Fb", "a/", "a%", "b", "a/b/c", "%"];
        for x in names {
            for y in names {
                if x != y {
                    let (px, py) = (queue_prefix(x), queue_prefix(y));
                    assert!(
                        !px.starts_with(&py),
                        "{x:?} -> {px} is inside {y:?} -> {py}"
                    );
                }
            }
        }
        assert_eq!(queue_prefix("a/b"), "fencelock/a%2Fb/");
        assert_eq!(queue_prefix("50%"), "fencelock/50%25/");
    }
}
