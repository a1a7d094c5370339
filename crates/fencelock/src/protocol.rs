//! fencelock's protocol on Redis, for tools and for clients in other languages that share locks
//! with it: the keys it keeps beside a lock key, and the release script.
//!
//! The lock key is the resource name itself, holding the owner's random token with a TTL
//! (`SET resource token NX PX ttl`), as in every Redlock client: any client that takes and
//! releases keys that way excludes fencelock and is excluded by it. Beside it, per resource:
//!
//! - [`counter_key`]: the fence counter (fencing mode; `docs/fencing.md` holds the argument);
//! - [`queue_key`] and [`lease_key`]: the waiting line (sorted sets of waiter ids by ticket and
//!   by lease deadline);
//! - [`waiting_key`]: the mark that someone waits, renewed by waiters;
//! - [`holder_key`]: who held the lock, for older versions (a [`crate::Holder`] as text,
//!   `host=<host> pid=<pid>[ label=<label>]`), set with the lock's TTL by their granting script
//!   and extended with the lock. This version carries the holder in the lock key's value
//!   instead, after the token and a space ([`owner_holder`] reads it), so that a labelled grant
//!   is a bare `SET NX PX`; its [`RELEASE_SCRIPT`] still deletes the side key with the lock key,
//!   and readers take a side key only when its TTL is the lock key's
//!   ([`LEGACY_HOLDER_SLACK_MS`]). The scripts build its name from the lock key's (it is not
//!   among their KEYS), so calls of them from other clients stay as they were.
//!
//! A client that releases with a bare compare-and-delete is safe with fencelock, but does not
//! wake fencelock's waiters (they fall back to their retry delays). To wake them, release with
//! [`RELEASE_SCRIPT`] over [`release_keys`]: `EVALSHA <sha1 of the script> 4 <release_keys...>
//! <token>`. It replies the number of keys deleted (1 or 0), or `[deleted, subscribers told]`
//! when it woke someone. The CLI's benchmark baseline sends exactly this.
//!
//! Per node, for the restart quarantine (a node that lost its data must not count until every
//! lock it may have forgotten expired):
//!
//! - [`NODE_MARKER_KEY`]: the node's marker, `<run_id> <ms>`, written by the first client that
//!   finds it missing, with the node's time (ms) it saw the loss; it lives with the data, so its
//!   absence shows the data was lost (a restart, or a `FLUSHALL`, `FLUSHDB`, `DEL` or failover
//!   that keeps the node running), and such a loss counts from when it was first seen. A client
//!   reads it again right behind each grant and does not count a grant on a node whose marker
//!   changed. A tool that starts a node that never held a lock may mark it new with
//!   [`new_node_marker`] (`fencelock up` does), so that clients count it at once.
//! - [`TTLS_KEY`]: the TTLs in use. Every fencelock acquisition and extension leaves its TTL
//!   there in the same script ([`ANNOUNCE_FUNCTION`], called as `announce(ttl_ms)`), except a
//!   plain lock of one key on several nodes, a bare `SET NX PX` whose TTL the client announces
//!   ahead on the node's connection ([`ANNOUNCE_AHEAD_SCRIPT`]) and which counts only while
//!   that announcement covers it; a client judging a restarted node reads it from the others.
//!   A client in another language that shares the nodes and uses a longer TTL than
//!   fencelock's clients should announce it too.
//!
//! Every key and pub/sub channel fencelock uses besides the lock keys starts with
//! [`RESERVED_PREFIX`]. An ACL user limited to the lock keys' pattern, `~fencelock:*` and
//! `&fencelock:*` (with `+@scripting +@read +@write +info +time +@pubsub`) can do everything
//! fencelock does: `tests/connection.rs` runs fencing, the waiting line, extension,
//! auto-extension and scoped work as such a user, and sees no key or channel refused.

