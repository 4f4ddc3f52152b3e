-- sweep: one bounded step of the consistency sweep (DESIGN.md §8). Checks
-- that each job's state agrees with the set that holds it, exactly once,
-- and repairs what a torn write (Redis 7.0 can apply part of a script after
-- a torn AOF tail) or a lost key left behind.
--
-- KEYS[1] pending  KEYS[2] active  KEYS[3] delayed  KEYS[4] completed
-- KEYS[5] failed   KEYS[6] cancelled
-- KEYS[7] seq (mint counter, for a job that lost its score)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] phase   "jobs" or a set's KEYS index 1..6
-- ARGV[3] cursor  "0" to start
-- ARGV[4] count   COUNT hint per step
--
-- Phase "jobs" SCANs job hashes: a job whose set lacks it is put back (an
-- active job with its deadline now, so the reaper returns it; pending at
-- its own score; delayed due now; finished at its finish time), and it is
-- removed from any other set. A hash without a payload is deleted; one
-- with an unknown state becomes pending; one without a valid score `sc`
-- gets a fresh one (priority 0, the next mint number, as new_job in
-- common.lua computes it), since every later move back to pending ZADDs at `sc`. A
-- non-numeric finish time `ft` counts as now. Phase 1..6 ZSCANs that set:
-- members whose job key is missing, or is not a hash, are removed.
--
-- The sweep repairs or skips, and never raises on malformed data (a raise
-- would recur at the same cursor on every run and wedge the sweep there).
-- Skipped, never deleted (they may be someone's data), and counted: a key
-- under the job pattern that is not a hash; a job whose set key, or the
-- seq key, holds another type; in phase 1..6, a set key of another type.
--
-- Returns {next_cursor, checked, repaired, skipped}.
local prefix, phase, cursor, count = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local seq_key = KEYS[7]
local now = server_now()
local sets = {pending = 1, active = 2, delayed = 3, completed = 4, failed = 5, cancelled = 6}
local NSETS = 6
local checked, repaired, skipped = 0, 0, 0

-- True for a key that is a sorted set or absent (a command on it cannot
-- raise WRONGTYPE).
local function zset_or_none(key)
  local t = rcall('TYPE', key)['ok']
  return t == 'zset' or t == 'none'
end

-- `s` as a finite number, or nil. Lua's tonumber also takes what ZADD
-- refuses (surrounding spaces, hex, "nan", "inf"), so only digits, sign,
-- point and exponent pass.
local function score_of(s)
  if not s or string.find(s, '[^%d%.eE%+%-]') then return nil end
  local n = tonumber(s)
  if n and n == n and n > -math.huge and n < math.huge then return n end
  return nil
end

-- Checks one job hash against the sets (phase "jobs").
local function check_job(jk, usable)
  checked = checked + 1
  if rcall('TYPE', jk)['ok'] ~= 'hash' then
    skipped = skipped + 1
    return
  end
  local id = string.sub(jk, #prefix + 5)
  local f = rcall('HMGET', jk, 'p', 'st', 'sc', 'ft')
  if not f[1] then
    rcall('DEL', jk)
    for i = 1, NSETS do
      if usable[i] then rcall('ZREM', KEYS[i], id) end
    end
    repaired = repaired + 1
    return
  end
  local st = f[2]
  local want = sets[st or '']
  if not usable[want or 1] then
    skipped = skipped + 1
    return
  end
  if not want then
    st, want = 'pending', 1
    rcall('HSET', jk, 'st', st)
    repaired = repaired + 1
  end
  local sc = score_of(f[3])
  if not sc then
    -- redis.pcall: a seq key of another type answers an error, not a raise.
    local seq = redis.pcall('INCR', seq_key)
    if type(seq) ~= 'number' then
      skipped = skipped + 1
      return
    end
    sc = 127 * PRIO_STEP + seq
    rcall('HSET', jk, 'sc', sc)
    repaired = repaired + 1
  end
  if not rcall('ZSCORE', KEYS[want], id) then
    local score = now
    if st == 'pending' then score = sc
    elseif st == 'completed' or st == 'failed' or st == 'cancelled' then score = score_of(f[4]) or now end
    rcall('ZADD', KEYS[want], score, id)
    repaired = repaired + 1
  end
  for i = 1, NSETS do
    if i ~= want and usable[i] and rcall('ZREM', KEYS[i], id) == 1 then repaired = repaired + 1 end
  end
end

if phase == 'jobs' then
  local usable = {}
  for i = 1, NSETS do usable[i] = zset_or_none(KEYS[i]) end
  -- The prefix holds the queue name, which may contain glob characters:
  -- escape them, and still compare each key's prefix as a plain string.
  local mine = prefix .. 'job:'
  local pattern = string.gsub(mine, '[%*%?%[%]\\]', '\\%0') .. '*'
  local r = rcall('SCAN', cursor, 'MATCH', pattern, 'COUNT', count)
  for _, jk in ipairs(r[2]) do
    if string.sub(jk, 1, #mine) == mine then check_job(jk, usable) end
  end
  return {r[1], checked, repaired, skipped}
end

local set_key = KEYS[tonumber(phase)]
if not zset_or_none(set_key) then return {'0', 0, 0, 1} end
local r = rcall('ZSCAN', set_key, cursor, 'COUNT', count)
for i = 1, #r[2], 2 do
  local id = r[2][i]
  checked = checked + 1
  -- A member whose key is not a hash would make claim's HMGET raise.
  if rcall('TYPE', prefix .. 'job:' .. id)['ok'] ~= 'hash' then
    rcall('ZREM', set_key, id)
    repaired = repaired + 1
  end
end
return {r[1], checked, repaired, skipped}
