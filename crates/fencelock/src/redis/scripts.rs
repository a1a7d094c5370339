//! The Lua scripts, defined once. `redis::Script` hashes each at first use and sends EVALSHA,
//! falling back to a load on `NOSCRIPT` (a restarted node has an empty script cache). Each new
//! connection also loads them all up front, so that pipelines can use EVALSHA directly.
//!
//! Every script takes any number of lock keys, so that one script call takes, extends or
//! releases a set of resources all-or-nothing on a node.

use std::sync::LazyLock;

use redis::Script;

/// A script assembled from the fragments in `lua/` at build time: the shared functions first
/// (each fragment defines its functions once, for every script that needs them), then the
/// script's own body. `announce` comes first where it is used, so that the published
/// [`ANNOUNCE_LUA`] is a prefix of those scripts.
macro_rules! lua {
    ($($fragment:literal),+ $(,)?) => {
        concat!($(include_str!(concat!("lua/", $fragment, ".lua"))),+)
    };
}

/// The Lua function every acquisition and extension script starts with: `announce(ttl)` leaves
/// the lock's TTL (ms, a decimal string) on the node for the restart quarantine (see
/// `quarantine.rs`), in the sorted set `fencelock:ttls` ([`super::quarantine::TTLS_KEY`]):
/// member the TTL, score a node time (ms) until which a lock with that TTL may live, or later.
/// Only entries a live lock may need are kept, a staircase where a later deadline has a smaller
/// TTL: an announcement removes the entries it outlasts with a TTL no larger than its own, and is
/// itself left out when a larger TTL already outlasts it. So the set holds at most one live entry
/// per TTL in use (expired ones are pruned when another TTL is announced), and the key expires
/// with its last entry. Entries are written one TTL ahead (`now + 2 ttl`), and each write leaves
/// the mark `fencelock:ttls:<ttl>`, a plain key that expires no later than the deadline covering
/// that TTL: an announcement that finds its mark with more than the TTL left ends there, one
/// `PTTL` (every extension of a lock and most acquisitions; before the mark the announcement was
/// more than half of the acquisition script's time on the node, about 11 of 19-21 µs, measured
/// with redis-benchmark: docs/notes/performance-log.md).
/// A TTL thus counts as in use for up to one TTL longer than its last lock could live, which
/// only lengthens a quarantine. `announce(ttl, margin)` stops at the mark, or at a longer TTL's
/// entry, only when that covers `margin` ms beyond one TTL (the announcement sent ahead of plain
/// grants, [`ANNOUNCE_AHEAD`]); a margin only makes it write more. Returns the node time (ms) it used, 0 when it stopped at the
/// mark, for the test that holds the model checker's copy of this function to it
/// (`tests/fencing_model.rs`). Redis >= 5 (TIME before a write). Published in `protocol`.
pub(crate) const ANNOUNCE_LUA: &str = lua!("announce");

/// Efficiency-mode acquisition of several keys: all or none. KEYS: locks (then their wait marks,
/// with ARGV[3]). ARGV: owner value, ttl in ms[, wait mark ms (`''` for none)[, holder label]]
/// (the label: `lua/hold.lua`). Returns 1 when all were set, 0
/// when any is held; a waiting client (ARGV[3]) then marks every key as waited for, so that
/// releases wake it. A grant announces its TTL (see [`ANNOUNCE_LUA`]). (One key with no mark
/// and no label uses a plain `SET NX PX`, exactly as other Redlock clients do: on several nodes
/// its TTL is announced ahead ([`ANNOUNCE_AHEAD`]); a single node's quarantine cannot learn from
/// other nodes, so it announces nothing there.)
pub(crate) static ACQUIRE_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_MANY_LUA));
const ACQUIRE_MANY_LUA: &str = lua!("announce", "hold", "keys", "wait_marks", "acquire_many");

