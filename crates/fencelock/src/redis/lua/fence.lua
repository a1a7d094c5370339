-- The fence counters of a call: KEYS[c] is the node counter, KEYS[from + 1 .. from + n] the
-- legacy per-resource counters of its n locks (see scripts.rs). Needs `bigger`.
-- read_counters(c, from, n): the largest of them ('0' when none), 1 when any exists (else 0),
-- the node counter as read (nil when missing) and whether a legacy counter exists, the last two
-- for settle_counters in the same call.
local function read_counters(c, from, n)
  local best, exists, legacy = '0', 0, false
  local v = redis.call('get', KEYS[c])
  if v then best, exists = v, 1 end
  for i = from + 1, from + n do
    local l = redis.call('get', KEYS[i])
    if l then
      exists, legacy = 1, true
      if bigger(l, best) then best = l end
    end
  end
  return best, exists, v, legacy
end
-- settle_counters(c, from, n, to, v, legacy): the node counter becomes `to` and the legacy
-- counters go; `v` and `legacy` are what read_counters returned earlier in the same call, so
-- that nothing is read twice or deleted that is not there.
local function settle_counters(c, from, n, to, v, legacy)
  if v ~= to then redis.call('set', KEYS[c], to) end
  if legacy then
    for i = from + 1, from + n do redis.call('del', KEYS[i]) end
  end
end
-- The largest token: i64::MAX, what a fenced storage's signed 64-bit column holds. No node
-- takes a proposal or a write-back above it.
local TOKEN_MAX = '9223372036854775807'
-- proposal(arg): a proposed fencing token, a decimal integer from 1 to TOKEN_MAX without leading
-- zeros ('0' when none is given: never accepted), or nil when `arg` is not one.
local function proposal(arg)
  if not arg then return '0' end
  if arg == '0' then return arg end
  if #arg <= 19 and string.match(arg, '^[1-9]%d*$') and not bigger(arg, TOKEN_MAX) then
    return arg
  end
  return nil
end
-- accept(p, best, exists, v, legacy, c, from, n), on a node that just set our keys, with what
-- read_counters returned: the proposal p is taken when a counter exists (the read is trusted)
-- and p is above `best`, the largest counter; the counters are then settled at p, in the same
-- atomic step as the keys. Returns the largest counter after the call and 1 when accepted,
-- else 0.
local function accept(p, best, exists, v, legacy, c, from, n)
  if exists == 0 or not bigger(p, best) then return best, 0 end
  settle_counters(c, from, n, p, v, legacy)
  return p, 1
end
