//! The Lua scripts, defined once. `redis::Script` hashes each at first use and sends EVALSHA,
//! falling back to a load on `NOSCRIPT` (a restarted node has an empty script cache). Each new
//! connection also loads them all up front, so that pipelines can use EVALSHA directly.
//!
//! Every script takes any number of lock keys, so that one script call takes, extends or
//! releases a set of resources all-or-nothing on a node.

use std::sync::LazyLock;

use redis::Script;

/// Efficiency-mode acquisition of several keys: all or none. KEYS: locks. ARGV: owner token,
/// ttl in ms. Returns 1 when all were set, 0 when any is held. (One key uses a plain
/// `SET NX PX`, exactly as other Redlock clients do.)
pub(crate) static ACQUIRE_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_MANY_LUA));
const ACQUIRE_MANY_LUA: &str = r"
for i = 1, #KEYS do
  if redis.call('exists', KEYS[i]) == 1 then return 0 end
end
for i = 1, #KEYS do
  redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1
";

/// Fencing-mode acquisition: set every lock key (all or none) and, in the same atomic step,
/// return the largest fence counter among the keys' counters. KEYS: n locks, then their n
/// counters. ARGV: owner token, ttl in ms. Returns `{1, max counter}` or `{0, ''}` when any
/// lock key is held. Counters compare as decimal strings: exact over the whole u64 range.
pub(crate) static ACQUIRE_FENCED: LazyLock<Script> =
    LazyLock::new(|| Script::new(ACQUIRE_FENCED_LUA));
const ACQUIRE_FENCED_LUA: &str = r"
local n = #KEYS / 2
for i = 1, n do
  if redis.call('exists', KEYS[i]) == 1 then return {0, ''} end
end
local best = '0'
for i = 1, n do
  redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
  local c = redis.call('get', KEYS[n + i])
  if c and (#c > #best or (#c == #best and c > best)) then best = c end
end
return {1, best}
";

/// Fencing-mode write-back: raise every counter to the token, only while we still own every
/// lock key on this node. KEYS: n locks, then their n counters. ARGV: owner token, fencing
/// token (decimal, no leading zeros). Returns 1 when the counters are now at least the token,
/// 0 when some key is not ours (nothing written then).
pub(crate) static WRITE_BACK: LazyLock<Script> = LazyLock::new(|| Script::new(WRITE_BACK_LUA));
const WRITE_BACK_LUA: &str = r"
local n = #KEYS / 2
for i = 1, n do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, n do
  local c = redis.call('get', KEYS[n + i])
  if not c or #c < #ARGV[2] or (#c == #ARGV[2] and c < ARGV[2]) then
    redis.call('set', KEYS[n + i], ARGV[2])
  end
end
return 1
";

/// Compare-and-delete of every key that holds our token; each deletion publishes on the key's
/// release channel so that waiters wake at once. KEYS: locks. ARGV: owner token, channel
/// prefix. Returns how many keys were deleted.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
const RELEASE_LUA: &str = r"
local deleted = 0
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    redis.call('del', KEYS[i])
    redis.call('publish', ARGV[2] .. KEYS[i], '1')
    deleted = deleted + 1
  end
end
return deleted
";

/// Compare-and-extend: renew every key's TTL if all still hold our token. Never creates a key:
/// an expired lock stays expired. KEYS: locks. ARGV: owner token, new ttl in ms. Returns 1 when
/// extended, 0 when some key is not ours (nothing extended then).
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
const EXTEND_LUA: &str = r"
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do
  redis.call('pexpire', KEYS[i], ARGV[2])
end
return 1
";

/// The source of every script, for `SCRIPT LOAD` on a new connection.
pub(crate) const ALL: [&str; 5] = [
    ACQUIRE_MANY_LUA,
    ACQUIRE_FENCED_LUA,
    WRITE_BACK_LUA,
    RELEASE_LUA,
    EXTEND_LUA,
];

/// The prefix of the channels releases publish on; the channel of a key is prefix + key.
pub(crate) const RELEASE_CHANNEL_PREFIX: &str = "fencelock:released:";

/// The channel a release of `key` publishes on, for waiters.
pub(crate) fn release_channel(key: &str) -> String {
    format!("{RELEASE_CHANNEL_PREFIX}{key}")
}
