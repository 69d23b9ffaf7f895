-- Takes the exclusive lock if nobody holds it.
-- KEYS[1] lock key (a plain string: the redis-py / redsync layout)
-- KEYS[2] fencing counter of the lock
-- KEYS[3] waiters (zset waiter id -> expiry ms, Redis server clock)
-- ARGV[1] owner token, ARGV[2] lease in ms, ARGV[3] request id (one per call),
-- ARGV[4] waiter id, ARGV[5] waiter lease ms, ARGV[6] '1' to register as a waiter (or
-- refresh the entry) when blocked, '0' to try once
-- Stores `owner:request:fence`.
-- Returns {1, fence} when granted, else {0, the holder's remaining lease in ms (-1 when
-- the holder set no expiry), 1 if the holder is another kind of client}. Our holders
-- publish their releases; another client (redis-py, redsync: a token without
-- `:<fence>`, or a fence this counter never issued) does not, so its waiters poll.
-- A key this very request wrote is a grant whose reply never reached it (the call is
-- run again after a dropped connection): it is taken over, with a new fence that a
-- stale guard cannot match. A key of the same owner but another request blocks like
-- anyone's: it may be a live grant, and this request may be one abandoned at its
-- timeout that arrives late and gives back whatever it is granted.
-- The lock is not fair: a release wakes one registered waiter (see `wake_next`), and
-- anyone may take the lock before it does.
local mine = ARGV[1] .. ':' .. ARGV[3] .. ':'
local registers = ARGV[6] == '1'
local holder = redis.call('get', KEYS[1])
if holder and string.sub(holder, 1, #mine) ~= mine then
  if registers then
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local lease = tonumber(ARGV[5])
    redis.call('zadd', KEYS[3], now + lease, ARGV[4])
    keep_for(KEYS[3], lease)
  end
  local fence = string.match(holder, ':(%d+)$')
  local issued = redis.call('get', KEYS[2])
  local silent = 1
  if fence and issued and tonumber(fence) <= tonumber(issued) then
    silent = 0
  end
  return {0, redis.call('pttl', KEYS[1]), silent}
end
if registers then
  redis.call('zrem', KEYS[3], ARGV[4])
end
local fence = next_fence(KEYS[2])
redis.call('set', KEYS[1], mine .. string.format('%d', fence), 'PX', ARGV[2])
return {1, fence}
