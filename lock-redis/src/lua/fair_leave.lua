-- Takes a waiter out of the fair queue (it gave up or its future was dropped); if it
-- was first in line and the lock is free, the next one is told its turn came.
-- KEYS[1] holder, KEYS[2] queue, KEYS[3] waiter expiries
-- ARGV[1] channel, ARGV[2] waiter id
-- Returns 1 if the waiter was queued, else 0.
local head = redis.call('lindex', KEYS[2], 0)
local removed = redis.call('lrem', KEYS[2], 0, ARGV[2])
redis.call('zrem', KEYS[3], ARGV[2])
if head == ARGV[2] and redis.call('exists', KEYS[1]) == 0 then
  local next_head = redis.call('lindex', KEYS[2], 0)
  if next_head then
    redis.call('publish', ARGV[1], next_head)
  end
end
return removed > 0 and 1 or 0
