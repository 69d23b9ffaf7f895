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
local margin = tonumber(ARGV[2])
local entries = {}
for i = 3, #ARGV do
  local wanted = ARGV[i]
  if string.sub(wanted, -1) == ':' then
    for _, entry in ipairs(redis.call('hkeys', KEYS[1])) do
      if holds(entry, wanted) then
        table.insert(entries, entry)
      end
    end
  else
    table.insert(entries, wanted)
  end
end
local found = false
local freed = false
for _, entry in ipairs(entries) do
  local expiry = redis.call('hget', KEYS[1], entry)
  if expiry and entry ~= COUNT then
    found = true
    redis.call('hdel', KEYS[1], entry)
    if tonumber(expiry) > now then
      freed = true
      if KEYS[3] then
        redis.call('set', KEYS[3], entry, 'PX', tonumber(expiry) - now + margin)
      end
    end
  end
end
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
