-- announce(ttl): leaves the lock's TTL (ms, a decimal string) on the node for the restart
-- quarantine, in the sorted set fencelock:ttls (member the TTL, score the node's time in ms
-- until which a lock with that TTL may live, or later). Kept as a staircase (see scripts.rs).
-- The mark fencelock:ttls:<ttl>, a plain key, expires no later than the deadline of an entry
-- with this TTL or a longer one; while it has more than the TTL left, this lock is covered and
-- the announcement ends at one call (the common case: the same TTL again and again). Otherwise
-- the entry is written one TTL ahead (now + 2 ttl), so that the next TTL's announcements stop
-- at the mark. Returns the node time (ms) it used, 0 when it stopped at the mark.
-- announce(ttl, margin): the same, but it stops at the mark, or at a longer TTL's entry, only
-- when that covers `margin` ms (a number) beyond one TTL from now: the announcement sent ahead
-- of plain grants (announce_ahead.lua) asks for that much, so that what it reports covers a
-- grant sent after it. A margin only makes it write more. Without one: 0.
-- The whole set expires with its latest entry, never sooner (PEXPIREAT to the largest score): a
-- caller whose margin exceeds its TTL writes its entry below a longer TTL's, and expiring the set
-- at its own deadline cut that entry while its lock lived (issue 27, item 1).
-- mark_until(mark, deadline, now): the mark expires a millisecond before `deadline` (node time
-- in ms, as TIME gives it), set as an absolute time: a PX counted from when the SET runs would
-- outlive the deadline by however long the script was held up after its TIME (on a loaded box
-- the model's cross-check saw a mark expire 7 ms after its deadline).
local function mark_until(mark, deadline, now)
  if deadline - now > 1 then
    redis.call('set', mark, '1')
    redis.call('pexpireat', mark, deadline - 1)
  end
end
local function announce(ttl, margin)
  local k = 'fencelock:ttls'
  local mark = k .. ':' .. ttl
  local ms = tonumber(ttl)
  local slack = margin or 0
  if redis.call('pttl', mark) > ms + slack then return 0 end
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local need = now + ms + slack
  local untl = now + 2 * ms
  local top = redis.call('zrange', k, -1, -1, 'withscores')
  if top[1] == ttl then
    -- This TTL is already the latest entry; move its deadline.
    if tonumber(top[2]) > untl then untl = tonumber(top[2]) end
    redis.call('zadd', k, untl, ttl)
    redis.call('pexpireat', k, untl)
    mark_until(mark, untl, now)
    return now
  end
  redis.call('zremrangebyscore', k, '-inf', now)
  local latest = untl
  while true do
    local top = redis.call('zrange', k, -1, -1, 'withscores')
    if not top[1] then break end
    if tonumber(top[1]) > ms then
      local until_top = tonumber(top[2])
      if until_top >= need then
        -- A longer TTL outlasts this lock: nothing to add, and its deadline covers the mark.
        mark_until(mark, until_top, now)
        return now
      end
      if until_top > latest then latest = until_top end
      break
    end
    if tonumber(top[2]) > untl then untl = tonumber(top[2]) end
    redis.call('zrem', k, top[1])
  end
  redis.call('zadd', k, untl, ttl)
  if untl > latest then latest = untl end
  redis.call('pexpireat', k, latest)
  mark_until(mark, untl, now)
  return now
end