/// Fencing-mode acquisition: set every lock key (all or none) and, in the same atomic step,
/// read the node's fence counter (`fencelock:fence`, shared by every resource) and the legacy
/// per-resource counters of the keys (`fencelock:fence:<resource>`, from before one counter per
/// node: read so that an upgraded node never issues below them), and judge the attempt's
/// proposed token (the one-round path, `fencing::propose`): when the keys were set, a counter
/// exists and the proposal is above the largest counter, the node counter becomes the proposal
/// (and the legacy counters go), so that a quorum of acceptances needs no write-back.
/// KEYS: n locks, the node counter, n legacy counters (then n wait marks, with ARGV[4]). ARGV:
/// owner value, ttl in ms[, proposed token (decimal, no leading zeros, below 10^19; '0' or
/// absent: none)[, wait mark ms ('' for none)[, holder label]]]. Returns `{1, largest counter, exists, accepted}` when every
/// key was set, `{0, largest counter, exists, 0}` when any lock key is held (marking the keys as
/// waited for, with ARGV[4]): the counter is reported on a refusal too, so that a client that
/// heard every node knows whether any still has one (the amnesia guard, `fencing.rs`). The
/// largest counter is the one after the call (the proposal when accepted); `exists` is 1 when
/// the node counter or a legacy counter of the keys exists (the read is trusted), else 0, and
/// the largest counter is '0' then. Counters compare as decimal strings: exact over the u64
/// range. A malformed proposal is an error, before anything is written. A grant announces its
/// TTL.
pub(crate) static ACQUIRE_FENCED: LazyLock<Script> =
    LazyLock::new(|| Script::new(ACQUIRE_FENCED_LUA));
pub(crate) const ACQUIRE_FENCED_LUA: &str = lua!(
    "announce",
    "hold",
    "counters",
    "fence",
    "keys",
    "wait_marks",
    "acquire_fenced"
);

/// Fencing-mode write-back (and the seeding of a node that lost its counter, after issue):
/// only while we still own every lock key on this node, raise the node counter to the largest
/// of itself, the token and the keys' legacy counters, and delete those legacy counters (the
/// node counter is then at least each of them). KEYS: n locks, the node counter, n legacy
/// counters. ARGV: owner value, fencing token (decimal, no leading zeros)[, `epoch` (an epoch
/// start's write-back) | the seed wait ms, the TTL ms (a seed)]. Returns 1 when the node
/// counter is now at least the token, 0 when some key is not ours (nothing written then). On a
/// node without any counter only an epoch start's write-back and a seed create it: a plain
/// write-back writes nothing but `fencelock:lost` (the start of the node's seed wait, if not
/// set) and returns 3 (issue 27: created at the token, the counter would make a node that
/// lost it trusted below a token it had recorded); a seed before its wait returns 2.
pub(crate) static WRITE_BACK: LazyLock<Script> = LazyLock::new(|| Script::new(WRITE_BACK_LUA));
pub(crate) const WRITE_BACK_LUA: &str = lua!("counters", "fence", "keys", "write_back");

/// Compare-and-delete of every key that holds our token. When the key's wait mark says someone
/// waits, the deletion publishes on the key's release channel, so that waiters wake at once, and,
/// when waiters queue for the key (see `queue.rs`), names the first live one in line on the turn
/// channel of its client (the part of its waiter id before the dot). A holder that queued for
/// the lock leaves the line here (whether or not it still owned the key).
/// KEYS: n locks, their n queues, their n lease sets, their n wait marks. ARGV: owner value[,
/// the holder's waiter id]. The channel names are written out in the script (they must match
/// [`RELEASE_CHANNEL_PREFIX`] and [`TURN_CHANNEL_PREFIX`]): fewer arguments, a cheaper call.
/// Returns `{keys deleted, subscribers the messages reached}` (the second figure tells the
/// releaser that others are waiting), or just the keys deleted when nobody was told.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
pub(crate) const RELEASE_LUA: &str = lua!("hold", "line", "release");

