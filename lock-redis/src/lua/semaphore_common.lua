-- Prepended to the semaphore scripts.

-- The field of the holders hash that keeps the count in force while anyone holds or
-- waits (every other field is a permit `owner:request:fence` -> expiry ms).
local COUNT = '#permits'

-- After a permit or a queue place went: drops the semaphore's state if nobody holds
-- or waits any more (its count with it), else tells the waiters the free permits now
-- admit that their turn came (only those: no herd).
local function semaphore_changed(holders, queue, channel, now)
  local entries = redis.call('hgetall', holders)
  local count = 0
  local live = 0
  for i = 1, #entries, 2 do
    if entries[i] == COUNT then
      count = tonumber(entries[i + 1])
    elseif tonumber(entries[i + 1]) > now then
      live = live + 1
    end
  end
  if redis.call('llen', queue) == 0 then
    if live == 0 then
      redis.call('del', holders)
    end
    return
  end
  local free = count - live
  if free > 0 then
    for _, waiter in ipairs(redis.call('lrange', queue, 0, free - 1)) do
      redis.call('publish', channel, waiter)
    end
  end
end
