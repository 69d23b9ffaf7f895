-- is_locked / force_unlock / force_unlock_holder for one lock family.
-- KEYS[1] exclusive key, KEYS[2] fair holder, KEYS[3] fair queue, KEYS[4] rw writer,
-- KEYS[5] rw readers, KEYS[6] semaphore holders, KEYS[7] semaphore queue, KEYS[8]
-- election leader, KEYS[9] election queue, KEYS[10] exclusive waiters
-- ARGV[1] 'e' (exclusive), 'f' (fair), 'rw', 's' (semaphore) or 'l' (election); ARGV[2]
-- '0' to look only, '1' to remove
-- every lease of the family, or '=<fence>' to remove only the lease whose fencing token
-- is <fence> (its stored value ends with ':<fence>');
-- ARGV[3] exclusive channel, ARGV[4] fair channel, ARGV[5] rw channel, ARGV[6]
-- semaphore channel, ARGV[7] election channel
-- Returns, for '0' and '1', 1 if any lease of the family was held, else 0; for
-- '=<fence>', 1 if that lease was there (and is now removed), else 0.
-- A removed lease is announced on its lock's channel as 'forced:<value>', so that its
-- holder, if it listens, learns of the loss at once (waiters ignore the message or
-- take it for a release, which it also is).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local family = ARGV[1]
local mode = ARGV[2]
local suffix = nil
if string.sub(mode, 1, 1) == '=' then
  suffix = ':' .. string.sub(mode, 2)
end
local remove_all = mode == '1'
-- Whether the lease stored as `value` is to be removed.
local function chosen(value)
  if suffix == nil then
    return remove_all
  end
  return value ~= nil and #value > #suffix and string.sub(value, -#suffix) == suffix
end
local function string_value(key)
  local value = redis.pcall('get', key)
  if type(value) == 'string' then
    return value
  end
  return nil
end
local held = false
local removed_one = false
if family == 'e' then
  held = redis.call('exists', KEYS[1]) == 1
  local value = string_value(KEYS[1])
  if held and chosen(value) then
    removed_one = true
    redis.call('del', KEYS[1])
    wake_next(KEYS[10], ARGV[3])
    redis.call('publish', ARGV[3], 'released')
    if value then
      redis.call('publish', ARGV[3], 'forced:' .. value)
    end
  end
elseif family == 'f' or family == 'l' then
  -- A line taken in order: the fair lock's, or an election's (whose leader's
  -- proclaimed value, at `<leader key>:value`, goes with the leader).
  local holder, queue, channel = KEYS[2], KEYS[3], ARGV[4]
  if family == 'l' then
    holder, queue, channel = KEYS[8], KEYS[9], ARGV[7]
  end
  held = redis.call('exists', holder) == 1
  local value = string_value(holder)
  if held and chosen(value) then
    removed_one = true
    redis.call('del', holder)
    if family == 'l' then
      -- pcall: see fair_release.lua.
      redis.pcall('del', holder .. ':value')
    end
    local head = redis.call('lindex', queue, 0)
    if head then
      redis.call('publish', channel, head)
    end
    if value then
      redis.call('publish', channel, 'forced:' .. value)
    end
  end
elseif family == 's' then
  local entries = redis.pcall('hgetall', KEYS[6])
  if type(entries) ~= 'table' then
    entries = {}
  end
  local removed = {}
  for j = 1, #entries, 2 do
    if entries[j] ~= COUNT and tonumber(entries[j + 1]) > now then
      held = true
      if remove_all or chosen(entries[j]) then
        removed[#removed + 1] = entries[j]
        redis.call('hdel', KEYS[6], entries[j])
      end
    end
  end
  removed_one = #removed > 0
  if removed_one then
    semaphore_changed(KEYS[6], KEYS[7], ARGV[6], now)
  end
  for _, value in ipairs(removed) do
    redis.call('publish', ARGV[6], 'forced:' .. value)
  end
else
  held = redis.call('exists', KEYS[4]) == 1
  local readers = redis.pcall('hgetall', KEYS[5])
  if type(readers) ~= 'table' then
    readers = {}
  end
  if not held then
    for j = 2, #readers, 2 do
      if tonumber(readers[j]) > now then
        held = true
        break
      end
    end
  end
  local removed = {}
  if remove_all then
    local writer = string_value(KEYS[4])
    if writer then
      removed[#removed + 1] = writer
    end
    for j = 1, #readers, 2 do
      removed[#removed + 1] = readers[j]
    end
    redis.call('del', KEYS[4], KEYS[5])
  elseif suffix ~= nil then
    local writer = string_value(KEYS[4])
    if chosen(writer) then
      removed[#removed + 1] = writer
      redis.call('del', KEYS[4])
    end
    for j = 1, #readers, 2 do
      if tonumber(readers[j + 1]) > now and chosen(readers[j]) then
        removed[#removed + 1] = readers[j]
        redis.call('hdel', KEYS[5], readers[j])
      end
    end
    removed_one = #removed > 0
  end
  if (remove_all and held) or removed_one then
    redis.call('publish', ARGV[5], 'w')
  end
  for _, value in ipairs(removed) do
    redis.call('publish', ARGV[5], 'forced:' .. value)
  end
end
if suffix ~= nil then
  held = removed_one
end
if held then
  return 1
end
return 0