/// A queued acquisition of one key (see `queue.rs`): registers the waiter's ticket (or renews
/// its lease), drops waiters whose lease ran out, and sets the lock key only if it is free and
/// this waiter is first in line. The granted waiter stays first in line until its release (or
/// its lease runs out), so that a grant on too few nodes does not hand its place to the next
/// waiter on some nodes only: it retries first everywhere. In fencing mode it also returns the
/// node's fence counter and whether it exists, also on a refusal, as [`ACQUIRE_FENCED`] does.
/// It also renews the key's wait mark, which tells a release that someone waits.
/// KEYS: lock, queue, leases, wait mark[, node counter, legacy counter]. ARGV: owner value, ttl
/// ms, waiter id, ticket, lease ms, how long the line and the mark outlive the last registration
/// (ms)[, proposed token, as [`ACQUIRE_FENCED`]'s (`0` for none)[, holder label]]. Returns
/// `{granted (1 or 0), largest counter, exists, accepted}` (`'0', 0, 0` without fencing). A
/// grant announces its TTL.
pub(crate) static ACQUIRE_QUEUED: LazyLock<Script> =
    LazyLock::new(|| Script::new(ACQUIRE_QUEUED_LUA));
const ACQUIRE_QUEUED_LUA: &str = lua!(
    "announce",
    "hold",
    "counters",
    "fence",
    "line",
    "acquire_queued"
);

/// Compare-and-extend: renew every key's TTL if all still hold our token. Never creates a key:
/// an expired lock stays expired. KEYS: locks. ARGV: owner value, new ttl in ms. Returns 1 when
/// extended, 0 when some key is not ours (nothing extended then). An extension announces its
/// TTL in the same script (an extension may use a longer TTL than the acquisition did), the
/// batch extender's too: an announcement sent ahead in its pipeline did not cover an extension
/// delayed behind it (issue 27, item 2).
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
const EXTEND_LUA: &str = lua!("announce", "hold", "keys", "extend");

/// The announcement sent ahead of plain grants: a plain lock on several nodes is taken with a
/// bare `SET NX PX` (as the raw Redlock fan-out does: a script call costs a node several times a
/// `SET`), and the TTL is announced on the node's connection before, not in the grant: about
/// once per TTL and connection (`pure/ahead.rs`). ARGV: ttl in ms, margin in ms. Announces it
/// with the margin (`announce(ttl, margin)` stops at the mark or at a longer TTL's entry only
/// when that covers the margin beyond one TTL), then returns the TTL's mark's `PTTL` (ms;
/// negative when there is none). The mark expires no later than the deadline of an entry with
/// this TTL or a longer one, so a lock of this TTL set on the node within (that figure - the
/// TTL) after the call is covered: the client counts a grant only when its reply arrived within
/// that window, less the clock drift, from the announcement's send time
/// (`ahead_grants_are_covered_by_their_announcement` in the model checker). The margin (the
/// drift and two node timeouts) keeps the window long enough for the grants that follow.
/// Published in `protocol`.
pub(crate) static ANNOUNCE_AHEAD: LazyLock<Script> =
    LazyLock::new(|| Script::new(ANNOUNCE_AHEAD_LUA));
pub(crate) const ANNOUNCE_AHEAD_LUA: &str = lua!("announce", "announce_ahead");

/// Compare-and-set of a node's marker (see `quarantine.rs`): KEYS: the marker. ARGV: the value
/// it must hold, the new value. Returns 1 when set, 0 when the marker held something else.
pub(crate) static MARK: LazyLock<Script> = LazyLock::new(|| Script::new(MARK_LUA));
const MARK_LUA: &str = lua!("mark");

