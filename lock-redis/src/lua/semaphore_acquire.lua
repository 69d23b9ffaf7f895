-- Takes a permit of a semaphore if the request is among the first waiters the free
-- permits admit (a single try: if every waiter can be admitted before it).
-- KEYS[1] holders (hash: owner:request:fence -> expiry ms by the server clock, and
-- '#permits' -> the count in force; the key lives as long as its last holder or
-- waiter), KEYS[2] queue (list of waiter ids), KEYS[3] waiter expiries (zset waiter id
-- -> ms), KEYS[4] fence counter
-- ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] waiter id, ARGV[4] waiter lease ms,
-- ARGV[5] '1' to queue up (or refresh the place) when blocked, '0' to try once,
-- ARGV[6] channel on which waiters are told their turn came, ARGV[7] request id (one
-- per call), ARGV[8] the semaphore's count
-- Returns {1, fence} when granted; {0, ms until the first holder's lease ends, or -1};
-- {-1, count} when holders or waiters use another count.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
local me = ARGV[3]
local permits = tonumber(ARGV[8])
local this = ARGV[1] .. ':' .. ARGV[7] .. ':'
local function grant()
  local fence = next_fence(KEYS[4])
  redis.call('hset', KEYS[1], this .. string.format('%d', fence),
    string.format('%d', now + lease), COUNT, permits)
  keep_for(KEYS[1], lease)
  return {1, fence}
end
local entries = redis.call('hgetall', KEYS[1])
local live = 0
local soonest = nil
local stored = nil
local freed = false
for i = 1, #entries, 2 do
  local field = entries[i]
  if field == COUNT then
    stored = tonumber(entries[i + 1])
  else
    local expiry = tonumber(entries[i + 1])
    if expiry <= now then
      redis.call('hdel', KEYS[1], field)
      freed = true
    elseif string.sub(field, 1, #this) == this then
      -- A permit this very request was granted, whose reply never reached it (the
      -- call is run again after a dropped connection): taken over with a new fence.
      redis.call('hdel', KEYS[1], field)
      redis.call('lrem', KEYS[2], 0, me)
      redis.call('zrem', KEYS[3], me)
      return grant()
    else
      live = live + 1
      if soonest == nil or expiry < soonest then
        soonest = expiry
      end
    end
  end
end
-- Evict waiters that stopped refreshing their place (dead or gone), by server time.
local stale = redis.call('zrangebyscore', KEYS[3], '-inf', now)
for _, waiter in ipairs(stale) do
  redis.call('lrem', KEYS[2], 0, waiter)
  redis.call('zrem', KEYS[3], waiter)
  freed = true
end
local queued = redis.call('llen', KEYS[2])
local mine = redis.call('zscore', KEYS[3], me)
local others = queued
if mine then
  others = queued - 1
end
if (live > 0 or others > 0) and stored and stored ~= permits then
  return {-1, stored}
end
local ahead = queued
if mine then
  ahead = redis.call('lpos', KEYS[2], me) or queued
end
if ahead < permits - live then
  if mine then
    redis.call('lrem', KEYS[2], 0, me)
    redis.call('zrem', KEYS[3], me)
  end
  local granted = grant()
  if freed then
    semaphore_changed(KEYS[1], KEYS[2], ARGV[6], now)
  end
  return granted
end
if freed then
  semaphore_changed(KEYS[1], KEYS[2], ARGV[6], now)
end
if ARGV[5] == '1' then
  local waiter_lease = tonumber(ARGV[4])
  queue_up(KEYS[2], KEYS[3], me, now, waiter_lease)
  redis.call('hset', KEYS[1], COUNT, permits)
  keep_for(KEYS[1], waiter_lease)
end
if soonest then
  return {0, soonest - now}
end
return {0, -1}
