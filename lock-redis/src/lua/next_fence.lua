-- Prepended to every script that grants a lease: the fencing counter, and the wait
-- queue of fair locks and semaphores.
-- The next fencing token of the counter at `key`: one more than the larger of the last
-- token and the server clock in microseconds. A counter that a failover (a replica
-- that had not received it) or a restart without persistence lost therefore starts
-- again above every token issued before, and tokens of an old primary that still
-- grants after a failover and of the new one follow the order of the grants, as long
-- as the new server's clock is not behind the old one's by more than the time between
-- the two grants. (Microseconds as a double stay exact until the year 2255.)
-- RedLock's masters issue different tokens for one grant; its round settles them on
-- the largest (redlock_settle.lua).
-- The counter expires a week after the name's last grant, so a name locked once costs
-- no memory for ever: once it is gone, the clock floor alone keeps the next token
-- above the last (a server clock stepped back by more than the time since, or RedLock
-- masters whose clocks differ by more than that, could break the order; a week covers
-- any clock that is kept).
local FENCE_KEPT_MS = 604800000
local function next_fence(key)
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local fence = redis.call('incr', key)
  if fence <= now then
    fence = now + 1
    redis.call('set', key, string.format('%d', fence), 'PX', FENCE_KEPT_MS)
  else
    redis.call('pexpire', key, FENCE_KEPT_MS)
  end
  return fence
end

-- Sets `key` to expire in `ms` unless it already lives longer.
local function keep_for(key, ms)
  if redis.call('pttl', key) < ms then
    redis.call('pexpire', key, ms)
  end
end

-- Puts waiter `me` at the back of a FIFO queue (list `queue`, place expiries in the
-- zset `expiries`, server-clock ms) unless it is there, and makes its place last
-- `lease` ms from `now`. The queue lives as long as its longest-lived place (clients
-- may have different waiter leases: a short one must not cut a longer one's place),
-- and vanishes with its waiters.
local function queue_up(queue, expiries, me, now, lease)
  if not redis.call('zscore', expiries, me) then
    redis.call('rpush', queue, me)
  end
  redis.call('zadd', expiries, now + lease, me)
  keep_for(queue, lease)
  keep_for(expiries, lease)
end
