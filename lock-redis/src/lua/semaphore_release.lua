-- Releases a permit if this acquisition still holds it, and wakes the waiters the
-- freed permit admits.
-- KEYS[1] holders, KEYS[2] queue, KEYS[3] (optional) this release's receipt
-- ARGV[1] channel, ARGV[2] how long (ms) the receipt outlives the lease, ARGV[3..] the
-- values this acquisition may hold (one ending in `:` stands for every value it
-- starts: the undo of one acquire call)
-- Returns 1 when released (or when the receipt shows that this release already ran),
-- else 0.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local found, freed = take_entries(KEYS[1], 3, KEYS[3], tonumber(ARGV[2]), now, COUNT)
if found then
  semaphore_changed(KEYS[1], KEYS[2], ARGV[1], now)
end
if not freed then
  if found then
    -- Its entry had run out: the permit was lost before the release.
    return 0
  end
  return released_before(KEYS[3], 3)
end
return 1
