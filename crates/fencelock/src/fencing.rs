//! Fencing-token derivation: pure arithmetic, no I/O.
//!
//! In fencing mode each node keeps a per-resource counter beside the lock key. The script that
//! sets the lock key (`SET NX`) returns the node's counter in the same atomic step. The client
//! derives the token from the counters its granting quorum returned, then writes it back to those
//! nodes; the token counts only once a quorum took the write-back. `docs/fencing.md` holds the
//! argument for why this makes tokens strictly increase from one holder to the next.

/// The key that holds the fencing counter of `resource` on each node.
pub fn counter_key(resource: &str) -> String {
    format!("fencelock:fence:{resource}")
}

/// The token a client takes from the counters that its granting nodes returned: one more than
/// the largest. Returns `None` if no counter was seen or the largest is `u64::MAX`.
pub fn next_token<I>(counters: I) -> Option<u64>
where
    I: IntoIterator<Item = u64>,
{
    counters.into_iter().max()?.checked_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_token_is_one_past_the_largest_counter() {
        assert_eq!(next_token([3, 7, 5]), Some(8));
        assert_eq!(next_token([0]), Some(1));
        assert_eq!(next_token(Vec::<u64>::new()), None);
        assert_eq!(next_token([u64::MAX]), None);
    }

    #[test]
    fn counter_key_sits_beside_the_resource() {
        assert_eq!(counter_key("order:42"), "fencelock:fence:order:42");
    }
}
