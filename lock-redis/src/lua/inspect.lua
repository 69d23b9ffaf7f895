-- is_locked / force_unlock for one lock family.
-- KEYS[1] exclusive key, KEYS[2] fair holder, KEYS[3] fair queue, KEYS[4] rw writer,
-- KEYS[5] rw readers
-- ARGV[1] 'e' (exclusive), 'f' (fair) or 'rw'; ARGV[2] '1' to remove the leases;
-- ARGV[3] exclusive channel, ARGV[4] fair channel, ARGV[5] rw channel
-- Returns 1 if any lease of the family was held, else 0.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local family = ARGV[1]
local remove = ARGV[2] == '1'
local held = false
if family == 'e' then
  held = redis.call('exists', KEYS[1]) == 1
  if held and remove then
    redis.call('del', KEYS[1])
    redis.call('publish', ARGV[3], 'released')
  end
elseif family == 'f' then
  held = redis.call('exists', KEYS[2]) == 1
  if held and remove then
    redis.call('del', KEYS[2])
    local head = redis.call('lindex', KEYS[3], 0)
    if head then
      redis.call('publish', ARGV[4], head)
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
    redis.call('del', KEYS[4], KEYS[5])
    if held then
      redis.call('publish', ARGV[5], 'w')
    end
  end
end
if held then
  return 1
end
return 0
