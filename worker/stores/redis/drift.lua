-- One part of record.lua and of cluster_drift.lua: the drift check, which a Redis Cluster's
-- store runs in a step of its own (cluster_drift.lua: a contract key is in another slot than
-- the hash's). Expects the locals `ttl`, `alerts_key`, `max_alerts` and `raised_at` of the
-- script it is part of.

-- An alert onto the stream; `order` ('' on one Redis, whose one stream keeps arrival order)
-- orders the alerts of a Redis Cluster's streams: see RedisClusterStore.
local function append(alert, order, step)
  if order == '' then
    redis.call('XADD', alerts_key, 'MAXLEN', '~', max_alerts, '*', 'alert', alert)
  else
    redis.call('XADD', alerts_key, 'MAXLEN', '~', max_alerts, '*', 'alert', alert, 'n',
      order .. step)
  end
end

-- '' when the attempt keeps its required set's first, '1' for a drift alerted before, or the
-- alert JSON of a drift seen now (written to the stream here).
local function drift(contract_key, required, input_hash, case_id, task_id, contract_version,
    order)
  if required == '' then return '' end
  local first = redis.call('HMGET', contract_key, 'required', 'input_hash', 'task_id')
  if not first[1] then
    redis.call('HSET', contract_key, 'required', required, 'input_hash', input_hash,
      'task_id', task_id)
    if ttl > 0 then redis.call('EXPIRE', contract_key, ttl) end
    return ''
  end
  if first[1] == required then return '' end
  local seen = 'drift:' .. required
  if redis.call('HEXISTS', contract_key, seen) == 1 then return '1' end
  local alert = '{"kind":"contract_drift","case_id":' .. case_id .. ',"contract_version":'
    .. contract_version .. ',"first_required_claim_ids":' .. first[1]
    .. ',"required_claim_ids":' .. required .. ',"first_input_hash":"' .. first[2]
    .. '","input_hash":"' .. input_hash .. '","first_task_id":' .. first[3]
    .. ',"task_id":' .. task_id .. ',"raised_at":' .. raised_at .. '}'
  redis.call('HSET', contract_key, seen, alert)
  append(alert, order, '0')
  return alert
end
