-- Prepended to every script that grants a lease.
-- The next fencing token of the counter at `key`: one more than the last one, and
-- never below the server clock in microseconds. A counter that a failover (a replica
-- that had not received it) or a restart without persistence lost therefore starts
-- again above every token issued before, as long as the new server's clock is not
-- behind the old one's by more than the outage lasted.
local function next_fence(key)
  local fence = redis.call('incr', key)
  local t = redis.call('time')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if fence < floor then
    fence = floor
    redis.call('set', key, string.format('%d', fence))
  end
  return fence
end
