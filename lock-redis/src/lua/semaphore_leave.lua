-- Takes a waiter out of a semaphore's queue (it gave up or its future was dropped),
-- and tells whoever the free permits now admit.
-- KEYS[1] holders, KEYS[2] queue, KEYS[3] waiter expiries
-- ARGV[1] channel, ARGV[2] waiter id
-- Returns 1 if the waiter was queued, else 0.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local removed = redis.call('lrem', KEYS[2], 0, ARGV[2])
redis.call('zrem', KEYS[3], ARGV[2])
semaphore_changed(KEYS[1], KEYS[2], ARGV[1], now)
return removed > 0 and 1 or 0
