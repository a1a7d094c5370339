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
-- enqueue(q, l, mark, me, ticket, lease_until, keep): registers the waiter `me` with its ticket
-- (or renews its lease, to the node time `lease_until` in ms) and renews the key's wait mark.
-- Every write to the line leaves it a TTL of at least `keep` ms (raised, never shortened:
-- waiters with other leases share the line), also a renewal and one that re-creates an expired
-- key: a line nobody renews goes away by itself; tickets keep their order if it is rebuilt.
local function enqueue(q, l, mark, me, ticket, lease_until, keep)
  local function keep_for(k)
    if redis.call('pttl', k) < tonumber(keep) then redis.call('pexpire', k, keep) end
  end
  redis.call('zadd', q, 'NX', ticket, me)
  keep_for(q)
  redis.call('zadd', l, lease_until, me)
  keep_for(l)
  redis.call('set', mark, '1', 'PX', keep)
end
-- wake(lock, q, l): wakes the waiters of a released lock: its release channel, and the first
-- live waiter in line on the turn channel of its client (the part of its id before the dot).
-- Returns how many heard.
local function wake(lock, q, l)
  local heard = redis.call('publish', 'fencelock:released:' .. lock, '1')
  local first = first_live(q, l)
  if not first then return heard end
  local client = string.match(first, '^[^.]*')
  return heard + redis.call('publish', 'fencelock:turn:' .. client, first)
end
