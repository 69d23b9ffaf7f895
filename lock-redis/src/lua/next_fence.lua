-- Prepended to every script that grants a lease.
-- The next fencing token of the counter at `key`: one more than the last one, and
-- never below the server clock's whole second times a million. A counter that a
-- failover (a replica that had not received it) or a restart without persistence lost
-- therefore starts again above every token issued before, as long as the outage lasts
-- longer than a second plus how far the new server's clock is behind the old one's.
-- Whole seconds, not microseconds: RedLock's masters then issue the same token for a
-- grant (their counters agree) unless their clocks straddle a second, and it needs no
-- second round to settle on one.
local function next_fence(key)
  local fence = redis.call('incr', key)
  local t = redis.call('time')
  local floor = tonumber(t[1]) * 1000000
  if fence < floor then
    fence = floor
    redis.call('set', key, string.format('%d', fence))
  end
  return fence
end
