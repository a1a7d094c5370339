-- Fencing-mode write-back and seeding (see scripts.rs for KEYS, ARGV and the reply).
local n = (#KEYS - 1) / 2
if not all_owned(n, ARGV[1]) then return 0 end
local best, _, v, legacy = read_counters(n + 1, n + 1, n)
if bigger(ARGV[2], best) then best = ARGV[2] end
settle_counters(n + 1, n + 1, n, best, v, legacy)
return 1
