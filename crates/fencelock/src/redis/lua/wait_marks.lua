-- mark_waited(from, n, ms): sets the n wait marks KEYS[from + 1 .. from + n] for ms, so that
-- the releases of those locks wake whoever waits for them.
local function mark_waited(from, n, ms)
  for j = from + 1, from + n do redis.call('set', KEYS[j], '1', 'PX', ms) end
end
