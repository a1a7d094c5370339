-- The announcement sent ahead of plain SET NX PX grants (see scripts.rs): announces the TTL
-- ARGV[1] with the margin ARGV[2] (ms) and returns what the TTL's mark has left (ms, PTTL;
-- negative when there is none). The mark expires no later than the deadline of an entry with
-- this TTL or a longer one, so a lock of this TTL set on this node within (what is left - the
-- TTL) after this call is covered; the margin makes that window at least the margin long (or
-- the TTL, if that is shorter), less a millisecond.
announce(ARGV[1], tonumber(ARGV[2]))
return redis.call('pttl', 'fencelock:ttls:' .. ARGV[1])
