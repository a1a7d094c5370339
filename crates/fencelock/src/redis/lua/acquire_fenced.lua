-- Fencing-mode acquisition (see scripts.rs for KEYS, ARGV and the reply).
local mark, label = ARGV[3], ARGV[4]
if mark == '' then mark = nil end
local n = (#KEYS - 1) / 2
if mark then n = (#KEYS - 1) / 3 end
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
  if mark then mark_waited(2 * n + 1, n, mark) end
  return {0, best, exists}
end
set_all(n, ARGV[1], ARGV[2])
hold_all(n, label, ARGV[2])
announce(ARGV[2])
return {1, best, exists}