//!
//! Semaphores ([`crate::Semaphore`]): slot `i` of the semaphore `resource` is the ordinary lock
//! key [`permit_key`] (`<resource>:permit:<i>`, i from 0 to N-1), with its own fence counter and
//! wait mark as above. A holder of a permit holds one slot's key on a quorum. The semaphore's
//! waiters queue in one line, the waiting line ([`queue_key`], [`lease_key`]) of the reserved
//! name [`permit_line`] (`fencelock:permits:<resource>`), which every slot's grant consults
//! ([`ACQUIRE_PERMIT_SCRIPT`]). On etcd: the line is the queue of [`permit_line`] and slot `i`'s
//! key is the lock key of [`permit_key`] (`fencelock/<resource>:permit:<i>/<lease id>`).

//!
//! Elections ([`crate::Election`]): leadership is the ordinary lock key [`election_key`]
//! (`election:<name>`) in fencing mode, the term its fencing token; the log [`leaders_key`]
//! (`fencelock:leaders:<name>`) is a sorted set, member `<term> <value>`, score the term, to
//! which a new leader adds its entry where it still owns the lock key (the last 64 are kept).
//! On etcd the candidates are the queue of [`election_key`] (`fencelock/election:<name>/<lease
//! id>`, created empty), the leader the oldest live key, its term the key's create revision; a
//! leader writes its value on its own key (a put while the key's create revision is still its
//! own), so a key whose mod revision is above its create revision is a leader's.

//!
//! Read-write locks ([`crate::RwLock`]): the write side is the ordinary lock key (the mutex).
//! While readers hold, the lock key holds [`READERS_MARKER`] (TTL: the longest live reader's),
//! and the sorted set [`readers_key`] (`fencelock:readers:<resource>`) holds each reader's
//! owner value scored by the node time (ms) until which it lives. Take and release read locks
//! with [`READ_ACQUIRE_SCRIPT`] and [`READ_RELEASE_SCRIPT`] (extend with
//! [`READ_EXTEND_SCRIPT`]): they keep the marker's TTL in step with the set. Readers wait in the
//! mutex's line ([`queue_key`]); a reader's waiter id has an `r` right after the dot (writers'
//! ids must not). In fencing mode a write lock records its fencing token in [`writer_key`]
//! (`fencelock:writer:<resource>`, living [`RECORD_LIFETIME_TTLS`] lock TTLs after the last
//! record) and in the node's [`WRITER_MAX_KEY`] (no TTL) with [`WRITE_RECORD_SCRIPT`] before it
//! is granted; a read acquisition reports the resource's record, or the node's largest when the
//! resource's expired.

pub use crate::election::{election_key, leaders_key};
pub use crate::pure::readers::{readers_key, writer_key, RECORD_LIFETIME_TTLS, WRITER_MAX_KEY};
pub use crate::semaphore::{permit_key, permit_line};

/// The value of a lock key while readers hold it: no owner value equals it, so every
/// compare-and-delete and `SET NX` of another client leaves it alone.
pub const READERS_MARKER: &str = crate::pure::readers::READERS_MARKER;

/// The read acquisition script (Lua). KEYS: the lock key, [`readers_key`], [`writer_key`],
/// [`queue_key`], [`lease_key`], [`waiting_key`], [`WRITER_MAX_KEY`]. ARGV: the reader's owner
/// token, TTL in ms[, its waiter id, ticket, lease in ms, how long the line outlives it in ms].
/// Replies `{granted (1 or 0), writer record (decimal; the node's largest when the resource's
/// expired, '0' if none)}`.
pub const READ_ACQUIRE_SCRIPT: &str = crate::redis::scripts::READ_ACQUIRE_LUA;

/// The read extension script (Lua). KEYS: the lock key, [`readers_key`]. ARGV: owner value, TTL
/// in ms. Replies 1 when extended, 0 when the reader's entry is gone.
pub const READ_EXTEND_SCRIPT: &str = crate::redis::scripts::READ_EXTEND_LUA;

/// The read release script (Lua). KEYS: the lock key, [`readers_key`], [`queue_key`],
/// [`lease_key`], [`waiting_key`]. ARGV: owner value[, waiter id]. Replies 1 or 0 (whether the
/// entry was live), or `{1 or 0, subscribers woken}`.
pub const READ_RELEASE_SCRIPT: &str = crate::redis::scripts::READ_RELEASE_LUA;

