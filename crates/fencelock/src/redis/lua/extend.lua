-- Compare-and-extend (see scripts.rs for KEYS, ARGV and the reply).
if not all_owned(#KEYS, ARGV[1]) then return 0 end
-- An older client's holder side key is not extended here: this version keeps the holder in
-- the value, and a side key left behind by a lost lock must not take a new holder's TTL (it
-- would then read as that holder's label). An older client's own script extends its own.
for i = 1, #KEYS do
  redis.call('pexpire', KEYS[i], ARGV[2])
end
announce(ARGV[2])
return 1
