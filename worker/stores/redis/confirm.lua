-- KEYS: the ledger, then each entry's task hash. ARGV: per entry, position and write id. An
-- entry the broker took is confirmed: scored in the ledger's sorted set by the server's clock
-- (TIME), where reconcile finds it while it is open; one closed meanwhile (its message already
-- recorded or dead-lettered: gone from its task's hash) stays closed.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local confirmed = 0
for i = 2, #KEYS do
  local at = 2 * (i - 2)
  if redis.call('HEXISTS', KEYS[i], ARGV[at + 1]) == 1 then
    redis.call('ZADD', KEYS[1], now, ARGV[at + 2])
    confirmed = confirmed + 1
  end
end
return confirmed
