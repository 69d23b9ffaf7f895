-- Releases an exclusive lock if it still holds the value of this acquisition, and
-- wakes one registered waiter (every waiter of a kind that does not register, if none).
-- KEYS[1] lock key, KEYS[2] waiters, KEYS[3] (optional) this release's receipt
-- ARGV[1] channel to publish on, ARGV[2] how long (ms) the receipt outlives the lease,
-- ARGV[3..] the values this acquisition may hold (one ending in `:` stands for every
-- value it starts: the undo of one acquire call)
-- Returns 1 when released (or when the receipt shows that this release already ran),
-- 0 when the key holds anything else (or nothing).
local value = redis.call('get', KEYS[1])
for i = 3, #ARGV do
  if holds(value, ARGV[i]) then
    local left = math.max(redis.call('pttl', KEYS[1]), 0)
    -- The DEL first: past maxmemory, Redis refuses a script's first write that may
    -- grow memory (the receipt's SET) but not one after another write.
    redis.call('del', KEYS[1])
    if KEYS[3] then
      redis.call('set', KEYS[3], value, 'PX', left + tonumber(ARGV[2]))
    end
    if not wake_next(KEYS[2], ARGV[1]) then
      redis.call('publish', ARGV[1], 'released')
    end
    return 1
  end
end
return released_before(KEYS[3], 3)
