//! Fencing-token derivation: pure arithmetic, no I/O.
//!
//! In fencing mode each node keeps a per-resource counter beside the lock key. The script that
//! sets the lock key (`SET NX`) returns the node's counter in the same atomic step. The client
//! derives the token from the counters its granting quorum returned, then writes it back to those
//! nodes; the token counts only once a quorum took the write-back. `docs/fencing.md` holds the
//! argument for why this makes tokens strictly increase from one holder to the next, and the
//! conditions under which they do (counters kept, no clock jump).

/// The key that holds the fencing counter of `resource` on each node (public as
/// [`crate::protocol::counter_key`]).
pub(crate) fn counter_key(resource: &str) -> String {
    format!("fencelock:fence:{resource}")
}

/// The token a client takes from the counters that its granting nodes returned: one more than
/// the largest. Returns `None` if no counter was seen or the largest is `u64::MAX`.
///
/// This is the order argument in its plainest form; the client uses [`next_unique_token`],
/// which keeps the same order and also separates two grants that saw the same largest counter.
pub fn next_token<I>(counters: I) -> Option<u64>
where
    I: IntoIterator<Item = u64>,
{
    counters.into_iter().max()?.checked_add(1)
}

/// How many low bits of a token are a per-grant random salt.
pub const SALT_BITS: u32 = 16;

/// The token the client issues: greater than every counter seen (so the order argument of
/// [`next_token`] holds unchanged), with the low [`SALT_BITS`] bits taken from `salt`.
///
/// Two grants derive from the same largest counter only when a node lost its counter (a restart
/// without persistence, an eviction) and the later grant's quorum missed every node that kept
/// the earlier token. Plain `max + 1` then hands both the same token, and a fence that admits
/// equal tokens (the same holder writing again) would let them interleave. With a salt they
/// differ unless both draw the same 16 bits (probability 2^-16), and the fence orders them.
/// Returns `None` when the counters are too close to `u64::MAX`.
pub fn next_unique_token<I>(counters: I, salt: u16) -> Option<u64>
where
    I: IntoIterator<Item = u64>,
{
    let prefix = (counters.into_iter().max()? >> SALT_BITS).checked_add(1)?;
    let base = prefix.checked_mul(1 << SALT_BITS)?;
    Some(base | u64::from(salt))
}

/// What one granting node's counter read is worth under the amnesia guard (`docs/fencing.md`).
///
/// A node that restarted without persistence forgot its counters, and a missing counter looks
/// the same as a resource never locked before. The guard tells them apart with a genesis marker
/// key (no TTL) written on every node when the cluster is set up: a missing counter on a node
/// that still has its marker is a true 0; on a node without the marker it is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterRead {
    /// The node has its genesis marker, or a counter for the resource (missing reads as 0).
    Trusted(u64),
    /// The node lost its data (no genesis marker) and has no counter for the resource.
    Untrusted,
}

/// The largest counter under the amnesia guard: the largest trusted read, and only if at least
/// `quorum` reads are trusted. Returns `None` otherwise. Feed it to [`next_unique_token`] (an
/// `Option` is an iterator of zero or one counter).
///
/// The write-back then goes to the trusted nodes only and needs `quorum` acknowledgements; the
/// untrusted granting nodes are seeded with the token only after it was issued. The model in
/// `tests/fencing_model.rs` shows that seeding earlier (from an attempt that may still fail)
/// lets a forgotten counter come back too low.
pub fn trusted_max<I>(reads: I, quorum: usize) -> Option<u64>
where
    I: IntoIterator<Item = CounterRead>,
{
    let mut trusted = 0usize;
    let mut max = None;
    for read in reads {
        if let CounterRead::Trusted(v) = read {
            trusted += 1;
            max = Some(max.map_or(v, |m: u64| m.max(v)));
        }
    }
    if trusted < quorum {
        return None;
    }
    max
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
    fn unique_tokens_are_above_every_counter_and_keep_the_salt() {
        for max in [0u64, 1, 65_535, 65_536, 1 << 40, (1 << 40) + 12_345] {
            for salt in [0u16, 1, 777, u16::MAX] {
                let t = next_unique_token([max / 2, max], salt).unwrap();
                assert!(t > max, "{t} <= {max}");
                assert_eq!(t & 0xffff, u64::from(salt));
                // A later grant that saw this token goes above it, whatever its salt.
                let later = next_unique_token([t], 0).unwrap();
                assert!(later > t);
            }
        }
        assert_eq!(next_unique_token(Vec::<u64>::new(), 1), None);
        assert_eq!(next_unique_token([u64::MAX], 1), None);
        assert_eq!(next_unique_token([0], 5), Some(65_536 + 5));
    }

    #[test]
    fn guarded_max_needs_a_quorum_of_trusted_reads() {
        use CounterRead::{Trusted, Untrusted};
        assert_eq!(trusted_max([Trusted(3), Untrusted, Trusted(5)], 2), Some(5));
        // An untrusted node may have forgotten a larger counter: it never counts.
        assert_eq!(trusted_max([Trusted(3), Untrusted, Untrusted], 2), None);
        assert_eq!(trusted_max([Trusted(0), Trusted(0)], 2), Some(0));
        assert_eq!(trusted_max([], 0), None);
        let max = trusted_max([Trusted(70_000), Trusted(1)], 2);
        assert!(next_unique_token(max, 9).unwrap() > 70_000);
    }

    #[test]
    fn counter_key_sits_beside_the_resource() {
        assert_eq!(counter_key("order:42"), "fencelock:fence:order:42");
    }
}
