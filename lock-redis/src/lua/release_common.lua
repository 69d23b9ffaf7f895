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
