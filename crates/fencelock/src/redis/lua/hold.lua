-- The holder label of older versions (see holder.rs): hold(key, label, ttl) left it at the
-- side key protocol::holder_key names, with the lock's TTL. This version keeps the holder in
-- the lock key's value and passes no label (hold does nothing then); the release still deletes
-- an older client's side key with the lock. The name is built here, as the release script
-- builds its channel names: the scripts keep their KEYS.
-- holder_key(key): that side key.
local function holder_key(key)
  return 'fencelock:holder:' .. key
end
local function hold(key, label, ttl)
  if label and label ~= '' then
    redis.call('set', holder_key(key), label, 'PX', ttl)
  end
end
-- hold for each of the lock keys KEYS[1..n].
local function hold_all(n, label, ttl)
  for i = 1, n do hold(KEYS[i], label, ttl) end
end
