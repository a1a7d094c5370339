//! Fencing-token derivation and the amnesia guard's trust rule: pure arithmetic, no I/O.
//!
//! In fencing mode each node keeps one counter, [`FENCE_COUNTER_KEY`] (no TTL), shared by every
//! resource. The script that sets the lock keys (`SET NX`) returns the node's counter, and
//! whether it exists, in the same atomic step. The client derives the token from the counters
//! its granting quorum returned ([`derive`]), writes it back to those nodes, and the token
//! counts only once a quorum took the write-back. `docs/fencing.md` holds the argument for why
//! this makes tokens strictly increase from one holder to the next, and the conditions under
//! which they do.
//!
//! **The trust rule** (the amnesia guard, for clients in other languages too): a node that
//! restarted without its data (or had its counter evicted) comes back without the counter, and
//! a missing counter there is not a true 0: the node may have forgotten the largest token. So a
//! read is [`CounterRead::Trusted`] only if the node has the counter (or, while migrating from
//! per-resource counters, the resource's legacy key [`counter_key`](crate::protocol::counter_key)). An attempt needs at
//! least a quorum of trusted reads among its granting nodes; the token is the largest trusted
//! read + 1; it is written back to the trusted granting nodes only, and a quorum of them must
//! acknowledge; only once the token is issued are the untrusted granting nodes seeded with it
//! (the same ownership-checked write-back, best effort). When every node of the set granted the
//! attempt and none has a counter ([`is_epoch_start`]: a fresh set, or every node lost its
//! data), it starts a new epoch: every granting node counts as a trusted 0 and the token is
//! [`epoch_floor`] of the client's clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The key of a node's fence counter: [`crate::protocol::FENCE_COUNTER_KEY`] (defined here, so
/// that the implementation never imports `protocol`, which only names what it defines).
pub const FENCE_COUNTER_KEY: &str = "fencelock:fence";

/// Where a node without its fence counter keeps the time (the node's clock, ms since the Unix
/// epoch) at which a seed first found it so (issue 27 item 3): `WRITE_BACK` sets it and refuses
/// that seed, and takes a later seed only if its attempt began [`seed_wait`] after that time; the
/// scripts that create the counter (a write-back, `reseed`) delete it, and a loss of the data
/// loses it with the counter. Not `fencelock:fence:...`: that is a resource's legacy counter.
pub const LOST_KEY: &str = "fencelock:lost";

/// How a vote names a granting node whose counter is gone (`vote::advice` tells it from a node
/// in restart quarantine by this prefix).
pub(crate) const LOST_COUNTER: &str = "granted, but it has no fence counter";

/// The legacy per-resource counter key of `resource` (before one counter per node; public as
/// [`crate::protocol::counter_key`]). The acquisition scripts still read it, so that a node
/// upgraded with per-resource counters never issues below them, and the write-back deletes it
/// once the node counter is above it.
pub(crate) fn counter_key(resource: &str) -> String {
    format!("{FENCE_COUNTER_KEY}:{resource}")
}

/// The largest token fencelock issues, proposes or lets a node accept: `i64::MAX`, what the
/// fenced storages' signed 64-bit (`BIGINT`) columns hold. A token above it could never be
/// written, so at this limit acquisition fails closed ([`Derivation::Exhausted`]).
pub const TOKEN_MAX: u64 = i64::MAX.unsigned_abs();

/// One more than the largest counter. Returns `None` if no counter was given or the largest
/// is `u64::MAX`.
pub fn next_token<I>(counters: I) -> Option<u64>
where
    I: IntoIterator<Item = u64>,
{
    counters.into_iter().max()?.checked_add(1)
}

/// How long a node must have been without its counter, at the start of the attempt that seeds
/// it: the seeding client's TTL and drift allowance (issue 27 item 3). A counted record of a
/// token (an acceptance, a write-back) is an answer within its round's node timeout, and every
/// client's node timeout is shorter than every client's TTL, so by then every round that
/// recorded a token on the node before it lost the counter has ended, each of its other counted
/// records has landed, and the seeding attempt's trusted reads (a quorum, which meets that
/// round's) are at least its token. A seed from reads taken earlier could make the node trusted
/// below a token it had recorded: with one counter for every resource, a grant of another
/// resource seeds it, and a later holder of the first resource reads the seed there and is
/// issued a smaller token (the model checker's `without_the_seed_wait_...` trace).
pub fn seed_wait(ttl: Duration, drift: Duration) -> Duration {
    ttl.saturating_add(drift)
}

/// What one granting node's counter read is worth under the amnesia guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterRead {
    /// The node has its fence counter (or the resource's legacy counter): the value is a true
    /// lower bound of every token it took.
    Trusted(u64),
    /// The node has no counter: it may have lost its data and forgotten the largest token.
    Untrusted,
}

