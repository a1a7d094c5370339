-- The holder label (see holder.rs), when the acquisition is given one: hold(key, label, ttl)
-- leaves it at the side key protocol::holder_key names, with the lock's TTL. The name is
-- built here, as the release script builds its channel names: the scripts keep their KEYS, and
-- other clients' calls of them, without a label, change nothing.
-- holder_key(key): that side key, for the scripts that extend and delete it with the lock.
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
