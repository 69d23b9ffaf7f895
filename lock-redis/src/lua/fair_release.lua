-- Releases the fair lock (or an election's leadership) if it holds this acquisition's
-- value, and wakes only the waiter first in line.
-- KEYS[1] holder (an election leader's, `...:elect`, takes its proclaimed value at
-- `<holder>:value` with it), KEYS[2] queue, KEYS[3] (optional) this release's receipt
-- ARGV[1] channel, ARGV[2] how long (ms) the receipt outlives the lease,
-- ARGV[3..] the values this acquisition may hold (one ending in `:` stands for every
-- value it starts: the undo of one acquire call)
-- Returns 1 when released (or when the receipt shows that this release already ran),
-- else 0.
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
    if string.sub(KEYS[1], -6) == ':elect' then
      -- pcall: in a slot being migrated, a missing key is "elsewhere" (an ASK error),
      -- which must not undo the release.
      redis.pcall('del', KEYS[1] .. ':value')
    end
    local head = redis.call('lindex', KEYS[2], 0)
    if head then
      redis.call('publish', ARGV[1], head)
    end
    return 1
  end
end
return released_before(KEYS[3], 3)
