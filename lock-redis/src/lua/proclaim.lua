-- Publishes a new value for an election's leader, if the leader's key still holds the
-- caller's lease. The value lives beside the leader's key, at `<key>:value`, as a hash
-- naming the lease it belongs to (`lease`) and the value (`value`); it expires with the
-- leader's key (renewals extend both: see renew.lua) and goes with its release
-- (fair_release.lua). A reader takes it only while `lease` is the leader's value, so a
-- value left by an earlier leader is never read as a later one's.
-- KEYS[1] the leader's key, KEYS[2] `<leader's key>:value`; ARGV[1] the caller's lease
-- value, ARGV[2] the new value.
-- Returns 1 when published, 0 when the lease is gone (nothing is written).
if redis.pcall('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
-- A key is still there in the millisecond it expires (PTTL 0): a value written then
-- would have no expiry and outlive it.
local ttl = redis.call('pttl', KEYS[1])
if ttl == 0 then
  return 0
end
redis.call('hset', KEYS[2], 'lease', ARGV[1], 'value', ARGV[2])
if ttl > 0 then
  redis.call('pexpire', KEYS[2], ttl)
end
return 1
