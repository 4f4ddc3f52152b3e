-- complete: settles a leased job as done, and applies the job's declared
-- effects in the same script (atomic completion, src/effect/atomic.rs): effect and
-- acknowledgement commit together or not at all.
--
-- KEYS[1] job (hash)  KEYS[2] active (zset)  KEYS[3] completed (zset)
-- KEYS[4..] effect targets (optional). Each carries the queue's hash tag
--           and lies outside echomq's own keys (checked in src/effect/atomic.rs: only the queue's user-key space).
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] id      job id
-- ARGV[3] token   fencing token
-- ARGV[4] keep_completed  retention, as in settle.lua
-- ARGV[5] effects number of effects E (optional; absent = 0), then 4 fields each:
--   op   incrby | hincrby | hset | sadd
--   key  the target's index in KEYS (4 or more)
--   a b  incrby: increment, ""      hincrby: field, increment
--        hset: field, value         sadd: member, ""
--   Increments are decimal integers within +-(2^53 - 1).
--
-- Effects apply only when the job moves to completed in this call: never on
-- a lost lease, never on "already completed". All of them are checked
-- before anything is written (a script error part-way would keep earlier
-- writes: there is no rollback): a target of another type, or a counter
-- that is not an integer or would leave +-(2^53 - 1), refuses the call.
--
-- REPLY: {code:code, now:int, [outbox:int, [effect:int, reason:str]]}
-- `outbox` (absent from NOT_FOUND, LEASE_LOST and ALREADY) is 1 when the
-- call pushed a message onto the queue's outbox (the job is a step or
-- member of another queue's flow or batch: its end goes home by the
-- relay), else 0.
-- code OK completed (effects applied); ALREADY completed with this token
-- (a retried settle whose first reply was lost; nothing applied again);
-- NOT_FOUND; LEASE_LOST (not active, or a newer token owns it): nothing
-- changed; REFUSED, with `effect` and `reason`: effect i (1-based) was
-- refused: nothing changed, the job is still leased to the caller.
--
-- Events (lib/events.lua, unless the queue turned them off): completed.
local jk, active_key, completed_key = KEYS[1], KEYS[2], KEYS[3]
local prefix, id, token, keep = ARGV[1], ARGV[2], ARGV[3], retention(ARGV[4])
local n_effects = tonumber(ARGV[5] or '0')
local now = server_now()
local cur = complete_fields(jk)
local refused = not_owner(cur and cur[1], cur and cur[2], cur and cur[3], token, 'c', now)
if refused then return refused end

-- Counters stay exact in Lua's doubles up to 2^53 - 1.
local LIMIT = 9007199254740991
-- The type each operation needs its target to have (or not to exist).
local WANTS = {incrby = 'string', hincrby = 'hash', hset = 'hash', sadd = 'set'}

-- An integer in the server's own syntax (no '+', no leading zeros) within
-- +-LIMIT, as a number; nil for anything else.
local function as_int(s)
  if s ~= '0' and not string.match(s, '^%-?[1-9]%d*$') then return nil end
  if #s > 17 then return nil end
  local v = tonumber(s)
  if math.abs(v) > LIMIT then return nil end
  return v
end

-- Effect i's fields: op, target key, a, b.
local function effect(i)
  local b = 6 + (i - 1) * 4
  return ARGV[b], tonumber(ARGV[b + 1]), ARGV[b + 2], ARGV[b + 3]
end

-- Checks every effect against the current data and against the effects
-- before it. Returns nil, or the index and reason of the first refusal.
local function check_effects()
  local types = {} -- key -> the type it has once earlier effects ran
  local ints = {}  -- counter slot -> its value once earlier effects ran (false: not an integer)
  for i = 1, n_effects do
    local op, ki, a, b = effect(i)
    local want = WANTS[op]
    if not want then return i, 'unknown operation ' .. tostring(op) end
    if not ki or ki % 1 ~= 0 or ki < 4 or ki > #KEYS or not a or not b then return i, 'malformed effect' end
    local key = KEYS[ki]
    local have = types[key] or rcall('TYPE', key)['ok']
    if have ~= 'none' and have ~= want then
      return i, key .. ' holds a ' .. have .. ', not a ' .. want
    end
    types[key] = want
    if op == 'hset' then
      ints[key .. '\0' .. a] = as_int(b) or false
    elseif op == 'incrby' or op == 'hincrby' then
      local by, slot, stored = a, key, nil
      if op == 'hincrby' then by, slot = b, key .. '\0' .. a end
      by = as_int(by)
      if not by then return i, 'the increment is not an integer within 2^53' end
      local cur = ints[slot]
      if cur == nil then
        if op == 'incrby' then stored = rcall('GET', key) else stored = rcall('HGET', key, a) end
        cur = 0
        if stored then cur = as_int(stored) or false end
      end
      if cur == false then return i, 'the current value is not an integer within 2^53' end
      if math.abs(cur + by) > LIMIT then return i, 'the result would leave +-(2^53 - 1)' end
      ints[slot] = cur + by
    end
  end
  return nil
end

if n_effects > 0 then
  local bad, why = check_effects()
  if bad then return {CODE.REFUSED, now, 0, bad, why} end
  for i = 1, n_effects do
    local op, ki, a, b = effect(i)
    local key = KEYS[ki]
    -- Numbers go to the server as the caller's strings, never via Lua's
    -- float formatting.
    if op == 'incrby' then rcall('INCRBY', key, a)
    elseif op == 'hincrby' then rcall('HINCRBY', key, a, b)
    elseif op == 'hset' then rcall('HSET', key, a, b)
    else rcall('SADD', key, a) end
  end
end

local moves = new_moves()
local code = settle_complete(moves, prefix, jk, id, token, now, keep, nil, cur)
apply_moves(moves, {active = active_key, completed = completed_key}, prefix, keep, KEEP_ALL, now)
return {code, now, call_did.outbox and 1 or 0}