/// A failover seen on a Sentinel node (`sentinel.rs`): the primary serves under a run id its
/// marker does not name (a promoted replica replicated the old primary's marker, and may lack
/// the old primary's last writes). In one step, while the marker still holds the value the
/// client found (`''`: none), it writes the marker of a loss seen now and deletes the node
/// counter, so that the node stands exactly as one restarted without persistence: restart
/// quarantine for the locks, the amnesia guard (an untrusted read, the seed wait) for the
/// fencing tokens, whose counter may have lost its last raises. KEYS: the marker, the node
/// counter. ARGV: the marker found, the new marker. Returns 1 when done, 0 when the marker
/// held something else (another client saw the failover first).
pub(crate) static FAILOVER: LazyLock<Script> = LazyLock::new(|| Script::new(FAILOVER_LUA));
const FAILOVER_LUA: &str = lua!("failover");

/// Raises `KEYS[1]` (the node counter) to `max(current, ARGV[1])` (see `reseed.rs`). Both are
/// compared as decimal digit strings, not as Lua numbers: those are doubles, exact only below
/// 2^53, and a token may be as large as `i64::MAX`. A counter that is not a decimal integer is
/// an error, left as it is. Replies `{1, previous}` when it raised the counter (`previous` is
/// `''` if there was none), `{0, current}` when the counter already was at least `ARGV[1]`.
pub(crate) static RESEED: LazyLock<Script> = LazyLock::new(|| Script::new(RESEED_LUA));
pub(crate) const RESEED_LUA: &str = lua!("counters", "reseed");

/// Appends a leader to an election's log while its lock is still ours (see `election.rs`).
/// KEYS: the lock key, the log. ARGV: the owner value, the term, the member, the log length.
/// Returns 1 when appended, 0 when the lock is not ours (nothing written then).
pub(crate) static ELECTION_APPEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(ELECTION_APPEND_LUA));
const ELECTION_APPEND_LUA: &str = lua!("keys", "election_append");

/// A semaphore's acquisition of one slot (see `permit.rs`): with a waiter id, registers the
/// waiter in the semaphore's line (or renews its lease, keeping its ticket) and marks every slot
/// as waited for; then sets the slot's key only if it is free and fewer live waiters wait ahead
/// in the line than slots are free (ahead: before the waiter's ticket; for a request without a
/// waiter id, every live waiter), dropping the lapsed waiters it meets. So a waiter that came
/// later never takes a slot an earlier one can have, and a first try does not pass anyone in
/// line. The line only adds refusals: the slot's key is set as a mutex's would be.
/// KEYS: the slot's key, the line's queue, its leases, the N slot keys, their N wait marks[, the
/// node counter, the slot's legacy counter]. ARGV: owner value, ttl ms, N[, waiter id, ticket,
/// lease ms, how long the line and the marks outlive the registration (ms) (all four `''` for a
/// request without a ticket when a holder label follows)[, holder label]]. Returns
/// `{granted (1 or 0), largest counter, exists}` (`'0', 0` without fencing), on a refusal too.
/// A grant announces its TTL. The model checker holds its rule to this script
/// (`tests/semaphore_model.rs`, `the_model_admits_as_the_lua_does`).
pub(crate) static ACQUIRE_PERMIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(ACQUIRE_PERMIT_LUA));
pub(crate) const ACQUIRE_PERMIT_LUA: &str = lua!(
    "announce",
    "hold",
    "counters",
    "line",
    "wait_marks",
    "permit_line",
    "acquire_permit"
);

/// A shared (read) acquisition of one key for a read-write lock (see `rwlock.rs`): grants when
/// the lock key is free or holds the readers' marker (`fencelock:readers`,
/// `crate::protocol::READERS_MARKER`) and no writer with a running lease waits in line ahead of this reader
/// (anywhere in line, for a reader not in line); a grant adds the reader's owner value to the
/// readers' set, scored by the node time (ms) until which it lives, and gives the marker and
/// the set the TTL of the longest live reader. KEYS: lock, readers, writer record, queue,
/// leases, wait mark, the node's largest writer record (read when the resource's expired). ARGV: owner value, ttl ms[, waiter id, ticket, lease ms, how long the line
/// and the mark outlive the last registration (ms)]: with a waiter id the reader also takes or
/// renews its place in line, as [`ACQUIRE_QUEUED`] does. Returns `{granted (1 or 0), the writer
/// record (the largest fencing token a writer recorded, else the node's largest, '0' if none)}`,
/// on a refusal too. A
/// grant announces its TTL.
pub(crate) static READ_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(READ_ACQUIRE_LUA));
pub(crate) const READ_ACQUIRE_LUA: &str = lua!("announce", "line", "readers", "read_acquire");

