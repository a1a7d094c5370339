-- Releases a reader's entry (see scripts.rs for KEYS, ARGV and the reply).
local now = node_ms()
if ARGV[2] then
  redis.call('zrem', KEYS[3], ARGV[2])
  redis.call('zrem', KEYS[4], ARGV[2])
end
local until_ms = tonumber(redis.call('zscore', KEYS[2], ARGV[1]))
local held = 0
if until_ms then
  if until_ms > now then held = 1 end
  redis.call('zrem', KEYS[2], ARGV[1])
end
if redis.call('get', KEYS[1]) ~= 'fencelock:readers' then return held end
if cover(KEYS[1], KEYS[2], now) or redis.call('exists', KEYS[5]) == 0 then return held end
-- The last reader is gone and someone waits: wake them (a writer first in line gets its turn).
return {held, wake(KEYS[1], KEYS[3], KEYS[4])}
