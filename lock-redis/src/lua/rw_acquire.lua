-- Takes the read or the write side of a read-write lock.
-- KEYS[1] writer (string: owner:request:fence, with PX), KEYS[2] readers (hash
-- owner:request:fence -> expiry ms by the server clock; the key expires with the last
-- one), KEYS[3] waiting writers (zset waiter id -> expiry ms), KEYS[4] fence counter
-- ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] 'r' or 'w', ARGV[4] waiter id,
-- ARGV[5] waiter lease ms, ARGV[6] '1' for a writer to register as waiting when blocked,
-- ARGV[7] request id (one per call)
-- Policy: writers are preferred. While a writer waits, new readers wait too (except
-- the owner of the write lock, who may always take the read lock: downgrade).
-- Returns {1, fence} when granted, else {0, ms until something may expire, or -1}.
-- Entries this very request wrote are grants whose replies never reached it (the call
-- is run again after a dropped connection): a read acquire drops its reader entry, a
-- write acquire takes its writer key over. Entries of the same owner but another
-- request count like anyone's (see exclusive_acquire.lua): a write acquire never drops
-- a reader entry (a live read of the same owner, from a downgrade or an upgrade
-- attempt, blocks the write like any other), and only the downgrade (a read beside
-- the owner's own writer key) goes by the owner alone.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = ARGV[1]
local lease = tonumber(ARGV[2])
local own = owner .. ':'
local this = own .. ARGV[7] .. ':'
local readers = redis.call('hgetall', KEYS[2])
local live = 0
local soonest = nil
for i = 1, #readers, 2 do
  local expiry = tonumber(readers[i + 1])
  if expiry <= now or string.sub(readers[i], 1, #this) == this then
    redis.call('hdel', KEYS[2], readers[i])
  else
    live = live + 1
    if soonest == nil or expiry < soonest then
      soonest = expiry
    end
  end
end
redis.call('zremrangebyscore', KEYS[3], '-inf', now)
local writer = redis.call('get', KEYS[1])
local mine = writer and string.sub(writer, 1, #own) == own
if ARGV[3] == 'w' and writer and string.sub(writer, 1, #this) == this then
  writer = nil
end
if ARGV[3] == 'r' then
  if writer and not mine then
    return {0, redis.call('pttl', KEYS[1])}
  end
  if not mine then
    local first = redis.call('zrange', KEYS[3], 0, 0, 'WITHSCORES')
    if first[1] then
      return {0, tonumber(first[2]) - now}
    end
  end
  local fence = next_fence(KEYS[4])
  redis.call('hset', KEYS[2], this .. string.format('%d', fence),
    string.format('%d', now + lease))
  keep_for(KEYS[2], lease)
  return {1, fence}
end
if writer or live > 0 then
  if ARGV[6] == '1' then
    local waiter_lease = tonumber(ARGV[5])
    redis.call('zadd', KEYS[3], now + waiter_lease, ARGV[4])
    -- Only ever longer: another writer's entry may have a longer waiter lease.
    keep_for(KEYS[3], waiter_lease)
  end
  local wait = -1
  if writer then
    wait = redis.call('pttl', KEYS[1])
  end
  if soonest and (wait < 0 or soonest - now < wait) then
    wait = soonest - now
  end
  return {0, wait}
end
local fence = next_fence(KEYS[4])
redis.call('set', KEYS[1], this .. string.format('%d', fence), 'PX', lease)
redis.call('zrem', KEYS[3], ARGV[4])
return {1, fence}
