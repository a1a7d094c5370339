-- Appends a leader to an election's log while its lock is still ours (see election.rs).
if not all_owned(1, ARGV[1]) then return 0 end
redis.call('zadd', KEYS[2], ARGV[2], ARGV[3])
redis.call('zremrangebyrank', KEYS[2], 0, -(tonumber(ARGV[4]) + 1))
return 1