impl CounterRead {
    /// The read of a node that answered `value` (the largest of its counters, 0 if none) and
    /// whether any counter exists there.
    pub fn from_node(value: u64, exists: bool) -> Self {
        if exists {
            CounterRead::Trusted(value)
        } else {
            CounterRead::Untrusted
        }
    }
}

/// The largest trusted read, and only if at least `quorum` reads are trusted. Returns `None`
/// otherwise.
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

/// Whether an attempt starts a new epoch: all `nodes` nodes of the set granted it (one
/// `has_counter` per granting node) and none of them has a counter. Fewer is never enough: a
/// node that did not grant may be the one that kept the largest token, or may be held by a
/// client whose write-back is about to land there (a refusal that says "no counter" can be stale
/// by the time the token is issued; the model checker found that trace).
pub fn is_epoch_start<I>(has_counter: I, nodes: usize) -> bool
where
    I: IntoIterator<Item = bool>,
{
    let mut granting = 0usize;
    for has in has_counter {
        if has {
            return false;
        }
        granting += 1;
    }
    granting >= nodes && nodes > 0
}

/// The first token of a new epoch: the time `now` in microseconds since the Unix epoch, at
/// least 1. Order across a total counter loss rests on this clock reading: the new epoch's
/// first token is above every earlier token if the earlier epoch issued fewer than one token
/// per microsecond on average since it began and the issuing client's clock is not behind the
/// earlier issuers' by more than that slack (`docs/fencing.md`).
pub fn epoch_floor(now: SystemTime) -> u64 {
    let micros = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    micros.max(1)
}

/// The token an attempt proposes (the one-round path): one above `last`, the largest token this
/// client has proposed or seen, or the clock `now` in microseconds ([`epoch_floor`]) if that is
/// larger. A node accepts the proposal only if it granted, has its counter and the proposal is
/// above the counter ([`one_round`] then says whether it is issued); any other value only
/// makes the one-round path miss, never unsafe. The clock term makes a client that has not
/// seen the latest tokens (another process took the lock in between) still propose above them:
/// counters then follow the clocks of the issuing clients, as an epoch's first token does.
/// At [`TOKEN_MAX`] and beyond there is nothing to propose: 0, which no node accepts.
pub fn propose(last: u64, now: SystemTime) -> u64 {
    let p = last.saturating_add(1).max(epoch_floor(now));
    if p > TOKEN_MAX {
        0
    } else {
        p
    }
}

/// The token issued in one round: the proposal, if at least `quorum` granting nodes accepted
/// it (each raised its counter to the proposal atomically with setting the key, which is the
/// write-back of the two-round path done in the same step). `None`: fall back to [`derive`]
/// over the reads (which then include the accepted proposal as those nodes' counter) and the
/// write-back.
pub fn one_round(proposal: u64, accepted: usize, quorum: usize) -> Option<u64> {
    (proposal > 0 && proposal <= TOKEN_MAX && quorum > 0 && accepted >= quorum).then_some(proposal)
}

/// What an attempt does with the reads of its granting nodes (see the module's trust rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derivation {
    /// At least a quorum of trusted reads: the token is the largest trusted read + 1; write it
    /// back to the trusted granting nodes, seed the untrusted ones once it is issued.
    Token(u64),
    /// No node of the set has a counter: a new epoch. The token is [`epoch_floor`] of the
    /// client's clock; every granting node counts as a trusted 0 (the write-back goes to all).
    EpochStart,
    /// Fewer than a quorum of trusted reads, and not an epoch start: fail closed.
    TooFewTrusted {
        /// How many granting nodes had their counter.
        trusted: usize,
    },
    /// The largest trusted counter is [`TOKEN_MAX`] or above: no larger token fits the fences.
    Exhausted,
}

