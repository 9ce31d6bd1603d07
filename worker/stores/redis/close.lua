-- KEYS: the ledger, the task hash. ARGV: task ID, then positions ('' alone: every entry of the
-- task). Returns how many entries it closed.

if ARGV[2] ~= '' then
  local closed = 0
  for i = 2, #ARGV do
    redis.call('ZREM', KEYS[1], ARGV[1] .. ':' .. ARGV[i])
    closed = closed + redis.call('HDEL', KEYS[2], ARGV[i])
  end
  return closed
end
local positions = redis.call('HKEYS', KEYS[2])
for _, position in ipairs(positions) do redis.call('ZREM', KEYS[1], ARGV[1] .. ':' .. position) end
redis.call('DEL', KEYS[2])
return #positions
