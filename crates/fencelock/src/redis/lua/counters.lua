-- Fence counters are decimal strings without leading zeros, compared as such: exact over the
-- u64 range (Lua numbers are doubles, exact only below 2^53).
local function bigger(a, b)
  return #a > #b or (#a == #b and a > b)
end
