-- KEYS: the alert stream, the publish ledger, then the outcome hash, attempts list, ledger task
-- hash, contract hash (keys.contract_key) and case index (keys.case_key) of each attempt in turn.
-- ARGV: attempt bound, ttl (0: none), alert stream bound, the time as JSON (an alert's
-- raised_at), the drifted tail (codec.DRIFTED_TAIL), steps ('1': this call also checks
-- contract drift and closes ledger entries, as on one Redis; '': a Redis Cluster's store did
-- or does those in steps of their own, in other slots), the attempts' ttl (0: the outcome's;
-- else the list expires once no attempt came for that long), then per attempt its
-- script_args() (case ID, task ID and time as JSON values, outcome_json(), outcome_members(),
-- shared_head(), drift_tail(), contract version as JSON, required_set_json()), its write id
-- ('' for none), its recorded_at in milliseconds (contract.recorded_ms()), without steps what
-- the drift check found (cluster_drift.lua's reply; '' with steps) and the alert order ('' on one
-- Redis; see RedisClusterStore). Without steps, the ledger, task and contract keys are only
-- there to keep five keys per attempt (the caller passes keys of the attempt's slot) and are
-- not touched; the case key is then the case index's piece in the hash's shard.
-- Returns, per attempt, {cache, first attempt JSON ('' on a miss), replayed ('' or '1'),
-- alert ('', 'new' for a conflict alerted now, or a replayed write's alert JSON), drift ('':
-- none, '1': drift seen before, or the drift alert's JSON when this write raised it), since
-- (the outcome's, for the case index)}.
-- A write id found in the hash is a replay: what that earlier write found, nothing written.
-- Comparing the outcome strings inside the script is what makes "first writer wins" atomic;
-- attempts are recorded in order, so two with one hash in a batch behave as if sent one after
-- the other. The outcome, the entry, the write id and an alert are written by one call, so
-- none is kept without the others: a script that cannot write (maxmemory) fails at its first
-- write, before any. Entries, the first attempt and an alert's observed attempt are
-- assembled exactly as entry() and whole() in worker/stores/codec.py do; an alert is the
-- Alert JSON, its input hash read out of the outcome key (input hashes are hex digests).
-- Each conflict (first outcome, observed outcome) and each drift (contract version, case ID,
-- required set) is alerted once: a field in the outcome or contract hash says it was.
-- Contract drift: the first valid row per (contract version, case ID) keeps its required set;
-- a later one with another set is recorded with DRIFTED_TAIL instead of its own tail.
-- A compact first (its shared_head() starts with answer_length: every attempt this version
-- makes) is kept once: no `outcome` or `shared` copy beside it, no entry of its own in the
-- list (both are read out of `first`, where codec.kept_comparands() reads them,
-- and history() puts it before the later entries). A hash written before keeps its copies, its
-- entries are compared with them and include the first's. One written before `shared` was
-- kept has none: its entries keep their lists. One written before write ids were kept has
-- none either: every write to it is a new one.
-- Write ids (keys.outcome_key): attempt number n belongs to generation (n - 1) // bound, kept
-- as field prefix w0: or w1: by its parity; as a generation starts, the one two before it is
-- dropped, so the ids of at least the newest `bound` attempts are known.
-- The case index (keys.case_key): an attempt with a case ID adds its hash with its time, unless
-- the case already holds the hash at or after the outcome's `since` (the first attempt's time):
-- a score from before it belongs to a history that expired, and is replaced. With a TTL, an
-- index that took a new score expires with its newest outcome, and drops scores older than the
-- TTL: their outcomes have expired (a score is never older than its history's first attempt).
-- A write id closes its publish ledger entry (keys.ledger_key) after the attempt's writes,
-- replayed or not: deleting is allowed at maxmemory, so it must not come before a write that
-- could fail, or a message not yet recorded would lose its entry.
-- The script names no field of an attempt: the keys it writes and looks for are codec.py's
-- (`--#include codec`: OWN_KEYS, VALUE_AT, COMPACT_KEY, SHARED_START; see lua.codec_header()).

--#include codec
local bound, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local generation_size = math.max(bound, 1)
local max_alerts, raised_at, drifted_tail = ARGV[3], ARGV[4], ARGV[5]
local steps = ARGV[6] == '1'
local attempts_ttl = tonumber(ARGV[7])
local alerts_key, ledger_key = KEYS[1], KEYS[2]
local replies = {}

local function whole(case_id, task_id, recorded_at, outcome_members, shared)
  return OWN_KEYS[1] .. case_id .. OWN_KEYS[2] .. task_id .. OWN_KEYS[3] .. recorded_at .. ','
    .. outcome_members .. ',' .. shared .. '}'
end

local function forget(outcome_key, generation)
  local prefix, stale = 'w' .. generation .. ':', {}
  for _, field in ipairs(redis.call('HKEYS', outcome_key)) do
    if string.sub(field, 1, 3) == prefix then stale[#stale + 1] = field end
  end
  for start = 1, #stale, 1000 do
    redis.call('HDEL', outcome_key, unpack(stale, start, math.min(start + 999, #stale)))
  end
end

local function close(task_key, write)
  redis.call('ZREM', ledger_key, write)
  local position = string.match(write, ':(%d+)$')
  if position then redis.call('HDEL', task_key, position) end
end

--#include index.lua
--#include drift.lua


for i = 1, (#KEYS - 2) / 5 do
  local base = 2 + 5 * (i - 1)
  local outcome_key, attempts_key = KEYS[base + 1], KEYS[base + 2]
  local task_key, contract_key, case_key = KEYS[base + 3], KEYS[base + 4], KEYS[base + 5]
  local at = 7 + 13 * (i - 1)
  local case_id, task_id, recorded_at = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  local outcome, outcome_members, head = ARGV[at + 4], ARGV[at + 5], ARGV[at + 6]
  local tail, contract_version, required = ARGV[at + 7], ARGV[at + 8], ARGV[at + 9]
  local write, ms, given = ARGV[at + 10], tonumber(ARGV[at + 11]), ARGV[at + 12]
  local order = ARGV[at + 13]
  local input_hash = string.match(outcome_key, '{([^{}]*)}:outcome$')
  local w0, w1 = 'w0:' .. write, 'w1:' .. write
  local stored = redis.call('HMGET', outcome_key, 'outcome', 'shared', 'first', 'total', w0,
    w1, 'since')
  local since = tonumber(stored[7]) or 0
  local found = write ~= '' and (stored[5] or stored[6])
  if found then
    -- a replay (rare): its drift, if it had one, is read now
    local drifted = redis.call('HGET', outcome_key, (stored[5] and w0 or w1) .. '#d') or ''
    if found == 'miss' or found == 'hit' or found == 'conflict' then
      replies[i] = {found, stored[3], '1', '', drifted, since}
    else
      replies[i] = {'conflict', stored[3], '1', found, drifted, since}
    end
  else
    local drifted = given
    if steps then
      drifted = drift(contract_key, required, input_hash, case_id, task_id, contract_version,
        order)
    end
    -- A compact first (shared_head() starts with answer_length) keeps neither a copy of its
    -- shared members nor its own entry: both are read out of `first` (codec.py).
    local compact = string.sub(head, 1, #COMPACT_KEY) == COMPACT_KEY
    local shared = head .. tail
    if drifted ~= '' then shared = head .. drifted_tail end
    local entry = '[' .. case_id .. ',' .. task_id .. ',' .. recorded_at
    local cache, alerted = 'miss', ''
    if stored[3] then
      local number = (tonumber(stored[4]) or 0) + 1
      local differing = {}
      -- A compact first keeps no copy of its outcome or shared members: they are read out of
      -- `first`, where codec.kept_comparands() reads them.
      local same, kept = stored[1] == outcome, stored[2]
      if not stored[1] then
        local from = string.find(stored[3], VALUE_AT, 1, true)
        local to = string.find(stored[3], SHARED_START)
        same = from ~= nil and to ~= nil
          and string.sub(stored[3], from + 1, to - 1) == outcome_members
        if to then kept = string.sub(stored[3], to + 1, -2) end
      end
      if same then
        cache = 'hit'
      else
        cache = 'conflict'
        differing[#differing + 1] = outcome_members
      end
      if kept ~= shared then differing[#differing + 1] = shared end
      if #differing > 0 then entry = entry .. ',{' .. table.concat(differing, ',') .. '}' end
      local result = cache
      if cache == 'conflict'
          and redis.call('HSETNX', outcome_key, 'a:' .. outcome, '1') == 1 then
        result = '{"kind":"nondeterminism","input_hash":"' .. input_hash
          .. '","decision":"kept_first","first":' .. stored[3] .. ',"observed":'
          .. whole(case_id, task_id, recorded_at, outcome_members, shared)
          .. ',"raised_at":' .. raised_at .. '}'
        append(result, order, '1')
        alerted = 'new'
      end
      if write == '' then
        redis.call('HSET', outcome_key, 'total', number)
      else
        local generation = math.floor((number - 1) / generation_size) % 2
        if (number - 1) % generation_size == 0 then forget(outcome_key, generation) end
        local field = 'w' .. generation .. ':' .. write
        redis.call('HSET', outcome_key, 'total', number, field, result)
        if drifted ~= '' then redis.call('HSET', outcome_key, field .. '#d', drifted) end
      end
      replies[i] = {cache, stored[3], '', alerted, drifted, since}
    else
      local first = whole(case_id, task_id, recorded_at, outcome_members, shared)
      -- One HSET for the new outcome and its write id (most records are misses).
      local fields
      if compact then
        fields = {'first', first, 'total', 1, 'since', ms}
      else
        fields = {'outcome', outcome, 'first', first, 'shared', shared, 'total', 1, 'since', ms}
      end
      if write ~= '' then
        fields[#fields + 1] = w0
        fields[#fields + 1] = 'miss'
        if drifted ~= '' then
          fields[#fields + 1] = w0 .. '#d'
          fields[#fields + 1] = drifted
        end
      end
      redis.call('HSET', outcome_key, unpack(fields))
      since = ms
      -- a new first outcome (only possible after expiry) starts a new history
      redis.call('DEL', attempts_key)
      replies[i] = {cache, '', '', '', drifted, since}
    end
    if cache ~= 'miss' or not compact then
      local length = redis.call('RPUSH', attempts_key, entry .. ']')
      redis.call('LTRIM', attempts_key, -bound, -1)
      if attempts_ttl > 0 then  -- until none has come for that long
        redis.call('EXPIRE', attempts_key, attempts_ttl)
      elseif length == 1 and cache ~= 'miss' and ttl > 0 then  -- a compact first's later ones
        local left = redis.call('PTTL', outcome_key)
        if left > 0 then redis.call('PEXPIRE', attempts_key, left) end
      end
    end
    if case_id ~= 'null' then index(case_key, input_hash, ms, since) end
    if cache == 'miss' and ttl > 0 then
      redis.call('EXPIRE', outcome_key, ttl)
      if attempts_ttl == 0 then redis.call('EXPIRE', attempts_key, ttl) end
    end
  end
  if steps and write ~= '' then close(task_key, write) end
end
return replies
