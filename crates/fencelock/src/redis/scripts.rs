//! The Lua scripts, defined once. `redis::Script` hashes each at first use and sends EVALSHA,
//! falling back to a load on `NOSCRIPT` (a restarted node has an empty script cache). Each new
//! connection also loads them all up front, so that pipelines can use EVALSHA directly.
//!
//! Every script takes any number of lock keys, so that one script call takes, extends or
//! releases a set of resources all-or-nothing on a node.

use std::sync::LazyLock;

use redis::Script;

/// The Lua function every acquisition and extension script starts with: `announce(ttl)` leaves
/// the lock's TTL (ms, a decimal string) on the node for the restart quarantine (see
/// `quarantine.rs`), in the sorted set `fencelock:ttls` ([`super::quarantine::TTLS_KEY`]):
/// member the TTL, score the node's time (ms) until which a lock with that TTL may live. Only
/// entries a live lock may need are kept, a staircase where a later deadline has a smaller TTL:
/// an announcement removes the entries it outlasts with a TTL no larger than its own, and is
/// itself left out when a larger TTL already outlasts it. So the set holds at most one live entry
/// per TTL in use (expired ones are pruned when another TTL is announced), and the key expires
/// with its last entry. Announcing the TTL of the latest entry again (every extension of a lock,
/// most acquisitions) only moves its deadline: four calls. Returns the node time (ms) it used,
/// for the test that holds the model checker's copy of this function to it
/// (`tests/fencing_model.rs`). Redis >= 5 (TIME before a write).
macro_rules! announce_lua {
    () => {
        r"
local function announce(ttl)
  local k = 'fencelock:ttls'
  local ms = tonumber(ttl)
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local untl = now + ms
  local top = redis.call('zrange', k, -1, -1, 'withscores')
  if top[1] == ttl then
    -- The common case: this TTL is already the latest entry; move its deadline.
    if tonumber(top[2]) > untl then untl = tonumber(top[2]) end
    redis.call('zadd', k, untl, ttl)
    redis.call('pexpire', k, math.ceil(untl - now))
    return now
  end
  redis.call('zremrangebyscore', k, '-inf', now)
  while true do
    local top = redis.call('zrange', k, -1, -1, 'withscores')
    if not top[1] then break end
    if tonumber(top[1]) > ms then
      if tonumber(top[2]) >= untl then return now end
      break
    end
    if tonumber(top[2]) > untl then untl = tonumber(top[2]) end
    redis.call('zrem', k, top[1])
  end
  redis.call('zadd', k, untl, ttl)
  redis.call('pexpire', k, math.ceil(untl - now))
  return now
end
"
    };
}

/// The Lua function the acquisition scripts call with each key they set: `hold(key, label, ttl)`
/// leaves the holder label (see `holder.rs`) at `fencelock:holder:<key>`
/// ([`crate::protocol::holder_key`]) with the lock's TTL, when a label is given. The name is
/// built in the script, as the release script builds its channel names: every script keeps the
/// KEYS it had, and other clients' calls of it, without the label, change nothing.
macro_rules! hold_lua {
    () => {
        r"
local function hold(key, label, ttl)
  if label and label ~= '' then
    redis.call('set', 'fencelock:holder:' .. key, label, 'PX', ttl)
  end
end
"
    };
}

/// The announcement function alone (published in `protocol`).
pub(crate) const ANNOUNCE_LUA: &str = announce_lua!();

/// Efficiency-mode acquisition of several keys: all or none. KEYS: locks (then their wait marks,
/// with ARGV[3]). ARGV: owner token, ttl in ms[, wait mark ms (or '' for none)[, holder label]]. Returns 1 when all were set, 0
/// when any is held; a waiting client (ARGV[3]) then marks every key as waited for, so that
/// releases wake it. A grant announces its TTL (see [`announce_lua`]). (One key on a single node
/// uses a plain `SET NX PX`, exactly as other Redlock clients do: a single node's quarantine
/// cannot learn from other nodes, so it announces nothing.)
pub(crate) static ACQUIRE_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_MANY_LUA));
const ACQUIRE_MANY_LUA: &str = concat!(
    announce_lua!(),
    hold_lua!(),
    r"
local mark, label = ARGV[3], ARGV[4]
if mark == '' then mark = nil end
if #KEYS == 1 then
  -- One key, no wait mark: the plain SET NX PX, and the announcement when it is set.
  if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
  hold(KEYS[1], label, ARGV[2])
  announce(ARGV[2])
  return 1
end
local n = #KEYS
if mark then n = n / 2 end
for i = 1, n do
  if redis.call('exists', KEYS[i]) == 1 then
    if mark then
      for j = 1, n do redis.call('set', KEYS[n + j], '1', 'PX', mark) end
    end
    return 0
  end
end
for i = 1, n do
  redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
  hold(KEYS[i], label, ARGV[2])
end
announce(ARGV[2])
return 1
"
);

