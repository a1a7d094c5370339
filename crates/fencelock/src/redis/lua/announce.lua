-- announce(ttl): leaves the lock's TTL (ms, a decimal string) on the node for the restart
-- quarantine, in the sorted set fencelock:ttls (member the TTL, score the node's time in ms
-- until which a lock with that TTL may live). Kept as a staircase (see scripts.rs). Returns the
-- node time (ms) it used.
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
