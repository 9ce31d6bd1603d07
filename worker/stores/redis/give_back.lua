-- KEYS: the lease. ARGV: its holder. Deletes it only while that holder has it.

if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
