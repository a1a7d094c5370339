-- A Sentinel node found serving under a run id its marker does not name (see scripts.rs).
local cur = redis.call('get', KEYS[1]) or ''
if cur ~= ARGV[1] then return 0 end
redis.call('set', KEYS[1], ARGV[2])
redis.call('del', KEYS[2])
return 1