/// The writer's record script (Lua). KEYS: the lock key, [`writer_key`], [`WRITER_MAX_KEY`].
/// ARGV: the writer's owner value, its fencing token (decimal), the record's lifetime in ms.
/// Replies 1 when recorded, 0 when the key is not the writer's.
pub const WRITE_RECORD_SCRIPT: &str = crate::redis::scripts::WRITE_RECORD_LUA;

/// The key of a node's fence counter (a decimal integer, no TTL), one per node, shared by every
/// resource. The trust rule that makes it survive a node that lost its data (a read is trusted
/// only where this key exists; a quorum of trusted reads; seeding after issue; a new epoch only
/// when every node of the set granted without it) is stated in [`crate::fencing`].
/// [`crate::Client::reseed_fence`] (and `fencelock reseed --above TOKEN`) raise it on every
/// node after a total counter loss.
pub const FENCE_COUNTER_KEY: &str = crate::pure::fencing::FENCE_COUNTER_KEY;

/// The legacy per-resource fence counter key of `resource` (`fencelock:fence:<resource>`), from
/// before one counter per node: scripts still read it and the write-back deletes it.
pub fn counter_key(resource: &str) -> String {
    crate::pure::fencing::counter_key(resource)
}

/// The prefix of every key and channel fencelock keeps beside the lock keys on Redis
/// (`fencelock:fence:<resource>`, `fencelock:queue:<resource>`, ...). A resource name that
/// starts with it is refused before any I/O with [`crate::Error::InvalidConfig`]: a lock on
/// `fencelock:fence:X` would overwrite the fence counter of `X`.
pub const RESERVED_PREFIX: &str = crate::pure::RESERVED_PREFIX;
pub use crate::pure::queue::{lease_key, queue_key, waiting_key};

/// The release script (Lua): compare-and-delete, and the wake-up of the next waiter in line
/// when the key's wait mark is set. KEYS: the lock keys, their queues, their lease sets, their
/// wait marks (n of each); ARGV: the owner value[, the holder's own waiter id].
pub const RELEASE_SCRIPT: &str = crate::redis::scripts::RELEASE_LUA;

/// The fencing-mode acquisition script (Lua), for clients in other languages that take fenced
/// locks on the same nodes. KEYS: n lock keys, [`FENCE_COUNTER_KEY`], the n legacy counters
/// ([`counter_key`] of each resource). ARGV: owner value, TTL in ms[, a proposed token (decimal,
/// no leading zeros, below 10^19; `0` for none)[, the wait mark's ms (`''` for none)[, a holder
/// label ([`holder_key`])]]]. Sets every lock key or none and replies `{granted (1 or 0), largest
/// counter (decimal string), exists (1 or 0), accepted (1 or 0)}`, on a refusal too. When a
/// quorum of granting nodes accepted the proposal, it is the token
/// ([`crate::fencing::one_round`]): each of them raised its counter to it with the grant.
/// Otherwise derive the token as [`crate::fencing`] states (trust rule, epoch start; the counter
/// replied is the one after the call), then write it back with [`WRITE_BACK_SCRIPT`].
pub const ACQUIRE_FENCED_SCRIPT: &str = crate::redis::scripts::ACQUIRE_FENCED_LUA;

/// A semaphore's slot acquisition script (Lua), with the rule of its waiting line: KEYS: the
/// slot's key ([`permit_key`]), the line's [`queue_key`] and [`lease_key`] (of [`permit_line`]),
/// the N slot keys, their N [`waiting_key`]s[, [`FENCE_COUNTER_KEY`], the slot's
/// [`counter_key`]]. ARGV: owner value, TTL ms, N[, waiter id, ticket, lease ms, keep ms].
/// Replies `{granted (1 or 0), largest counter, exists}` as [`ACQUIRE_FENCED_SCRIPT`] does.
/// A client that takes slot keys with a plain `SET NX` stays excluded from the slot it holds,
/// but passes the line.
pub const ACQUIRE_PERMIT_SCRIPT: &str = crate::redis::scripts::ACQUIRE_PERMIT_LUA;

