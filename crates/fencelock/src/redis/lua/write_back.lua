-- Fencing-mode write-back and seeding (see scripts.rs for KEYS, ARGV and the reply).
local n = (#KEYS - 1) / 2
if bigger(ARGV[2], TOKEN_MAX) then
  return redis.error_reply('fencelock: the fencing token ' .. ARGV[2] .. ' is above ' .. TOKEN_MAX .. ' (i64::MAX), the largest a fenced storage holds')
end
if not all_owned(n, ARGV[1]) then return 0 end
local best, exists, v, legacy = read_counters(n + 1, n + 1, n)
if exists == 0 and ARGV[3] ~= 'epoch' then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local since = redis.call('get', 'fencelock:lost')
  if not ARGV[3] then
    -- A plain write-back goes to nodes whose read was trusted: this one lost its counter since
    -- (eviction, a DEL) and may have recorded a larger token than ours. Creating the counter
    -- here would make it trusted below that token (issue 27). Nothing is written but the time
    -- it was found so, which starts its seed wait as a refused seed does: any moment after the
    -- loss is a safe start.
    if not since then redis.call('set', 'fencelock:lost', now) end
    return 3
  end
  -- A seed (issue 27 item 3): taken only if our keys here were set at least ARGV[3] ms after the
  -- node was first found without its counter (set now when it was not: this seed waits).
  if not since then
    redis.call('set', 'fencelock:lost', now)
    return 2
  end
  local held = tonumber(ARGV[4]) - redis.call('pttl', KEYS[1])
  if now - held - tonumber(since) < tonumber(ARGV[3]) then return 2 end
end
if bigger(ARGV[2], best) then best = ARGV[2] end
settle_counters(n + 1, n + 1, n, best, v, legacy)
if not v then redis.call('del', 'fencelock:lost') end
return 1
