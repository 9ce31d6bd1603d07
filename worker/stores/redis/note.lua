-- KEYS: the ledger, then each entry's task hash. ARGV: time to live (seconds), sent ('1' or
-- ''), then per entry: position, entry JSON, write id. One call per chunk of a publish: a
-- single command per chunk, then the replicas' wait in the same pipeline: a message is sent
-- once its note is on them. A note not yet sent (a publisher's, before it sends) is in its
-- task's hash only, which record.lua and close.lua close as they close any entry, and in no
-- sorted set: reconcile and the self-heal never see it until confirm.lua puts it there,
-- once the broker took its message. Entries are scored, and forgotten, by the server's clock
-- (TIME), never the publisher's: one publisher 25 h ahead trimmed the whole ledger. TIME
-- before writes needs effects replication, the default since Redis 5 (the stores need 5 for
-- streams anyway).

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl, sent = tonumber(ARGV[1]), ARGV[2] == '1'
for i = 2, #KEYS do
  local at = 2 + 3 * (i - 2)
  redis.call('HSET', KEYS[i], ARGV[at + 1], ARGV[at + 2])
  redis.call('EXPIRE', KEYS[i], ttl)
  if sent then redis.call('ZADD', KEYS[1], now, ARGV[at + 3]) end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - ttl * 1000))
return #KEYS - 1
