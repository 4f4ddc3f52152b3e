-- sweep: one bounded step of the consistency sweep (DESIGN.md §8). Checks
-- that each job's state agrees with the set that holds it, exactly once,
-- and repairs what a torn write (Redis 7.0 can apply part of a script after
-- a torn AOF tail) or a lost key left behind.
--
-- KEYS[1] pending  KEYS[2] active  KEYS[3] delayed  KEYS[4] completed
-- KEYS[5] failed
-- ARGV[1] key prefix "emq:{Q}:"  ARGV[2] phase: "jobs" or a set's KEYS
-- index 1..5  ARGV[3] cursor ("0" to start)  ARGV[4] COUNT hint per step
--
-- Phase "jobs" SCANs job hashes: a job whose set lacks it is put back (an
-- active job with its deadline now, so the reaper returns it; pending at
-- its own score; delayed due now; finished at its finish time), and it is
-- removed from any other set. A hash without a payload is deleted. Phase
-- 1..5 ZSCANs that set: members without a job hash are removed.
-- Returns {next_cursor, checked, repaired}.
local prefix, phase, cursor, count = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now = server_now()
local sets = {pending = 1, active = 2, delayed = 3, completed = 4, failed = 5}
local checked, repaired = 0, 0

-- Checks one job hash against the sets (phase "jobs").
local function check_job(jk)
  checked = checked + 1
  local id = string.sub(jk, #prefix + 5)
  local f = rcall('HMGET', jk, 'p', 'st', 'sc', 'ft')
  if not f[1] then
    rcall('DEL', jk)
    for i = 1, 5 do rcall('ZREM', KEYS[i], id) end
    repaired = repaired + 1
    return
  end
  local st = f[2]
  local want = sets[st or '']
  if not want then
    st, want = 'pending', 1
    rcall('HSET', jk, 'st', st)
  end
  if not rcall('ZSCORE', KEYS[want], id) then
    local score = now
    if st == 'pending' then score = f[3]
    elseif st == 'completed' or st == 'failed' then score = f[4] or now end
    rcall('ZADD', KEYS[want], score, id)
    repaired = repaired + 1
  end
  for i = 1, 5 do
    if i ~= want and rcall('ZREM', KEYS[i], id) == 1 then repaired = repaired + 1 end
  end
end

if phase == 'jobs' then
  -- The prefix holds the queue name, which may contain glob characters:
  -- escape them, and still compare each key's prefix as a plain string.
  local mine = prefix .. 'job:'
  local pattern = string.gsub(mine, '[%*%?%[%]\\]', '\\%0') .. '*'
  local r = rcall('SCAN', cursor, 'MATCH', pattern, 'COUNT', count)
  for _, jk in ipairs(r[2]) do
    if string.sub(jk, 1, #mine) == mine then check_job(jk) end
  end
  return {r[1], checked, repaired}
end

local set_key = KEYS[tonumber(phase)]
local r = rcall('ZSCAN', set_key, cursor, 'COUNT', count)
for i = 1, #r[2], 2 do
  local id = r[2][i]
  checked = checked + 1
  if rcall('EXISTS', prefix .. 'job:' .. id) == 0 then
    rcall('ZREM', set_key, id)
    repaired = repaired + 1
  end
end
return {r[1], checked, repaired}