/// Derives the token from the reads of the granting nodes. `epoch_start`: the result of
/// [`is_epoch_start`] over the granting nodes (it is ignored when a read is trusted).
pub fn derive<I>(reads: I, quorum: usize, epoch_start: bool) -> Derivation
where
    I: IntoIterator<Item = CounterRead>,
{
    let mut trusted = 0usize;
    let mut max = 0u64;
    for read in reads {
        if let CounterRead::Trusted(v) = read {
            trusted += 1;
            max = max.max(v);
        }
    }
    if trusted == 0 && epoch_start {
        return Derivation::EpochStart;
    }
    if trusted < quorum || trusted == 0 {
        return Derivation::TooFewTrusted { trusted };
    }
    if max >= TOKEN_MAX {
        return Derivation::Exhausted;
    }
    Derivation::Token(max + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use CounterRead::{Trusted, Untrusted};

    #[test]
    fn next_token_is_one_past_the_largest_counter() {
        assert_eq!(next_token([3, 7, 5]), Some(8));
        assert_eq!(next_token([0]), Some(1));
        assert_eq!(next_token(Vec::<u64>::new()), None);
        assert_eq!(next_token([u64::MAX]), None);
    }

    #[test]
    fn guarded_max_needs_a_quorum_of_trusted_reads() {
        assert_eq!(trusted_max([Trusted(3), Untrusted, Trusted(5)], 2), Some(5));
        // An untrusted node may have forgotten a larger counter: it never counts.
        assert_eq!(trusted_max([Trusted(3), Untrusted, Untrusted], 2), None);
        assert_eq!(trusted_max([Trusted(0), Trusted(0)], 2), Some(0));
        assert_eq!(trusted_max([], 0), None);
    }

    #[test]
    fn a_read_is_trusted_only_where_the_counter_exists() {
        assert_eq!(CounterRead::from_node(7, true), Trusted(7));
        assert_eq!(CounterRead::from_node(0, true), Trusted(0));
        assert_eq!(CounterRead::from_node(0, false), Untrusted);
    }

    #[test]
    fn derive_takes_the_largest_trusted_read_plus_one() {
        assert_eq!(
            derive([Trusted(3), Untrusted, Trusted(5)], 2, false),
            Derivation::Token(6)
        );
        // An untrusted node's value is unknown, whatever it says; a quorum of trusted is needed.
        assert_eq!(
            derive([Trusted(9), Untrusted, Untrusted], 2, false),
            Derivation::TooFewTrusted { trusted: 1 }
        );
        assert_eq!(
            derive([Untrusted, Untrusted], 2, false),
            Derivation::TooFewTrusted { trusted: 0 }
        );
        assert_eq!(
            derive([Trusted(u64::MAX), Trusted(1)], 2, false),
            Derivation::Exhausted
        );
        // The fences store signed 64-bit tokens: i64::MAX is the last one issued.
        assert_eq!(
            derive([Trusted(TOKEN_MAX - 1), Trusted(1)], 2, false),
            Derivation::Token(TOKEN_MAX)
        );
        assert_eq!(
            derive([Trusted(TOKEN_MAX), Trusted(1)], 2, false),
            Derivation::Exhausted
        );
        // No salt: consecutive grants are consecutive integers.
        assert_eq!(
            derive([Trusted(0), Trusted(0)], 2, false),
            Derivation::Token(1)
        );
    }

    #[test]
    fn an_epoch_starts_only_when_every_node_granted_without_a_counter() {
        assert!(is_epoch_start([false, false, false], 3));
        // One node did not grant: it may have the largest token.
        assert!(!is_epoch_start([false, false], 3));
        assert!(!is_epoch_start([false, true, false], 3));
        assert!(!is_epoch_start(Vec::<bool>::new(), 0));
        assert_eq!(
            derive([Untrusted, Untrusted], 2, true),
            Derivation::EpochStart
        );
        // A trusted read means some node has a counter: never an epoch start.
        assert_eq!(
            derive([Trusted(4), Untrusted], 2, true),
            Derivation::TooFewTrusted { trusted: 1 }
        );
    }

    #[test]
    fn a_proposal_is_above_the_last_token_and_the_clock() {
        let t = UNIX_EPOCH + Duration::from_micros(1_764_556_800_123_456);
        assert_eq!(propose(5, t), 1_764_556_800_123_456);
        assert_eq!(propose(1_764_556_800_123_456, t), 1_764_556_800_123_457);
        // Nothing above the fences' range is proposed (0: no proposal, never accepted).
        assert_eq!(propose(TOKEN_MAX - 1, t), TOKEN_MAX);
        assert_eq!(propose(TOKEN_MAX, t), 0);
        assert_eq!(propose(u64::MAX, t), 0);
        assert_eq!(one_round(TOKEN_MAX + 1, 3, 2), None);
        assert_eq!(one_round(9, 2, 2), Some(9));
        assert_eq!(one_round(9, 1, 2), None);
        assert_eq!(one_round(0, 3, 2), None);
    }

    #[test]
    fn the_seed_wait_is_the_ttl_and_its_drift() {
        let s = Duration::from_secs;
        assert_eq!(
            seed_wait(s(2), Duration::from_millis(22)),
            Duration::from_millis(2022)
        );
        assert_eq!(seed_wait(Duration::MAX, s(1)), Duration::MAX);
        assert_eq!(LOST_KEY, "fencelock:lost");
        assert!(!LOST_KEY.starts_with(&counter_key("")));
    }

    #[test]
    fn the_epoch_floor_is_the_clock_in_microseconds() {
        let t = UNIX_EPOCH + Duration::from_micros(1_764_556_800_123_456);
        assert_eq!(epoch_floor(t), 1_764_556_800_123_456);
        assert_eq!(epoch_floor(UNIX_EPOCH), 1);
        assert_eq!(epoch_floor(UNIX_EPOCH - Duration::from_secs(5)), 1);
    }

    #[test]
    fn counter_key_is_the_legacy_key_beside_the_node_counter() {
        assert_eq!(counter_key("order:42"), "fencelock:fence:order:42");
        assert_eq!(FENCE_COUNTER_KEY, "fencelock:fence");
    }
}
