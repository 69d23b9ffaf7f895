-- Releases one side of a read-write lock if this acquisition still holds it.
-- KEYS[1] writer, KEYS[2] readers, KEYS[3] (optional) this release's receipt
-- ARGV[1] channel, ARGV[2] 'r' or 'w', ARGV[3] how long (ms) the receipt outlives the
-- lease, ARGV[4..] the values this acquisition may hold (one ending in `:` stands for
-- every value it starts: the undo of one acquire call)
-- Publishes 'w' when a writer leaves (readers and writers may go) and 'r' when the
-- last reader leaves (writers may go).
-- Returns 1 when released (or when the receipt shows that this release already ran),
-- else 0.
local margin = tonumber(ARGV[3])
if ARGV[2] == 'w' then
  local value = redis.call('get', KEYS[1])
  for i = 4, #ARGV do
    if holds(value, ARGV[i]) then
      local left = math.max(redis.call('pttl', KEYS[1]), 0)
      -- The DEL first: past maxmemory, Redis refuses a script's first write that may
      -- grow memory (the receipt's SET) but not one after another write.
      redis.call('del', KEYS[1])
      if KEYS[3] then
        redis.call('set', KEYS[3], value, 'PX', left + margin)
      end
      redis.call('publish', ARGV[1], 'w')
      return 1
    end
  end
  return released_before(KEYS[3], 4)
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local found, freed = take_entries(KEYS[2], 4, KEYS[3], margin, now, nil)
if not freed then
  if found then
    -- Its entry had run out: the lease was lost before the release.
    return 0
  end
  return released_before(KEYS[3], 4)
end
local readers = redis.call('hgetall', KEYS[2])
for j = 2, #readers, 2 do
  if tonumber(readers[j]) > now then
    return 1
  end
end
redis.call('publish', ARGV[1], 'r')
return 1
