-- Fencing-mode acquisition (see scripts.rs for KEYS, ARGV and the reply).
local n = (#KEYS - 1) / 2
if ARGV[3] then n = (#KEYS - 1) / 3 end
local best, exists = '0', 0
local c = redis.call('get', KEYS[n + 1])
if c then best, exists = c, 1 end
for i = 1, n do
  local l = redis.call('get', KEYS[n + 1 + i])
  if l then
    exists = 1
    if bigger(l, best) then best = l end
  end
end
if any_set(n) then
  if ARGV[3] then mark_waited(2 * n + 1, n, ARGV[3]) end
  return {0, best, exists}
end
set_all(n, ARGV[1], ARGV[2])
announce(ARGV[2])
return {1, best, exists}
