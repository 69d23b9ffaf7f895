-- Takes the fair lock if nobody holds it and the caller is first in line.
-- KEYS[1] holder (string: owner:request:fence), KEYS[2] queue (list of waiter ids),
-- KEYS[3] waiter expiries (zset waiter id -> ms, Redis server clock), KEYS[4] fence counter
-- ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] waiter id, ARGV[4] waiter lease ms,
-- ARGV[5] '1' to queue up (or refresh the place) when blocked, '0' to try once,
-- ARGV[6] channel on which the new head of the queue is told its turn came,
-- ARGV[7] request id (one per call)
-- Returns {1, fence} when granted, else {0, holder's remaining lease ms, or -2 when the
-- lock is free but another waiter is first in line}.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me = ARGV[3]
local mine = ARGV[1] .. ':' .. ARGV[7] .. ':'
-- A holder key this very request wrote is a grant whose reply never reached it (the
-- call is run again after a dropped connection): it is taken over with a new fence,
-- whatever the queue says. One of the same owner but another request blocks like
-- anyone's (see exclusive_acquire.lua).
local holder = redis.call('get', KEYS[1])
if holder and string.sub(holder, 1, #mine) == mine then
  redis.call('lrem', KEYS[2], 0, me)
  redis.call('zrem', KEYS[3], me)
  local fence = next_fence(KEYS[4])
  redis.call('set', KEYS[1], mine .. string.format('%d', fence), 'PX', ARGV[2])
  return {1, fence}
end
-- Evict waiters that stopped refreshing their place (dead or gone), by server time.
local head_before = redis.call('lindex', KEYS[2], 0)
local stale = redis.call('zrangebyscore', KEYS[3], '-inf', now)
for _, waiter in ipairs(stale) do
  redis.call('lrem', KEYS[2], 0, waiter)
  redis.call('zrem', KEYS[3], waiter)
end
local head = redis.call('lindex', KEYS[2], 0)
local held = redis.call('exists', KEYS[1]) == 1
if not held and (not head or head == me) then
  if head == me then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], me)
  end
  local fence = next_fence(KEYS[4])
  redis.call('set', KEYS[1], mine .. string.format('%d', fence), 'PX', ARGV[2])
  return {1, fence}
end
if not held and head and head ~= head_before and head ~= me then
  -- Eviction made someone else first while the lock is free: tell them.
  redis.call('publish', ARGV[6], head)
end
if ARGV[5] == '1' then
  queue_up(KEYS[2], KEYS[3], me, now, tonumber(ARGV[4]))
end
if held then
  return {0, redis.call('pttl', KEYS[1])}
end
return {0, -2}