/// Extends a reader: KEYS: lock, readers. ARGV: owner value, ttl ms. Returns 1 when the
/// reader's entry was live and the lock key holds the marker (the entry then lives `ttl` from
/// now, and the marker as long as the longest live reader), else 0 (nothing changed). Announces
/// its TTL.
pub(crate) static READ_EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(READ_EXTEND_LUA));
pub(crate) const READ_EXTEND_LUA: &str = lua!("announce", "line", "readers", "read_extend");

/// Releases a reader: KEYS: lock, readers, queue, leases, wait mark. ARGV: owner value[, its
/// waiter id, which leaves the line]. Removes the entry and shortens the marker to the longest
/// live reader left; the last one deletes the marker and, when the wait mark says someone waits,
/// wakes the waiters as [`RELEASE`] does. Returns 1 when the entry was live (0 otherwise), or
/// `{1 or 0, subscribers the messages reached}` when it woke someone.
pub(crate) static READ_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(READ_RELEASE_LUA));
pub(crate) const READ_RELEASE_LUA: &str = lua!("line", "readers", "read_release");

/// Records a writer's fencing token for readers, while the writer still owns the lock key:
/// KEYS: lock, writer record, the node's largest writer record. ARGV: owner value, fencing
/// token (decimal), the record's lifetime (ms). Raises the record (a decimal string) to the
/// token and gives it the lifetime; raises the node's largest record (no TTL) to the token.
/// Returns 1, or 0 when the key is not ours (nothing written then).
pub(crate) static WRITE_RECORD: LazyLock<Script> = LazyLock::new(|| Script::new(WRITE_RECORD_LUA));
pub(crate) const WRITE_RECORD_LUA: &str = lua!("counters", "keys", "write_record");

/// The source of every script, for `SCRIPT LOAD` on a new connection.
pub(crate) const ALL: [&str; 15] = [
    ACQUIRE_MANY_LUA,
    ACQUIRE_QUEUED_LUA,
    ACQUIRE_FENCED_LUA,
    WRITE_BACK_LUA,
    RELEASE_LUA,
    EXTEND_LUA,
    MARK_LUA,
    ANNOUNCE_AHEAD_LUA,
    RESEED_LUA,
    ELECTION_APPEND_LUA,
    ACQUIRE_PERMIT_LUA,
    READ_ACQUIRE_LUA,
    READ_EXTEND_LUA,
    READ_RELEASE_LUA,
    WRITE_RECORD_LUA,
];

/// The prefix of the channels releases publish on; the channel of a key is prefix + key.
/// (Written out in [`RELEASE_LUA`] too.)
pub(crate) const RELEASE_CHANNEL_PREFIX: &str = "fencelock:released:";

/// The channel a release of `key` publishes on, for waiters.
pub(crate) fn release_channel(key: &str) -> String {
    format!("{RELEASE_CHANNEL_PREFIX}{key}")
}

/// The prefix of the channels that tell a waiter in line its turn has come. (Written out in
/// [`RELEASE_LUA`] too.)
pub(crate) const TURN_CHANNEL_PREFIX: &str = "fencelock:turn:";

