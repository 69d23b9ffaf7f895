-- Releases an exclusive lock if it still holds the value of this acquisition, and
-- wakes the waiters.
-- KEYS[1] lock key
-- ARGV[1] channel to publish on, ARGV[2..] the values this acquisition may hold
-- Returns 1 when released, 0 when the key holds anything else (or nothing).
local value = redis.call('get', KEYS[1])
for i = 2, #ARGV do
  if value == ARGV[i] then
    redis.call('del', KEYS[1])
    redis.call('publish', ARGV[1], 'released')
    return 1
  end
end
return 0
