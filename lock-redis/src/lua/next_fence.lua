-- Prepended to every script that grants a lease.
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