/// The turn channel of the client whose id is `client_id` (random, so one per client).
pub(crate) fn turn_channel(client_id: &str) -> String {
    format!("{TURN_CHANNEL_PREFIX}{client_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_script_publishes_on_the_channels_the_watchers_listen_to() {
        assert!(RELEASE_LUA.contains(&format!("'{RELEASE_CHANNEL_PREFIX}' .. lock")));
        assert!(RELEASE_LUA.contains(&format!("'{TURN_CHANNEL_PREFIX}' .. client")));
    }

    /// The names of the functions a script defines, in order.
    fn functions(script: &str) -> Vec<&str> {
        script
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("local function "))
            .filter_map(|l| l.split('(').next())
            .collect()
    }

    #[test]
    fn each_assembled_script_defines_each_function_once_and_calls_only_what_it_has() {
        for script in ALL {
            let defined = functions(script);
            let mut unique = defined.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), defined.len(), "{defined:?} in\n{script}");
            for name in [
                "announce",
                "any_set",
                "all_owned",
                "set_all",
                "mark_waited",
                "bigger",
                "node_ms",
                "first_live",
                "read_counters",
                "settle_counters",
                "proposal",
                "accept",
                "live_ahead",
                "enqueue",
                "wake",
                "cover",
                "writer_ahead",
                "hold",
                "hold_all",
                "holder_key",
            ] {
                let called = script
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("--"))
                    .any(|l| l.contains(&format!("{name}(")) && !l.contains("local function"));
                if called {
                    assert!(
                        defined.contains(&name),
                        "{name} called, not defined:\n{script}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_line_scan_and_the_wait_marks_are_written_once() {
        // The fragments, not the scripts, hold the shared steps: each appears in one file.
        let sources = [
            include_str!("lua/acquire_many.lua"),
            include_str!("lua/acquire_fenced.lua"),
            include_str!("lua/acquire_queued.lua"),
            include_str!("lua/release.lua"),
        ];
        for step in ["zrange", "'1', 'PX'", "#a > #b"] {
            let bodies = sources.iter().filter(|s| s.contains(step)).count();
            assert!(bodies <= 1, "{step:?} is written in {bodies} script bodies");
        }
        assert!(RELEASE_LUA.contains("first_live(q, l)"));
        assert!(ACQUIRE_QUEUED_LUA.contains("first_live(KEYS[2], KEYS[3], ARGV[3], now)"));
    }

    #[test]
    fn the_readers_scripts_write_the_marker_the_client_names() {
        use crate::pure::readers::READERS_MARKER;
        for script in [READ_ACQUIRE_LUA, READ_EXTEND_LUA, READ_RELEASE_LUA] {
            assert!(script.contains(&format!("'{READERS_MARKER}'")), "{script}");
        }
    }

    #[test]
    fn the_scripts_write_the_holder_key_the_protocol_names() {
        let prefix = format!("'{}' ..", crate::holder::HOLDER_PREFIX);
        for script in [
            ACQUIRE_MANY_LUA,
            ACQUIRE_FENCED_LUA,
            ACQUIRE_QUEUED_LUA,
            ACQUIRE_PERMIT_LUA,
            EXTEND_LUA,
            RELEASE_LUA,
        ] {
            assert!(script.contains(&prefix), "{script}");
            assert_eq!(
                script.matches("fencelock:holder:").count(),
                script.matches(&prefix).count()
            );
        }
    }

    #[test]
    fn the_scripts_announce_into_the_key_the_quarantine_reads() {
        let key = format!("local k = '{}'", super::super::quarantine::TTLS_KEY);
        assert!(ANNOUNCE_LUA.contains(&key));
        for script in [
            ACQUIRE_MANY_LUA,
            ACQUIRE_FENCED_LUA,
            ACQUIRE_QUEUED_LUA,
            ACQUIRE_PERMIT_LUA,
            EXTEND_LUA,
            READ_ACQUIRE_LUA,
            READ_EXTEND_LUA,
        ] {
            assert!(script.starts_with(ANNOUNCE_LUA));
            assert!(script.contains("announce(ARGV[2])"));
        }
    }
}
