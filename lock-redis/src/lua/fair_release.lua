-- Releases the fair lock if it holds this acquisition's value, and wakes only the
-- waiter first in line.
-- KEYS[1] holder, KEYS[2] queue
-- ARGV[1] channel, ARGV[2..] the values this acquisition may hold
-- Returns 1 when released, else 0.
local value = redis.call('get', KEYS[1])
for i = 2, #ARGV do
  if value == ARGV[i] then
    redis.call('del', KEYS[1])
    local head = redis.call('lindex', KEYS[2], 0)
    if head then
      redis.call('publish', ARGV[1], head)
    end
    return 1
  end
end
return 0