/// The fencing-mode write-back script (Lua): KEYS as [`ACQUIRE_FENCED_SCRIPT`]'s; ARGV: owner
/// token, fencing token (decimal)[, `epoch` for the write-back of an epoch start (every node
/// granted without a counter)]. Raises the node counter to at least the token and deletes the
/// legacy counters, only if every lock key still holds the owner value; replies 1, else 0 (and
/// writes nothing). On a node that has no counter it creates one only for an epoch start (or a
/// seed, after its wait): a plain write-back replies 3 there and writes no counter, and that
/// node must not count toward the write-back's quorum (it lost its counter since its read and
/// may have recorded a larger token). Used to seed a node that lost its counter too, once the
/// token was issued.
pub const WRITE_BACK_SCRIPT: &str = crate::redis::scripts::WRITE_BACK_LUA;

/// The prefix of the holder side keys; the key of `resource` is prefix + resource.
pub const HOLDER_PREFIX: &str = crate::holder::HOLDER_PREFIX;

/// The holder side key of `resource`: `fencelock:holder:<resource>`.
pub fn holder_key(resource: &str) -> String {
    crate::holder::holder_key(resource)
}

/// The holder carried in a lock key's value (`<token> host=<host> pid=<pid>[ label=<label>]`);
/// `None` for a bare token, another client's value, or a reader's marker.
pub fn owner_holder(value: &str) -> Option<crate::Holder> {
    crate::holder::owner_holder(value)
}

/// Whether `value` is an owner value a fencelock client stores: the 32 lowercase hex digits of
/// its token, alone or followed by a space and a holder ([`owner_holder`]). Anything else in a
/// lock key is some other program's value.
pub fn is_owner_value(value: &str) -> bool {
    crate::holder::is_owner_value(value)
}

/// How far apart (ms) an older client's [`holder_key`] TTL and its lock key's may be, read
/// together, for the side key to name that lock's holder: older versions set and extend both
/// in one script with one TTL. A side key whose TTL differs was left behind by a lock key lost
/// without it, and names nobody who holds the lock now.
pub const LEGACY_HOLDER_SLACK_MS: i64 = crate::holder::LEGACY_HOLDER_SLACK_MS;

/// On etcd: the prefix of the waiting line of `resource`, `fencelock/<resource>/` with `/`
/// and `%` percent-escaped. Each waiter's key is the prefix and its lease id in 16 hex digits
/// (for a mutex of one resource, then a dot and the number of the lease's use: a client's
/// consecutive mutexes may ride one lease), with the holder label as its value ([`crate::Config::with_holder`]);
/// the oldest key (by create revision) holds the lock, and that revision is its fencing token.
pub fn etcd_queue_prefix(resource: &str) -> String {
    crate::pure::etcd_keys::queue_prefix(resource)
}

/// The key of a node's marker (no TTL).
pub const NODE_MARKER_KEY: &str = crate::redis::quarantine::MARKER_KEY;

/// The node set a node serves, as its clients recorded it (no TTL; the format and the rule are
/// in `fencelock::nodeset`): a client configured with another list refuses the node.
pub const NODE_SET_KEY: &str = crate::pure::nodeset::RECORD_KEY;

/// The sorted set of the TTLs in use on a node: member the TTL in ms, score a node time in ms
/// until which a lock taken or extended with that TTL may live, or later (written one TTL
/// ahead). Beside it, `fencelock:ttls:<ttl>` marks a TTL whose deadline is still more than one
/// TTL away, so that its next announcements stop at one call ([`ANNOUNCE_FUNCTION`]).
pub const TTLS_KEY: &str = crate::redis::quarantine::TTLS_KEY;

/// The Lua function `announce(ttl_ms)` that fencelock's acquisition and extension scripts
/// start with and call once a key was set or extended.
pub const ANNOUNCE_FUNCTION: &str = crate::redis::scripts::ANNOUNCE_LUA;

/// The whole script a client sends on a node's connection ahead of plain `SET NX PX` grants,
/// instead of announcing in each grant: `ARGV[1]` the TTL in ms, `ARGV[2]` a margin in ms (the
/// window it asks for beyond one TTL); it calls `announce(ttl, margin)` and returns the `PTTL`
/// of the TTL's mark. A lock of that TTL set on the node within (the reply - the TTL) ms after
/// the script ran is covered by the TTLs in use. A client that cannot see the node's clock
/// counts a `SET` sent after the script's reply, on the same connection, only when the `SET`'s
/// reply arrived within (the reply - the TTL - its clock drift) of the moment *before it sent
/// the script*; measured from when the script's reply arrived, it would count grants that are
/// not covered.
pub const ANNOUNCE_AHEAD_SCRIPT: &str = crate::redis::scripts::ANNOUNCE_AHEAD_LUA;

