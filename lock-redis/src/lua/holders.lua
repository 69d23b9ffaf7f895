-- Lists the holders of one lock family, for `inspect`.
-- KEYS[1] exclusive key, KEYS[2] fair holder, KEYS[3] fair waiter expiries (zset),
-- KEYS[4] rw writer, KEYS[5] rw readers, KEYS[6] semaphore holders, KEYS[7]
-- semaphore waiter expiries (zset), KEYS[8] election leader, KEYS[9] election
-- candidate expiries (zset), KEYS[10] exclusive waiters (zset)
-- ARGV[1] 'e' (exclusive), 'f' (fair), 'rw', 's' (semaphore) or 'l' (election)
-- Returns {waiters or -1 when waiters leave no trace, then per holder: kind
-- ('e', 'f', 'w', 'r', 'p' for a permit or 'l' for a leader), stored value, expiry ms
-- by the server clock or -1}; after a leader that proclaimed a value, {'v', that
-- value, -1}.
-- Values are strings: `owner:request:fence` for ours, a bare token for other clients'.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {'-1'}
-- A string lease key's holder, if it is a string (another layout's key is no holder).
local function add_string(kind, key)
  local value = redis.pcall('get', key)
  if type(value) ~= 'string' then
    return
  end
  local ttl = redis.call('pttl', key)
  local expiry = -1
  if ttl >= 0 then
    expiry = now + ttl
  end
  out[#out + 1] = kind
  out[#out + 1] = value
  out[#out + 1] = tostring(expiry)
end
local family = ARGV[1]
if family == 'e' then
  add_string('e', KEYS[1])
  -- Registered waiters (ours, on one server) refresh their expiry while they wait.
  out[1] = tostring(redis.call('zcount', KEYS[10], '(' .. now, '+inf'))
elseif family == 'f' then
  add_string('f', KEYS[2])
  -- Waiters refresh their expiry while they wait; a lapsed one is gone.
  out[1] = tostring(redis.call('zcount', KEYS[3], '(' .. now, '+inf'))
elseif family == 'l' then
  add_string('l', KEYS[8])
  -- The proclaimed value, only while it belongs to the leader's lease (proclaim.lua).
  if #out == 4 then
    local proclaimed = redis.pcall('hmget', KEYS[8] .. ':value', 'lease', 'value')
    if type(proclaimed) == 'table' and proclaimed[1] == out[3] and proclaimed[2] then
      out[#out + 1] = 'v'
      out[#out + 1] = proclaimed[2]
      out[#out + 1] = '-1'
    end
  end
  out[1] = tostring(redis.call('zcount', KEYS[9], '(' .. now, '+inf'))
elseif family == 's' then
  local entries = redis.pcall('hgetall', KEYS[6])
  if type(entries) == 'table' then
    for i = 1, #entries, 2 do
      local expiry = tonumber(entries[i + 1])
      if entries[i] ~= '#permits' and expiry and expiry > now then
        out[#out + 1] = 'p'
        out[#out + 1] = entries[i]
        out[#out + 1] = entries[i + 1]
      end
    end
  end
  out[1] = tostring(redis.call('zcount', KEYS[7], '(' .. now, '+inf'))
else
  add_string('w', KEYS[4])
  local readers = redis.pcall('hgetall', KEYS[5])
  if type(readers) == 'table' then
    for i = 1, #readers, 2 do
      local expiry = tonumber(readers[i + 1])
      if expiry and expiry > now then
        out[#out + 1] = 'r'
        out[#out + 1] = readers[i]
        out[#out + 1] = readers[i + 1]
      end
    end
  end
end
return out
