//! The owner value `acquire` hands out: the lock's owner value as the nodes store it, followed
//! by the TTL the lock was taken with, `<owner>.ttl<ms>ms`. No node stores a lock's TTL, and the
//! nodes' values are not changed to carry it (that would be a protocol change, and other
//! Redlock clients read them): the suffix lives only in the text the user keeps between
//! `acquire` and `extend`, which strip it before talking to the nodes.

use std::time::Duration;

/// What separates the owner value from the TTL.
const SEPARATOR: &str = ".ttl";

/// An owner value as given to `extend` or `release`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Handed<'a> {
    /// The owner value the nodes store.
    pub(crate) owner: &'a str,
    /// The TTL the lock was taken with, when the value carries one (`acquire` wrote it).
    pub(crate) ttl: Option<Duration>,
}

/// The owner value `acquire` prints for a lock of owner value `owner` taken with `ttl`.
pub(crate) fn hand_out(owner: &str, ttl: Duration) -> String {
    format!("{owner}{SEPARATOR}{}ms", ttl.as_millis())
}

/// Reads a handed-out owner value back. A value without the suffix (another tool's owner value, or the one
/// `inspect` shows) is taken whole as the owner value, with no TTL.
pub(crate) fn parse(given: &str) -> Handed<'_> {
    let whole = Handed {
        owner: given,
        ttl: None,
    };
    let Some((owner, ttl)) = given.rsplit_once(SEPARATOR) else {
        return whole;
    };
    let Some(ms) = ttl.strip_suffix("ms") else {
        return whole;
    };
    if owner.is_empty() || ms.is_empty() || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return whole;
    }
    match ms.parse::<u64>() {
        Ok(ms) if ms > 0 => Handed {
            owner,
            ttl: Some(Duration::from_millis(ms)),
        },
        _ => whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handed_out_owner_value_reads_back_as_its_owner_and_ttl() {
        let owner = "0123456789abcdef0123456789abcdef";
        let handed = hand_out(owner, Duration::from_secs(30));
        assert_eq!(handed, format!("{owner}.ttl30000ms"));
        assert_eq!(
            parse(&handed),
            Handed {
                owner,
                ttl: Some(Duration::from_secs(30))
            }
        );
    }

    #[test]
    fn other_values_are_owner_values_whole() {
        for other in [
            "0123456789abcdef0123456789abcdef",
            "5f0b9c3e-uuid-like",
            "a.ttl",
            "a.ttlms",
            "a.ttl0ms",
            "a.ttl-5ms",
            ".ttl30ms",
            "a.ttl30s",
            "a.ttl99999999999999999999999ms",
        ] {
            assert_eq!(
                parse(other),
                Handed {
                    owner: other,
                    ttl: None
                },
                "{other}"
            );
        }
    }
}