/// The oldest Redis (major version) fencelock's scripts run on: they read the node's clock
/// (`TIME`) before they write, which Redis allows from version 5 (it replicates scripts by their
/// effects). A client refuses an older node when it connects (its vote says why, and it does not
/// count); `fencelock doctor` fails it.
pub const MIN_REDIS_MAJOR: u64 = crate::redis::version::MIN_MAJOR;

/// Whether a node that reports `version` (the `redis_version` field of `INFO server`, such as
/// "4.0.14") is too old for fencelock's scripts. A version that does not start with a number is
/// not judged.
pub fn redis_version_too_old(version: &str) -> bool {
    crate::redis::version::too_old(version)
}

/// The marker that declares a node new: it never held a lock, so clients count it at once.
/// `SET` it at [`NODE_MARKER_KEY`] right after starting the node, before any client uses it;
/// `run_id` is the `run_id` field of the node's `INFO server`. Valid for that run only: after a
/// restart the node is judged afresh. Marking a node that held locks as new can let a second
/// client take a lock the node forgot.
pub fn new_node_marker(run_id: &str) -> String {
    crate::redis::quarantine::clear_marker(run_id)
}

/// The keys [`RELEASE_SCRIPT`] takes for one resource, in order.
pub fn release_keys(resource: &str) -> [String; 4] {
    [
        resource.to_string(),
        queue_key(resource),
        lease_key(resource),
        waiting_key(resource),
    ]
}

/// Every script a client loads on a new connection, in the order it sends `SCRIPT LOAD`: for
/// the simulation (`crates/fencelock-sim`), which runs these very texts on its simulated nodes
/// and holds them to a real redis-server. Not a stable interface.
#[doc(hidden)]
pub const ALL_SCRIPTS: [&str; 15] = crate::redis::scripts::ALL;

/// On a Redis Cluster node (`redis+cluster://`), every key above carries the node's hash tag in
/// front (`{fencelock}` by default: `{fencelock}fencelock:node`, `{fencelock}order:7`), so all
/// of them hash to one slot and live on the shard that owns it ([`crate::NodeAddr::hash_tag`]).
/// Keys a script derives from a declared key hold the tag the same way
/// (`fencelock:holder:{fencelock}order:7`).
///
/// The slot of `key` as `CLUSTER KEYSLOT` computes it (CRC16 of the key or of its hash tag,
/// modulo 16384).
pub fn key_slot(key: &str) -> u16 {
    crate::pure::hash_slot::key_slot(key.as_bytes())
}

/// The slot of a `redis+cluster://` node's tag and the `host` and `port` of the primary that
/// owns it now, asked of the URL's seeds (`CLUSTER SLOTS`) as a client's connection asks: for
/// tools that talk to that shard directly (`fencelock doctor`).
///
/// # Errors
///
/// [`crate::NodeError`] saying why: `addr` is not a cluster URL, no seed answered within
/// `timeout`, or none names an owner of the slot.
pub async fn cluster_slot_owner(
    addr: &crate::NodeAddr,
    timeout: std::time::Duration,
) -> Result<(u16, String, u16), crate::NodeError> {
    let Some(tag) = addr.hash_tag() else {
        return Err(crate::NodeError::from(format!(
            "{addr} is not a redis+cluster:// URL"
        )));
    };
    let (host, port) = crate::redis::cluster::owner(addr, timeout)
        .await
        .map_err(|e| crate::NodeError::from_driver_error(&e))?;
    Ok((key_slot(&tag), host, port))
}

/// The servers (`host:port` each, IPv6 in brackets) and the chroot (empty, or `/a/b`) of a
/// `zk://` URL; `None` for another URL. For tools that read the ensemble directly (`fencelock
/// inspect`, `doctor`).
pub fn zk_ensemble(addr: &crate::NodeAddr) -> Option<(Vec<String>, String)> {
    let ensemble = addr.zookeeper()?;
    let servers = ensemble
        .servers
        .iter()
        .map(|(host, port)| {
            if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        })
        .collect();
    Some((servers, ensemble.chroot.clone()))
}

