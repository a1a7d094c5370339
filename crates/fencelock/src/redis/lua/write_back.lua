-- Fencing-mode write-back and seeding (see scripts.rs for KEYS, ARGV and the reply).
local n = (#KEYS - 1) / 2
if not all_owned(n, ARGV[1]) then return 0 end
local c = redis.call('get', KEYS[n + 1])
local best = ARGV[2]
if c and bigger(c, best) then best = c end
for i = 1, n do
  local l = redis.call('get', KEYS[n + 1 + i])
  if l then
    if bigger(l, best) then best = l end
    redis.call('del', KEYS[n + 1 + i])
  end
end
if best ~= c then redis.call('set', KEYS[n + 1], best) end
return 1
