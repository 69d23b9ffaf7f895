-- Prepended to the release scripts.

-- Whether a stored lease `value` is `wanted`: the same value, or, when `wanted` ends
-- with ':' (`owner:request:`, the undo of one acquire call), any value it starts.
local function holds(value, wanted)
  if not value then
    return false
  end
  if value == wanted then
    return true
  end
  return string.sub(wanted, -1) == ':' and string.sub(value, 1, #wanted) == wanted
end

-- Whether an earlier run of this very release freed the lease: its receipt (a key
-- the release writes when it frees a lease, holding the freed value, with a lease a
-- little longer than the freed one's) holds one of the values ARGV[first..]. A release
-- whose reply was lost with its connection is run again (by the client, or by
-- lock-core's retries), and must then report what the first run did rather than a
-- lost lease. Without a receipt key (releases whose outcome nobody reads) or receipt,
-- 0: a lease already gone when the release first ran writes no receipt, so it is
-- still reported lost. Returns 1 or 0.
local function released_before(receipt, first)
  if not receipt then
    return 0
  end
  local freed = redis.call('get', receipt)
  if not freed then
    return 0
  end
  for i = first, #ARGV do
    if freed == ARGV[i] then
      return 1
    end
  end
  return 0
end

-- Removes the entries of the hash `key` (value -> expiry ms by the server clock, as
-- readers and permits are kept) that ARGV[first..] name (one ending in ':' names every
-- entry it starts), writing `receipt` (if given) for a live one freed, to outlive its
-- lease by `margin` ms. A field named `skip` is never an entry. Returns whether any
-- was there, and whether a live one was freed.
local function take_entries(key, first, receipt, margin, now, skip)
  local entries = {}
  for i = first, #ARGV do
    local wanted = ARGV[i]
    if string.sub(wanted, -1) == ':' then
      for _, entry in ipairs(redis.call('hkeys', key)) do
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
    local expiry = redis.call('hget', key, entry)
    if expiry and entry ~= skip then
      found = true
      redis.call('hdel', key, entry)
      if tonumber(expiry) > now then
        freed = true
        if receipt then
          redis.call('set', receipt, entry, 'PX', tonumber(expiry) - now + margin)
        end
      end
    end
  end
  return found, freed
end

-- Wakes the registered waiter of an exclusive lock whose entry in the zset `waiters`
-- (waiter id `<inbox>/<n>` -> expiry ms by the server clock) expires first (the one
-- refreshed longest ago), after dropping the entries that ran out: its id is
-- published on `<channel>:<inbox>`, where only its own backend listens. A waiter
-- nobody listens for any more (its process is gone) is dropped and the next one
-- tried; each such entry is dropped once, so the loop costs one call per dead waiter.
-- Returns whether one was woken.
local function wake_next(waiters, channel)
  if redis.call('exists', waiters) == 0 then
    return false
  end
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('zremrangebyscore', waiters, '-inf', now)
  while true do
    local first = redis.call('zrange', waiters, 0, 0)[1]
    if not first then
      return false
    end
    local inbox = string.match(first, '^([^/]+)/')
    if inbox and redis.call('publish', channel .. ':' .. inbox, first) > 0 then
      return true
    end
    redis.call('zrem', waiters, first)
  end
end
