//! The Lua scripts, defined once. `redis::Script` hashes each at first use and sends EVALSHA,
//! falling back to a load on `NOSCRIPT` (a restarted node has an empty script cache).

use std::sync::LazyLock;

use redis::Script;

/// Fencing-mode acquisition: `SET NX PX` and, in the same atomic step, read the node's fence
/// counter. KEYS: lock, counter. ARGV: owner token, ttl in ms.
/// Returns `{1, counter}` when the key was set, `{0, ""}` when someone holds it.
pub(crate) static ACQUIRE_FENCED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('get', KEYS[2]) or '0'}
end
return {0, ''}
",
    )
});

/// Fencing-mode write-back: raise the counter to the token, only while we still own the lock
/// key on this node. KEYS: lock, counter. ARGV: owner token, fencing token (decimal, no leading
/// zeros). Compares as decimal strings so that the whole u64 range is exact (Lua numbers are
/// doubles). Returns 1 when the counter is now at least the token, 0 when we do not own the key.
pub(crate) static WRITE_BACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
local c = redis.call('get', KEYS[2])
if not c or #c < #ARGV[2] or (#c == #ARGV[2] and c < ARGV[2]) then
  redis.call('set', KEYS[2], ARGV[2])
end
return 1
",
    )
});

/// Compare-and-delete. KEYS: lock. ARGV: owner token, release channel. Publishes on the channel
/// so that waiters wake at once. Returns 1 when deleted, 0 when the key is not ours.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('publish', ARGV[2], '1')
  return 1
end
return 0
",
    )
});

/// Compare-and-extend. KEYS: lock. ARGV: owner token, new ttl in ms. Never creates the key:
/// an expired lock stays expired. Returns 1 when extended, 0 when the key is not ours.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
",
    )
});

/// The channel a release publishes on, for waiters of `resource`.
pub(crate) fn release_channel(resource: &str) -> String {
    format!("fencelock:released:{resource}")
}
