-- Renews a batch of leases; a lease is renewed only if its key still holds the value
-- of that acquisition.
-- ARGV[1] lease in ms; then per lease i: ARGV[2i] 's' (a string key holding the
-- value), 'l' (a leader: such a string, whose proclaimed value at `<key>:value` is
-- renewed with it) or 'r' (a reader in a hash of value -> expiry ms), ARGV[2i+1] the
-- value.
-- KEYS[i] the key of lease i.
-- Returns one 1 (renewed) or 0 (lost) per lease, in order.
local ttl = tonumber(ARGV[1])
local now = nil
local out = {}
for i = 1, #KEYS do
  local kind = ARGV[2 * i]
  local value = ARGV[2 * i + 1]
  local renewed = 0
  if kind == 's' or kind == 'l' then
    -- pcall: a key of another type (someone else's layout) means "not ours", not an
    -- error that would fail the whole batch.
    if redis.pcall('get', KEYS[i]) == value then
      redis.call('pexpire', KEYS[i], ttl)
      if kind == 'l' then
        -- pcall: in a slot being migrated, a missing key is "elsewhere" (an ASK
        -- error), which must not fail the batch.
        redis.pcall('pexpire', KEYS[i] .. ':value', ttl)
      end
      renewed = 1
    end
  else
    if now == nil then
      local t = redis.call('time')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local expiry = redis.pcall('hget', KEYS[i], value)
    if type(expiry) == 'string' and tonumber(expiry) > now then
      -- The PEXPIRE first: past maxmemory, Redis refuses a script's first write
      -- that may grow memory (the HSET) but not one after another write.
      redis.call('pexpire', KEYS[i], math.max(redis.call('pttl', KEYS[i]), ttl))
      redis.call('hset', KEYS[i], value, string.format('%d', now + ttl))
      renewed = 1
    end
  end
  out[i] = renewed
end
return out
