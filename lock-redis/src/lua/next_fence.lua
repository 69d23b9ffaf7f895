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
local function next_fence(key)
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local fence = redis.call('incr', key)
  if fence <= now then
    fence = now + 1
    redis.call('set', key, string.format('%d', fence))
  end
  return fence
end
