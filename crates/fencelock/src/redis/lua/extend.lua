-- Compare-and-extend (see scripts.rs for KEYS, ARGV and the reply).
if not all_owned(#KEYS, ARGV[1]) then return 0 end
for i = 1, #KEYS do
  redis.call('pexpire', KEYS[i], ARGV[2])
  redis.call('pexpire', holder_key(KEYS[i]), ARGV[2])
end
announce(ARGV[2])
return 1
