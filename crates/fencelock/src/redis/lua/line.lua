-- The waiting line (see queue.rs): a sorted set of waiter ids by ticket `q`, and their leases
-- (score: the node time in ms until which each is live) `l`.
-- node_ms(): the node's clock in ms.
local function node_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- first_live(q, l, me, now): the first waiter in line whose lease is still running (or `me`,
-- when it comes first, whatever its lease), after dropping the lapsed waiters ahead of it; nil
-- when nobody live waits. `now` (ms) is read from the node when not given and needed.
local function first_live(q, l, me, now)
  while true do
    local first = redis.call('zrange', q, 0, 0)[1]
    if not first or first == me then return first end
    now = now or node_ms()
    local lease = tonumber(redis.call('zscore', l, first))
    if lease and lease > now then return first end
    redis.call('zrem', q, first)
    redis.call('zrem', l, first)
  end
end
