-- Compare-and-delete with the wake-up of waiters (see scripts.rs for KEYS, ARGV and the reply).
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
  redis.call('del', KEYS[1], holder_key(KEYS[1]))
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
    redis.call('del', KEYS[i], holder_key(KEYS[i]))
    deleted = deleted + 1
    if v[2] then heard = heard + wake(KEYS[i], KEYS[n + i], KEYS[2 * n + i]) end
  end
end
return {deleted, heard}
