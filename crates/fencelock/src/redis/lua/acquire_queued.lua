-- A queued acquisition of one key (see scripts.rs for KEYS, ARGV and the reply).
local fenced = #KEYS == 6
local p = proposal(ARGV[7])
if not p then
  return redis.error_reply('fencelock: the proposed fencing token is not a decimal integer from 0 to 9223372036854775807 (i64::MAX, the largest a fenced storage holds): ' .. ARGV[7])
end
local now = node_ms()
local lease = tonumber(ARGV[5])
local best, exists, v, legacy = '0', 0, nil, false
if fenced then best, exists, v, legacy = read_counters(5, 5, 1) end
enqueue(KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4], now + lease, ARGV[6])
if redis.call('exists', KEYS[1]) == 1 then return {0, best, exists, 0} end
-- Grant only to the first waiter whose lease is still running; drop the lapsed ahead of us.
if first_live(KEYS[2], KEYS[3], ARGV[3], now) ~= ARGV[3] then return {0, best, exists, 0} end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
hold(KEYS[1], ARGV[8], ARGV[2])
announce(ARGV[2])
local accepted = 0
if fenced then best, accepted = accept(p, best, exists, v, legacy, 5, 5, 1) end
return {1, best, exists, accepted}
