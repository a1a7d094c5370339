-- A queued acquisition of one key (see scripts.rs for KEYS, ARGV and the reply).
local now = node_ms()
local lease = tonumber(ARGV[5])
local best, exists = '0', 0
if #KEYS == 6 then
  for i = 5, 6 do
    local c = redis.call('get', KEYS[i])
    if c then
      exists = 1
      if bigger(c, best) then best = c end
    end
  end
end
enqueue(KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4], now + lease, ARGV[6])
if redis.call('exists', KEYS[1]) == 1 then return {0, best, exists} end
-- Grant only to the first waiter whose lease is still running; drop the lapsed ahead of us.
if first_live(KEYS[2], KEYS[3], ARGV[3], now) ~= ARGV[3] then return {0, best, exists} end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
hold(KEYS[1], ARGV[7], ARGV[2])
announce(ARGV[2])
return {1, best, exists}
