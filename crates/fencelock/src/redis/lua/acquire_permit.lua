-- A permit's acquisition of one slot (see scripts.rs for KEYS, ARGV and the reply).
local n = tonumber(ARGV[3])
local best, exists = '0', 0
for i = 3 + 2 * n + 1, #KEYS do
  local c = redis.call('get', KEYS[i])
  if c then
    exists = 1
    if bigger(c, best) then best = c end
  end
end
local now = node_ms()
local me = ARGV[4]
if me == '' then me = nil end
if me then
  -- Register (or renew) in the line, as a queued waiter of one key does; mark every slot as
  -- waited for, so that its release wakes the waiters.
  local keep = tonumber(ARGV[7])
  local function keep_line(k)
    if redis.call('pttl', k) < keep then redis.call('pexpire', k, keep) end
  end
  redis.call('zadd', KEYS[2], 'NX', ARGV[5], me)
  keep_line(KEYS[2])
  redis.call('zadd', KEYS[3], now + tonumber(ARGV[6]), me)
  keep_line(KEYS[3])
  mark_waited(3 + n, n, ARGV[7])
end
if redis.call('exists', KEYS[1]) == 1 then return {0, best, exists} end
local free = n - redis.call('exists', unpack(KEYS, 4, 3 + n))
-- Fewer live waiters ahead than free slots: every one of them can have a slot too.
if live_ahead(KEYS[2], KEYS[3], me, now, free) >= free then return {0, best, exists} end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
hold(KEYS[1], ARGV[8], ARGV[2])
announce(ARGV[2])
return {1, best, exists}
