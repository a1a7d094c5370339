-- Appends a leader to an election's log while its lock is still ours (see election.rs).
if not all_owned(1, ARGV[1]) then return 0 end
redis.call('zadd', KEYS[2], ARGV[2], ARGV[3])
local extra = redis.call('zcard', KEYS[2]) - tonumber(ARGV[4])
if extra > 0 then
  -- Scores are doubles: terms above 2^53 may share one, and Redis orders ties by member text.
  -- The oldest entries are therefore chosen by the terms' digits (no leading zeros: shorter is
  -- smaller, then as text) among every entry scored at most as the extra-th lowest.
  local edge = redis.call('zrange', KEYS[2], extra - 1, extra - 1, 'withscores')[2]
  local low = redis.call('zrangebyscore', KEYS[2], '-inf', edge)
  table.sort(low, function(a, b)
    local x, y = string.match(a, '^%d*'), string.match(b, '^%d*')
    if #x ~= #y then return #x < #y end
    return x < y
  end)
  for i = 1, extra do redis.call('zrem', KEYS[2], low[i]) end
end
return 1
