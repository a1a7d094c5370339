-- Records a writer's fencing token for the readers (see scripts.rs for KEYS, ARGV and the reply).
if not all_owned(1, ARGV[1]) then return 0 end
local c = redis.call('get', KEYS[2])
if not c or bigger(ARGV[2], c) then redis.call('set', KEYS[2], ARGV[2]) end
return 1
