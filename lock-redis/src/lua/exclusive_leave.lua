-- Takes a waiter off the exclusive lock's waiters (it gave up, or its future was
-- dropped); if the lock is free, the next one is woken, in case a release woke the
-- one leaving.
-- KEYS[1] lock key, KEYS[2] waiters
-- ARGV[1] channel, ARGV[2] waiter id
-- Returns 1 if the waiter was registered, else 0.
local removed = redis.call('zrem', KEYS[2], ARGV[2])
if removed > 0 and redis.call('exists', KEYS[1]) == 0 then
  wake_next(KEYS[2], ARGV[1])
end
return removed
