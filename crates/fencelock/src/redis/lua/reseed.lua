-- Raises the node counter KEYS[1] to at least ARGV[1] (see reseed.rs). A node without the
-- counter lost its data and may have recorded a larger token: the counter is created there only
-- with ARGV[2] = '1' (every node lacks one); otherwise the reply is {2, ''}.
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
elseif ARGV[2] ~= '1' then
  return {2, ''}
end
redis.call('set', KEYS[1], want)
if not cur then redis.call('del', 'fencelock:lost') end
return {1, cur or ''}
