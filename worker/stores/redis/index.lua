-- One part of record.lua: the case index (see there). Expects the local `ttl` of the script it
-- is part of.

-- Index the hash under its case at `ms` (see record.lua); `since`: the outcome's, 0 when unknown.
local function index(case_key, input_hash, ms, since)
  local kept = tonumber(redis.call('ZSCORE', case_key, input_hash))
  if kept and kept >= since then return end
  redis.call('ZADD', case_key, ms, input_hash)
  if ttl > 0 then
    redis.call('ZREMRANGEBYSCORE', case_key, '-inf', '(' .. (ms - ttl * 1000))
    redis.call('EXPIRE', case_key, ttl)
  end
end
