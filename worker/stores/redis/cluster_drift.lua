-- KEYS: the pair shard's alert stream, then per attempt its contract key and its drift note
-- (keys.ClusterKeyLayout.drift_memo), all in one shard. ARGV: ttl, alert stream bound, the
-- time as JSON, then per attempt required_set_json(), input hash, case ID and task ID as JSON,
-- contract version as JSON, write id ('' for none), alert order (order_of()). Returns what
-- drift() found, per attempt: a noted finding when the write id has one.
-- A drift note is kept for a day (86400 s).

local ttl, max_alerts, raised_at = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local alerts_key = KEYS[1]
--#include drift.lua


local replies = {}
for i = 1, (#KEYS - 1) / 2 do
  local contract_key, memo_key = KEYS[2 * i], KEYS[2 * i + 1]
  local at = 3 + 7 * (i - 1)
  local write = ARGV[at + 6]
  local found = false
  if write ~= '' then found = redis.call('GET', memo_key) end
  if not found then
    found = drift(contract_key, ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4],
      ARGV[at + 5], ARGV[at + 7])
    if write ~= '' then redis.call('SET', memo_key, found, 'EX', 86400) end
  end
  replies[i] = found
end
return replies
