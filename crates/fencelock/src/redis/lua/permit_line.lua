-- live_ahead(q, l, me, now, limit): how many live waiters wait ahead of `me` in the line `q`
-- (leases `l`, as line.lua's), all of them when `me` is nil, counting up to `limit`; drops the
-- lapsed waiters it meets.
local function live_ahead(q, l, me, now, limit)
  local count, at = 0, 0
  while count < limit do
    local w = redis.call('zrange', q, at, at)[1]
    if not w or w == me then return count end
    local lease = tonumber(redis.call('zscore', l, w))
    if lease and lease > now then
      count = count + 1
      at = at + 1
    else
      redis.call('zrem', q, w)
      redis.call('zrem', l, w)
    end
  end
  return count
end
