-- Readers of a read-write lock (see rwlock.rs). While readers hold, the lock key holds the
-- marker 'fencelock:readers' (a string, so that a writer's or any Redlock client's SET NX is
-- refused, and a compare-and-delete of an owner value leaves it alone); the readers' sorted set
-- holds each reader's owner value, scored by the node time (ms) until which its entry lives.
-- The marker and the set live exactly as long as the longest live entry, so a reader that died
-- stops counting when its own TTL runs out, and the lock key goes with the last live reader.
-- cover(lock, rs, now): drops the lapsed entries of `rs`, then gives the marker and the set the
-- TTL of the longest live entry, or deletes both when none is live (the caller made sure the
-- lock key is absent or holds the marker). Returns whether a live entry remains.
local function cover(lock, rs, now)
  redis.call('zremrangebyscore', rs, '-inf', now)
  local top = redis.call('zrange', rs, -1, -1, 'withscores')
  if not top[1] then
    redis.call('del', lock, rs)
    return false
  end
  local left = tonumber(top[2]) - now
  redis.call('set', lock, 'fencelock:readers', 'PX', left)
  redis.call('pexpire', rs, left)
  return true
end
-- writer_ahead(q, l, me, now): whether a writer with a running lease waits in line `q` ahead of
-- the waiter `me` (anywhere in line when `me` is nil): then a reader waits behind it. Readers'
-- waiter ids have an 'r' right after the dot; any other id is a writer (a mutex waiter). Lapsed
-- waiters met on the way are dropped, as first_live drops them.
local function writer_ahead(q, l, me, now)
  local last = -1
  if me then
    local rank = redis.call('zrank', q, me)
    if not rank or rank == 0 then return false end
    last = rank - 1
  end
  for _, id in ipairs(redis.call('zrange', q, 0, last)) do
    local lease = tonumber(redis.call('zscore', l, id))
    if not lease or lease <= now then
      redis.call('zrem', q, id)
      redis.call('zrem', l, id)
    elseif not string.find(id, '^[^.]*%.r') then
      return true
    end
  end
  return false
end
