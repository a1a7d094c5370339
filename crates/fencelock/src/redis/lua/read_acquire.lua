-- A shared (read) acquisition of one key (see scripts.rs for KEYS, ARGV and the reply).
local now = node_ms()
local record = redis.call('get', KEYS[3]) or redis.call('get', KEYS[7]) or '0'
local me = ARGV[3]
if me then enqueue(KEYS[4], KEYS[5], KEYS[6], me, ARGV[4], now + tonumber(ARGV[5]), ARGV[6]) end
local held = redis.call('get', KEYS[1])
if held and held ~= 'fencelock:readers' then return {0, record} end
if writer_ahead(KEYS[4], KEYS[5], me, now) then return {0, record} end
redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
cover(KEYS[1], KEYS[2], now)
announce(ARGV[2])
return {1, record}
