-- Efficiency-mode acquisition of several keys, all or none (see scripts.rs for KEYS and ARGV).
local mark, label = ARGV[3], ARGV[4]
if mark == '' then mark = nil end
if #KEYS == 1 then
  -- One key, no wait mark: the plain SET NX PX, and the announcement when it is set.
  if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
  hold(KEYS[1], label, ARGV[2])
  announce(ARGV[2])
  return 1
end
local n = #KEYS
if mark then n = n / 2 end
if any_set(n) then
  if mark then mark_waited(n, n, mark) end
  return 0
end
set_all(n, ARGV[1], ARGV[2])
hold_all(n, label, ARGV[2])
announce(ARGV[2])
return 1
