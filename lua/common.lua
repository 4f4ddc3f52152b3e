-- common.lua: helpers prepended to every echomq script (src/scripts.rs joins
-- them), so each state move is written once.
--
-- Job hash fields (absent counters read as 0, absent overrides as the
-- caller's default; short names keep small hashes in listpack encoding):
--   p   payload (JSON)            st  state: pending|delayed|active|completed|failed
--   a   attempts = fencing token  f   failures        s  stalls
--   sc  pending score (priority, then mint order)      ct created (server ms)
--   ft  finished (server ms)      err last error      dd dedup id (released at finish)
--   ma  max_attempts override     ms  max_stalls override
--   lo  last settlement "OP:TOKEN" (OP: c complete, r retry, f fail, l release)
local rcall = redis.call
local WAKE_CAP = 64

-- The server's wall clock in milliseconds. The only clock echomq trusts.
local function server_now()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Leaves up to `n` wake tokens for consumers blocked on the wake list
-- (capped so a busy queue does not grow it without bound).
local function wake(wake_key, n)
  local room = WAKE_CAP - rcall('LLEN', wake_key)
  if n > room then n = room end
  for _ = 1, n do rcall('LPUSH', wake_key, '1') end
end

-- Puts job `id` on pending at its own score (so a returned job keeps its
-- place: priority first, then mint order). A job whose hash is gone is
-- skipped (returns false): there is nothing left to run.
local function to_pending(pending_key, jk, id)
  local sc = rcall('HGET', jk, 'sc')
  if not sc then return false end
  rcall('ZADD', pending_key, sc, id)
  rcall('HSET', jk, 'st', 'pending')
  return true
end

-- Moves due delayed jobs (score <= now) to pending, at most `limit`.
-- Returns how many moved.
local function promote_due(delayed_key, pending_key, wake_key, prefix, now, limit)
  local due = rcall('ZRANGEBYSCORE', delayed_key, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do
    to_pending(pending_key, prefix .. 'job:' .. id, id)
  end
  if #due > 0 then
    rcall('ZREM', delayed_key, unpack(due))
    wake(wake_key, #due)
  end
  return #due
end

-- Leases up to `limit` pending jobs until now + lease, after promoting up
-- to `limit` due delayed jobs when `promote` is set (a plain claim does;
-- the settle path, hot under load, leaves promotion to the reaper and to
-- plain claims). `k` holds pending, active, delayed, wake.
-- Appends {deadline, id_1, token_1, failures_1, payload_1, ...} to `out`.
local function claim_jobs(k, prefix, now, lease, limit, promote, out)
  local deadline = now + lease
  out[#out + 1] = deadline
  if limit <= 0 then return end
  if promote then promote_due(k.delayed, k.pending, k.wake, prefix, now, limit) end
  local popped = rcall('ZPOPMIN', k.pending, limit)
  local deadline_s = tostring(deadline)
  local zargs = {}
  for i = 1, #popped, 2 do
    local id = popped[i]
    local jk = prefix .. 'job:' .. id
    local job = rcall('HMGET', jk, 'p', 'f', 'a')
    -- a pending id without a hash (evicted, or a torn write) is dropped
    if job[1] then
      -- one write for the new token and the state (the script is atomic)
      local token = tostring((tonumber(job[3]) or 0) + 1)
      rcall('HSET', jk, 'a', token, 'st', 'active')
      zargs[#zargs + 1] = deadline_s
      zargs[#zargs + 1] = id
      out[#out + 1] = id
      out[#out + 1] = token
      out[#out + 1] = job[2] or '0'
      out[#out + 1] = job[1]
    end
  end
  if #zargs > 0 then rcall('ZADD', k.active, unpack(zargs)) end
  -- Nothing left to hand out: clear stale wake tokens so idle consumers sleep.
  if #popped < limit * 2 then rcall('DEL', k.wake) end
end

-- Checks that the caller still owns job `jk` with `token` (a string, as
-- sent). Returns nil and the job's dedup id when it does, or the reply to
-- send: {2, now} when this exact settlement `op` already happened with this
-- token (its reply was lost), {-1, now} for a missing job, {-2, now} for a
-- lost lease.
local function check_owner(jk, token, op, now)
  local cur = rcall('HMGET', jk, 'st', 'a', 'lo', 'dd')
  if not cur[1] then return {-1, now} end
  if cur[1] == 'active' and cur[2] == token then return nil, cur[4] end
  if op and cur[3] == op .. ':' .. token then return {2, now} end
  return {-2, now}
end

-- Set moves collected while settling and applied by apply_moves with one
-- variadic command per set, so a batch of N settlements costs about two
-- commands per job instead of eight. Hash writes are not deferred, so a
-- later check in the same call sees every earlier settlement.
local function new_moves()
  return {unlease = {}, completed = {}, failed = {}, delete = {}}
end

-- Terminal move into state `state` (completed or failed) at `now`: releases
-- the job's dedup marker `dd` if it still holds it; with retention `keep` 0
-- the record is deleted, otherwise it is stamped with `fields`.
local function finish(moves, prefix, jk, id, state, now, keep, dd, fields)
  if dd then
    local mk = prefix .. 'de:' .. dd
    if rcall('GET', mk) == id then rcall('DEL', mk) end
  end
  local now_s = tostring(now)
  -- Written even when the record is about to be deleted, so a later item
  -- of the same call sees the job settled (check_owner reads the hash).
  rcall('HSET', jk, 'st', state, 'ft', now_s, unpack(fields))
  if keep == 0 then
    moves.delete[#moves.delete + 1] = jk
    return
  end
  local into = moves[state]
  into[#into + 1] = now_s
  into[#into + 1] = id
end

-- Deletes the oldest records of `set_key` beyond the newest `keep` (-1:
-- keep all) once they exceed it by TRIM_SLACK, so a steady stream of
-- completions trims every few dozen calls, not every call; at most 1,000
-- per call so the work stays bounded.
local TRIM_SLACK = 64
local function trim(set_key, prefix, keep)
  if keep <= 0 then return end
  local over = rcall('ZCARD', set_key) - keep
  if over < TRIM_SLACK then return end
  if over > 1000 then over = 1000 end
  local old = rcall('ZPOPMIN', set_key, over)
  local doomed = {}
  for i = 1, #old, 2 do doomed[#doomed + 1] = prefix .. 'job:' .. old[i] end
  rcall('DEL', unpack(doomed))
end

-- `k` holds active, completed and failed; `keep` holds their retention.
local function apply_moves(moves, k, prefix, keep_completed, keep_failed)
  if #moves.unlease > 0 then rcall('ZREM', k.active, unpack(moves.unlease)) end
  if #moves.completed > 0 then
    rcall('ZADD', k.completed, unpack(moves.completed))
    trim(k.completed, prefix, keep_completed)
  end
  if #moves.failed > 0 then
    rcall('ZADD', k.failed, unpack(moves.failed))
    trim(k.failed, prefix, keep_failed)
  end
  if #moves.delete > 0 then rcall('DEL', unpack(moves.delete)) end
end

-- The settlements, shared by the one-job scripts (complete.lua, retry.lua,
-- fail.lua, release.lua) and the batched settle.lua. Each assumes
-- check_owner has passed (`dd` is what it returned) and records its set
-- moves in `moves`. `k` holds the queue's keys: active, pending, delayed,
-- completed, failed, wake. Each returns {code, now, due}.

local function settle_complete(moves, prefix, jk, id, token, now, keep, dd)
  moves.unlease[#moves.unlease + 1] = id
  finish(moves, prefix, jk, id, 'completed', now, keep, dd, {'lo', 'c:' .. token})
  return {1, now, 0}
end

-- failures += 1; at max_attempts (the job's own, else `default_max`) the
-- job fails for good (code 3); else it is due again after `delay` ms.
local function settle_retry(moves, k, prefix, jk, id, token, now, delay, err, default_max, keep, dd)
  moves.unlease[#moves.unlease + 1] = id
  local failures = rcall('HINCRBY', jk, 'f', '1')
  local max = tonumber(rcall('HGET', jk, 'ma') or default_max)
  local settled = 'r:' .. token
  if failures >= max then
    finish(moves, prefix, jk, id, 'failed', now, keep, dd, {'err', err, 'lo', settled})
    return {3, now, 0}
  end
  rcall('HSET', jk, 'err', err, 'lo', settled)
  if delay > 0 then
    rcall('HSET', jk, 'st', 'delayed')
    rcall('ZADD', k.delayed, now + delay, id)
    return {1, now, now + delay}
  end
  to_pending(k.pending, jk, id)
  wake(k.wake, 1)
  return {1, now, 0}
end

local function settle_fail(moves, prefix, jk, id, token, now, reason, keep, dd)
  moves.unlease[#moves.unlease + 1] = id
  finish(moves, prefix, jk, id, 'failed', now, keep, dd, {'err', reason, 'lo', 'f:' .. token})
  return {1, now, 0}
end

local function settle_release(moves, k, jk, id, token, now)
  moves.unlease[#moves.unlease + 1] = id
  rcall('HSET', jk, 'lo', 'l:' .. token)
  to_pending(k.pending, jk, id)
  wake(k.wake, 1)
  return {1, now, 0}
end