/// Fencing-mode acquisition: set every lock key (all or none) and, in the same atomic step,
/// read the node's fence counter (`fencelock:fence`, shared by every resource) and the legacy
/// per-resource counters of the keys (`fencelock:fence:<resource>`, from before one counter per
/// node: read so that an upgraded node never issues below them). KEYS: n locks, the node
/// counter, n legacy counters (then n wait marks, with ARGV[3]). ARGV: owner token, ttl in
/// ms[, wait mark ms]. Returns `{1, largest counter, exists}` when every key was set,
/// `{0, largest counter, exists}` when any lock key is held (marking the keys as waited for,
/// with ARGV[3]): the counter is reported on a refusal too, so that a client that heard every
/// node knows whether any still has one (the amnesia guard, `fencing.rs`). `exists` is 1 when the
/// node counter or a legacy counter of the keys exists (the read is trusted), else 0; the
/// largest counter is '0' then. Counters compare as decimal strings: exact over the u64 range.
/// A grant announces its TTL.
pub(crate) static ACQUIRE_FENCED: LazyLock<Script> =
    LazyLock::new(|| Script::new(ACQUIRE_FENCED_LUA));
pub(crate) const ACQUIRE_FENCED_LUA: &str = concat!(
    announce_lua!(),
    hold_lua!(),
    r"
local mark, label = ARGV[3], ARGV[4]
if mark == '' then mark = nil end
local n = (#KEYS - 1) / 2
if mark then n = (#KEYS - 1) / 3 end
local best, exists = '0', 0
local c = redis.call('get', KEYS[n + 1])
if c then best, exists = c, 1 end
for i = 1, n do
  local l = redis.call('get', KEYS[n + 1 + i])
  if l then
    exists = 1
    if #l > #best or (#l == #best and l > best) then best = l end
  end
end
for i = 1, n do
  if redis.call('exists', KEYS[i]) == 1 then
    if mark then
      for j = 1, n do redis.call('set', KEYS[2 * n + 1 + j], '1', 'PX', mark) end
    end
    return {0, best, exists}
  end
end
for i = 1, n do
  redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
  hold(KEYS[i], label, ARGV[2])
end
announce(ARGV[2])
return {1, best, exists}
"
);

/// Fencing-mode write-back (and the seeding of a node that lost its counter, after issue):
/// only while we still own every lock key on this node, raise the node counter to the largest
/// of itself, the token and the keys' legacy counters, and delete those legacy counters (the
/// node counter is then at least each of them). KEYS: n locks, the node counter, n legacy
/// counters. ARGV: owner token, fencing token (decimal, no leading zeros). Returns 1 when the
/// node counter is now at least the token, 0 when some key is not ours (nothing written then).
pub(crate) static WRITE_BACK: LazyLock<Script> = LazyLock::new(|| Script::new(WRITE_BACK_LUA));
pub(crate) const WRITE_BACK_LUA: &str = r"
local n = (#KEYS - 1) / 2
for i = 1, n do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then return 0 end
end
local c = redis.call('get', KEYS[n + 1])
local best = ARGV[2]
if c and (#c > #best or (#c == #best and c > best)) then best = c end
for i = 1, n do
  local l = redis.call('get', KEYS[n + 1 + i])
  if l then
    if #l > #best or (#l == #best and l > best) then best = l end
    redis.call('del', KEYS[n + 1 + i])
  end
end
if best ~= c then redis.call('set', KEYS[n + 1], best) end
return 1
";

/// Compare-and-delete of every key that holds our token. When the key's wait mark says someone
/// waits, the deletion publishes on the key's release channel, so that waiters wake at once, and,
/// when waiters queue for the key (see `queue.rs`), names the first live one in line on the turn
/// channel of its client (the part of its waiter id before the dot). A holder that queued for
/// the lock leaves the line here (whether or not it still owned the key).
/// KEYS: n locks, their n queues, their n lease sets, their n wait marks. ARGV: owner token[,
/// the holder's waiter id]. The channel names are written out in the script (they must match
/// [`RELEASE_CHANNEL_PREFIX`] and [`TURN_CHANNEL_PREFIX`]): fewer arguments, a cheaper call.
/// Returns `{keys deleted, subscribers the messages reached}` (the second figure tells the
/// releaser that others are waiting), or just the keys deleted when nobody was told.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
pub(crate) const RELEASE_LUA: &str = r"
local now
-- Wakes the waiters of a released lock: its release channel, and the first waiter in line whose
-- lease is still running (the lapsed ahead of it are dropped). Returns how many heard.
local function wake(lock, q, l)
  local heard = redis.call('publish', 'fencelock:released:' .. lock, '1')
  while true do
    local first = redis.call('zrange', q, 0, 0)[1]
    if not first then return heard end
    if not now then
      local t = redis.call('time')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local lease = tonumber(redis.call('zscore', l, first))
    if lease and lease > now then
      local client = string.match(first, '^[^.]*')
      return heard + redis.call('publish', 'fencelock:turn:' .. client, first)
    end
    redis.call('zrem', q, first)
    redis.call('zrem', l, first)
  end
end
local n = #KEYS / 4
if n == 1 and not ARGV[2] then
  -- The common case first: one key, a holder that did not queue. The lock and its wait mark
  -- in one call; without waiters this costs about what a bare compare-and-delete costs.
  local v = redis.call('mget', KEYS[1], KEYS[4])
  if v[1] ~= ARGV[1] then
    -- MGET reads a key of another type as missing; GET fails on it (WRONGTYPE), as it should.
    if not v[1] then redis.call('get', KEYS[1]) end
    return 0
  end
  redis.call('del', KEYS[1], 'fencelock:holder:' .. KEYS[1])
  if not v[2] then return 1 end
  return {1, wake(KEYS[1], KEYS[2], KEYS[3])}
end
local deleted, heard = 0, 0
for i = 1, n do
  if ARGV[2] then
    redis.call('zrem', KEYS[n + i], ARGV[2])
    redis.call('zrem', KEYS[2 * n + i], ARGV[2])
  end
  local v = redis.call('mget', KEYS[i], KEYS[3 * n + i])
  if not v[1] then redis.call('get', KEYS[i]) end
  if v[1] == ARGV[1] then
    redis.call('del', KEYS[i], 'fencelock:holder:' .. KEYS[i])
    deleted = deleted + 1
    if v[2] then heard = heard + wake(KEYS[i], KEYS[n + i], KEYS[2 * n + i]) end
  end
end
return {deleted, heard}
";

/// A queued acquisition of one key (see `queue.rs`): registers the waiter's ticket (or renews
/// its lease), drops waiters whose lease ran out, and sets the lock key only if it is free and
/// this waiter is first in line. The granted waiter stays first in line until its release (or
/// its lease runs out), so that a grant on too few nodes does not hand its place to the next
/// waiter on some nodes only: it retries first everywhere. In fencing mode it also returns the
/// node's fence counter and whether it exists, also on a refusal, as [`ACQUIRE_FENCED`] does.
/// It also renews the key's wait mark, which tells a release that someone waits.
/// KEYS: lock, queue, leases, wait mark[, node counter, legacy counter]. ARGV: owner token, ttl
/// ms, waiter id, ticket, lease ms, how long the line and the mark outlive the last registration
/// (ms). Returns `{granted (1 or 0), largest counter, exists}` (`'0', 0` without fencing). A
/// grant announces its TTL.
pub(crate) static ACQUIRE_QUEUED: LazyLock<Script> =
    LazyLock::new(|| Script::new(ACQUIRE_QUEUED_LUA));
const ACQUIRE_QUEUED_LUA: &str = concat!(
    announce_lua!(),
    hold_lua!(),
    r"
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[5])
local best, exists = '0', 0
if #KEYS == 6 then
  for i = 5, 6 do
    local c = redis.call('get', KEYS[i])
    if c then
      exists = 1
      if #c > #best or (#c == #best and c > best) then best = c end
    end
  end
end
-- Every write to the line leaves it a TTL of at least ARGV[6] (raised, never shortened: waiters
-- with other leases share the line), also a renewal and one that re-creates an expired key: a
-- line nobody renews goes away by itself; tickets keep their order if it is rebuilt.
local function keep(k)
  if redis.call('pttl', k) < tonumber(ARGV[6]) then redis.call('pexpire', k, ARGV[6]) end
end
redis.call('zadd', KEYS[2], 'NX', ARGV[4], ARGV[3])
keep(KEYS[2])
redis.call('zadd', KEYS[3], now + lease, ARGV[3])
keep(KEYS[3])
redis.call('set', KEYS[4], '1', 'PX', ARGV[6])
if redis.call('exists', KEYS[1]) == 1 then return {0, best, exists} end
-- Grant only to the first waiter whose lease is still running; drop the lapsed ahead of us.
while true do
  local first = redis.call('zrange', KEYS[2], 0, 0)[1]
  if first == ARGV[3] then break end
  local until_ms = tonumber(redis.call('zscore', KEYS[3], first))
  if until_ms and until_ms > now then return {0, best, exists} end
  redis.call('zrem', KEYS[2], first)
  redis.call('zrem', KEYS[3], first)
end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
hold(KEYS[1], ARGV[7], ARGV[2])
announce(ARGV[2])
return {1, best, exists}
"
);

/// Compare-and-extend: renew every key's TTL if all still hold our token. Never creates a key:
/// an expired lock stays expired. KEYS: locks. ARGV: owner token, new ttl in ms. Returns 1 when
/// extended, 0 when some key is not ours (nothing extended then). An extension announces its
/// TTL (an extension may use a longer TTL than the acquisition did), unless ARGV[3] is given:
/// the caller announced it just before, on the same connection ([`ANNOUNCE`]).
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
const EXTEND_LUA: &str = concat!(
    announce_lua!(),
    r"
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do
  redis.call('pexpire', KEYS[i], ARGV[2])
  redis.call('pexpire', 'fencelock:holder:' .. KEYS[i], ARGV[2])
end
if not ARGV[3] then announce(ARGV[2]) end
return 1
"
);

/// The announcement alone: ARGV: ttl in ms. The batch extender sends it once at the head of its
/// pipeline, before the extensions (which then skip their own: an announcement costs about
/// three times a bare extension on the node, measured with redis-benchmark).
pub(crate) static ANNOUNCE: LazyLock<Script> = LazyLock::new(|| Script::new(ANNOUNCE_ONLY_LUA));
const ANNOUNCE_ONLY_LUA: &str = concat!(announce_lua!(), "return announce(ARGV[1])\n");

/// Compare-and-set of a node's marker (see `quarantine.rs`): KEYS: the marker. ARGV: the value
/// it must hold, the new value. Returns 1 when set, 0 when the marker held something else.
pub(crate) static MARK: LazyLock<Script> = LazyLock::new(|| Script::new(MARK_LUA));
const MARK_LUA: &str = r"
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('set', KEYS[1], ARGV[2])
return 1
";

/// The source of every script, for `SCRIPT LOAD` on a new connection.
pub(crate) const ALL: [&str; 8] = [
    ACQUIRE_MANY_LUA,
    ACQUIRE_QUEUED_LUA,
    ACQUIRE_FENCED_LUA,
    WRITE_BACK_LUA,
    RELEASE_LUA,
    EXTEND_LUA,
    MARK_LUA,
    ANNOUNCE_ONLY_LUA,
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

    #[test]
    fn the_scripts_write_the_holder_key_the_protocol_names() {
        let prefix = format!("'{}' ..", crate::holder::HOLDER_PREFIX);
        for script in [
            ACQUIRE_MANY_LUA,
            ACQUIRE_FENCED_LUA,
            ACQUIRE_QUEUED_LUA,
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
            EXTEND_LUA,
        ] {
            assert!(script.starts_with(ANNOUNCE_LUA));
            assert!(script.contains("announce(ARGV[2])"));
        }
    }
}
