-- RedLock, second phase: moves this master's lease to the fence chosen for the whole
-- majority, and raises the counter to it, so every master of the majority has a
-- counter at least as high as the granted fence.
-- KEYS[1] lock key, KEYS[2] fencing counter
-- ARGV[1] value written by the first phase, ARGV[2] value with the chosen fence,
-- ARGV[3] the chosen fence
-- Returns 1 when the lease is (now) at the chosen fence, 0 when it is gone.
local value = redis.call('get', KEYS[1])
if value == ARGV[2] then
  return 1
end
if value ~= ARGV[1] then
  return 0
end
redis.call('set', KEYS[1], ARGV[2], 'KEEPTTL')
local counter = tonumber(redis.call('get', KEYS[2]) or '0')
if counter < tonumber(ARGV[3]) then
  -- KEEPTTL: the counter keeps the expiry the first phase gave it.
  redis.call('set', KEYS[2], ARGV[3], 'KEEPTTL')
end
return 1
