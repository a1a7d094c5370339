-- Compare-and-set of a node's marker (see scripts.rs).
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('set', KEYS[1], ARGV[2])
return 1
