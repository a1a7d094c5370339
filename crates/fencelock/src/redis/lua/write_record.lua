-- Records a writer's fencing token for the readers (see scripts.rs for KEYS, ARGV and the reply).
if not all_owned(1, ARGV[1]) then return 0 end
local c = redis.call('get', KEYS[2])
if not c or bigger(ARGV[2], c) then c = ARGV[2] end
-- The resource's record lives a while (node state must not grow with the names used); the
-- node's largest record stays, and a reader that finds no record of its resource reads it.
redis.call('set', KEYS[2], c, 'PX', ARGV[3])
local m = redis.call('get', KEYS[3])
if not m or bigger(ARGV[2], m) then redis.call('set', KEYS[3], ARGV[2]) end
return 1
