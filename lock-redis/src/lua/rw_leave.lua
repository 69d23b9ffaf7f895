-- Takes a waiting writer off the list (it gave up or its future was dropped); when no
-- writer waits any more, readers held back by it are woken.
-- KEYS[1] waiting writers
-- ARGV[1] channel, ARGV[2] waiter id
local removed = redis.call('zrem', KEYS[1], ARGV[2])
if removed > 0 and redis.call('zcard', KEYS[1]) == 0 then
  redis.call('publish', ARGV[1], 'w')
end
return removed