/// The `user:password` of a `zk://` URL, which its clients send as ZooKeeper digest
/// authentication (`addauth digest user:password`); `None` for a URL without one or another
/// URL. The secret is in it: hand it to the ZooKeeper client only, never print it.
pub fn zk_digest(addr: &crate::NodeAddr) -> Option<String> {
    addr.zk_digest()
}

/// The ZooKeeper node under which the waiters of `resource` line up:
/// `<chroot>/fencelock/locks/<resource as one path segment>`. Each waiter's node in it is named
/// `<owner value>-lock-<sequence>`; the lowest sequence holds the lock, and its `czxid` is the
/// fencing token.
#[cfg(feature = "zookeeper")]
pub fn zk_lock_dir(chroot: &str, resource: &str) -> String {
    crate::zk::line::lock_dir(chroot, resource)
}

/// The sequence number of a waiter's node name on ZooKeeper (`...-lock-0000000042`), `None`
/// for a name that is not a waiter's.
#[cfg(feature = "zookeeper")]
pub fn zk_sequence(name: &str) -> Option<i64> {
    crate::zk::line::sequence(name)
}

/// Whether a waiter's node on ZooKeeper is a read lock's (`<owner>-read-lock-<sequence>`):
/// readers ahead of the first writer's node hold together.
#[cfg(feature = "zookeeper")]
pub fn zk_is_reader(name: &str) -> bool {
    crate::zk::line::is_reader(name)
}

/// The ZooKeeper node of the semaphore `name`: `<chroot>/fencelock/semaphores/<name as one
/// path segment>`. Its data is the permit count; its children are the waiters' nodes
/// (`<owner value>-lock-<sequence>`, admitted in sequence order) and the permits held,
/// `slot-<i>`, each holding its holder's owner value, its `czxid` the permit's fencing token.
#[cfg(feature = "zookeeper")]
pub fn zk_semaphore_dir(chroot: &str, name: &str) -> String {
    crate::zk::line::semaphore_dir(chroot, name)
}

/// The slot of a semaphore's permit node on ZooKeeper (`slot-<i>`), `None` for a waiter's.
#[cfg(feature = "zookeeper")]
pub fn zk_slot_of(name: &str) -> Option<usize> {
    crate::zk::line::slot_of(name)
}

/// The ZooKeeper node where the write locks of `resource` record their fencing tokens for its
/// readers: `<chroot>/fencelock/writers/<resource as one path segment>`, the token as text.
#[cfg(feature = "zookeeper")]
pub fn zk_writer_record(chroot: &str, resource: &str) -> String {
    crate::zk::line::writer_record(chroot, resource)
}

/// The PostgreSQL backend's lease table: `fencelock_locks (resource text primary key, owner
/// text, token bigint, expires_at timestamptz)`, one row per held resource, each expiry by the
/// database's clock.
pub const PG_LOCK_TABLE: &str = "fencelock_locks";

/// The PostgreSQL backend's sequence of fencing tokens.
pub const PG_TOKEN_SEQUENCE: &str = "fencelock_tokens";

/// The `host` and `port` of the primary that a `redis+sentinel://` URL's Sentinels name now,
/// asked as a client's connection asks: for tools that talk to the primary directly
/// (`fencelock inspect`, `doctor`).
///
/// # Errors
///
/// [`crate::NodeError`] saying why: `addr` is not a Sentinel URL, no Sentinel answered within
/// `timeout`, or none knows the primary's name.
pub async fn sentinel_primary(
    addr: &crate::NodeAddr,
    timeout: std::time::Duration,
) -> Result<(String, u16), crate::NodeError> {
    let Some(group) = addr.sentinel() else {
        return Err(crate::NodeError::from(format!(
            "{addr} is not a redis+sentinel:// URL"
        )));
    };
    crate::redis::sentinel::primary(group, timeout)
        .await
        .map_err(|e| crate::NodeError::from_driver_error(&e))
}
