#!lua flags=allow-cross-slot-keys,allow-oom
-- Renews a batch of leases on one Redis Cluster node, whatever their slots (the
-- first flag lets the script touch keys of every slot this node serves; the second
-- lets it run past maxmemory, which Redis refuses a script with flags otherwise); the
-- same rules as renew.lua. KEYS[1] routes the call to the node (the first lease's key).
-- ARGV[1] lease in ms; then per lease i: ARGV[3i-1] its key, ARGV[3i] 's', 'l' or 'r'
-- (as in renew.lua), ARGV[3i+1] the value.
-- Returns one 1 (renewed), 0 (lost) or -1 (the key could not be read here, most
-- likely because its slot moved since the caller read the slot map: the caller renews
-- it on its own) per lease, in order.
local ttl = tonumber(ARGV[1])
local now = nil
local out = {}
-- What a read that failed means: a key of another type is "not ours" (0), anything
-- else (a slot this node does not serve) is for the caller to renew alone (-1).
local function failed(reply)
  if string.find(reply.err, 'WRONGTYPE', 1, true) then
    return 0
  end
  return -1
end
for i = 1, (#ARGV - 1) / 3 do
  local key = ARGV[3 * i - 1]
  local kind = ARGV[3 * i]
  local value = ARGV[3 * i + 1]
  local renewed = 0
  if kind == 's' or kind == 'l' then
    local held = redis.pcall('get', key)
    if type(held) == 'table' and held.err then
      renewed = failed(held)
    elseif held == value then
      redis.call('pexpire', key, ttl)
      if kind == 'l' then
        -- pcall: see renew.lua.
        redis.pcall('pexpire', key .. ':value', ttl)
      end
      renewed = 1
    end
  else
    if now == nil then
      local t = redis.call('time')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local expiry = redis.pcall('hget', key, value)
    if type(expiry) == 'table' and expiry.err then
      renewed = failed(expiry)
    elseif type(expiry) == 'string' and tonumber(expiry) > now then
      -- The PEXPIRE first: past maxmemory, Redis refuses a script's first write
      -- that may grow memory (the HSET) but not one after another write.
      redis.call('pexpire', key, math.max(redis.call('pttl', key), ttl))
      redis.call('hset', key, value, string.format('%d', now + ttl))
      renewed = 1
    end
  end
  out[i] = renewed
end
return out
