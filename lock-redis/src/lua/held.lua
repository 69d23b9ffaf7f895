-- Whether a lease is still stored (a holder that subscribed to hear of a force-unlock
-- looks once, for one that came before its subscription).
-- KEYS[1] the lease's key; ARGV[1] 's' or 'l' (a string key holding the value) or 'r'
-- (a reader in a hash of value -> expiry ms); ARGV[2] the value.
-- Returns 1 if it is there, else 0.
if ARGV[1] == 's' or ARGV[1] == 'l' then
  -- pcall: a key of another type (someone else's layout) is "not ours".
  if redis.pcall('get', KEYS[1]) == ARGV[2] then
    return 1
  end
  return 0
end
if type(redis.pcall('hget', KEYS[1], ARGV[2])) == 'string' then
  return 1
end
return 0
