-- Extends a reader's entry (see scripts.rs for KEYS, ARGV and the reply). Never revives a
-- lapsed entry, and never a reader whose lock key no longer holds the marker.
local now = node_ms()
local until_ms = tonumber(redis.call('zscore', KEYS[2], ARGV[1]))
if not until_ms or until_ms <= now or redis.call('get', KEYS[1]) ~= 'fencelock:readers' then
  return 0
end
local renewed = now + tonumber(ARGV[2])
if renewed > until_ms then redis.call('zadd', KEYS[2], renewed, ARGV[1]) end
cover(KEYS[1], KEYS[2], now)
announce(ARGV[2])
return 1
