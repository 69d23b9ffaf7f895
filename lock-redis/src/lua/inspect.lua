-- is_locked / force_unlock for one lock family.
-- KEYS[1] exclusive key, KEYS[2] fair holder, KEYS[3] fair queue, KEYS[4] rw writer,
-- KEYS[5] rw readers
-- ARGV[1] 'e' (exclusive), 'f' (fair) or 'rw'; ARGV[2] '1' to remove the leases;
-- ARGV[3] exclusive channel, ARGV[4] fair channel, ARGV[5] rw channel
-- Returns 1 if any lease of the family was held, else 0.
-- A removed lease is announced on its lock's channel as 'forced:<value>', so that its
-- holder, if it listens, learns of the loss at once (waiters ignore the message or
-- take it for a release, which it also is).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local family = ARGV[1]
local remove = ARGV[2] == '1'
local held = false
local function string_value(key)
  local value = redis.pcall('get', key)
  if type(value) == 'string' then
    return value
  end
  return nil
end
if family == 'e' then
  held = redis.call('exists', KEYS[1]) == 1
  if held and remove then
    local value = string_value(KEYS[1])
    redis.call('del', KEYS[1])
    redis.call('publish', ARGV[3], 'released')
    if value then
      redis.call('publish', ARGV[3], 'forced:' .. value)
    end
  end
elseif family == 'f' then
  held = redis.call('exists', KEYS[2]) == 1
  if held and remove then
    local value = string_value(KEYS[2])
    redis.call('del', KEYS[2])
    local head = redis.call('lindex', KEYS[3], 0)
    if head then
      redis.call('publish', ARGV[4], head)
    end
    if value then
      redis.call('publish', ARGV[4], 'forced:' .. value)
    end
  end
else
  held = redis.call('exists', KEYS[4]) == 1
  if not held then
    local readers = redis.call('hgetall', KEYS[5])
    for j = 2, #readers, 2 do
      if tonumber(readers[j]) > now then
        held = true
        break
      end
    end
  end
  if remove then
    local removed = {}
    local writer = string_value(KEYS[4])
    if writer then
      removed[#removed + 1] = writer
    end
    for _, reader in ipairs(redis.call('hkeys', KEYS[5])) do
      removed[#removed + 1] = reader
    end
    redis.call('del', KEYS[4], KEYS[5])
    if held then
      redis.call('publish', ARGV[5], 'w')
    end
    for _, value in ipairs(removed) do
      redis.call('publish', ARGV[5], 'forced:' .. value)
    end
  end
end
if held then
  return 1
end
return 0
