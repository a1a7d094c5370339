-- Helpers over a run of lock keys KEYS[1..n].
-- Whether any of them is set (by anyone).
local function any_set(n)
  for i = 1, n do
    if redis.call('exists', KEYS[i]) == 1 then return true end
  end
  return false
end
-- Whether every one of them holds the owner value `owner`.
local function all_owned(n, owner)
  for i = 1, n do
    if redis.call('get', KEYS[i]) ~= owner then return false end
  end
  return true
end
-- Sets every one of them to `owner` for `ttl` ms.
local function set_all(n, owner, ttl)
  for i = 1, n do redis.call('set', KEYS[i], owner, 'PX', ttl) end
end
