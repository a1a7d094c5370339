-- Raises the node counter KEYS[1] to at least ARGV[1] (see reseed.rs).
local want = ARGV[1]
local cur = redis.call('get', KEYS[1])
if cur then
  if not string.match(cur, '^%d+$') then
    return redis.error_reply('fencelock: ' .. KEYS[1] .. ' is not a counter: ' .. cur)
  end
  cur = (string.gsub(cur, '^0+(%d)', '%1'))
  if not bigger(want, cur) then
    return {0, cur}
  end
end
redis.call('set', KEYS[1], want)
return {1, cur or ''}
