-- Fencing-mode acquisition (see scripts.rs for KEYS, ARGV and the reply).
local mark, label = ARGV[4], ARGV[5]
if mark == '' then mark = nil end
local n = (#KEYS - 1) / 2
if mark then n = (#KEYS - 1) / 3 end
local p = proposal(ARGV[3])
if not p then
  return redis.error_reply('fencelock: the proposed fencing token is not a decimal integer from 0 to 9223372036854775807 (i64::MAX, the largest a fenced storage holds): ' .. ARGV[3])
end
local best, exists, v, legacy = read_counters(n + 1, n + 1, n)
if any_set(n) then
  if mark then mark_waited(2 * n + 1, n, mark) end
  return {0, best, exists, 0}
end
set_all(n, ARGV[1], ARGV[2])
hold_all(n, label, ARGV[2])
announce(ARGV[2])
local accepted
best, accepted = accept(p, best, exists, v, legacy, n + 1, n + 1, n)
return {1, best, exists, accepted}
