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

-- Terminal move into `set_key` (completed or failed) at `now`: releases the
-- job's dedup marker if it still holds it, then applies retention. `keep`:
-- -1 keep every record, 0 delete this job's record now, n > 0 keep the n
-- newest (older ones are deleted, a few per call so the work stays bounded).
-- `fields` is a flat list of extra hash fields to set.
local function finish(prefix, set_key, jk, id, state, now, keep, fields)
  local dd = rcall('HGET', jk, 'dd')
  if dd then
    local mk = prefix .. 'de:' .. dd
    if rcall('GET', mk) == id then rcall('DEL', mk) end
  end
  if keep == 0 then
    rcall('DEL', jk)
    return
  end
  rcall('HSET', jk, 'st', state, 'ft', now, unpack(fields))
  rcall('ZADD', set_key, now, id)
  if keep > 0 then
    local over = rcall('ZCARD', set_key) - keep
    if over > 0 then
      if over > 16 then over = 16 end
      local old = rcall('ZPOPMIN', set_key, over)
      for i = 1, #old, 2 do rcall('DEL', prefix .. 'job:' .. old[i]) end
    end
  end
end

-- Checks that the caller still owns job `jk` with `token`. Returns nil when
-- it does, or the reply to send: {2, now} when this exact settlement `op`
-- already happened with this token (its reply was lost), {-1, now} for a
-- missing job, {-2, now} for a lost lease.
local function check_owner(jk, token, op, now)
  local cur = rcall('HMGET', jk, 'st', 'a', 'lo')
  if not cur[1] then return {-1, now} end
  if cur[1] == 'active' and tonumber(cur[2]) == token then return nil end
  if op and cur[3] == op .. ':' .. token then return {2, now} end
  return {-2, now}
end


-- The settlements, shared by the one-job scripts (complete.lua, retry.lua,
-- fail.lua, release.lua) and the batched settle.lua. Each assumes
-- check_owner has passed. `k` holds the queue's keys: active, pending,
-- delayed, completed, failed, wake. Each returns {code, now, due}.

local function settle_complete(k, prefix, jk, id, token, now, keep)
  rcall('ZREM', k.active, id)
  finish(prefix, k.completed, jk, id, 'completed', now, keep, {'lo', 'c:' .. token})
  return {1, now, 0}
end

-- failures += 1; at max_attempts (the job's own, else `default_max`) the
-- job fails for good (code 3); else it is due again after `delay` ms.
local function settle_retry(k, prefix, jk, id, token, now, delay, err, default_max, keep)
  rcall('ZREM', k.active, id)
  local failures = rcall('HINCRBY', jk, 'f', 1)
  local max = tonumber(rcall('HGET', jk, 'ma') or default_max)
  local settled = 'r:' .. token
  if failures >= max then
    finish(prefix, k.failed, jk, id, 'failed', now, keep, {'err', err, 'lo', settled})
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

local function settle_fail(k, prefix, jk, id, token, now, reason, keep)
  rcall('ZREM', k.active, id)
  finish(prefix, k.failed, jk, id, 'failed', now, keep, {'err', reason, 'lo', 'f:' .. token})
  return {1, now, 0}
end

local function settle_release(k, jk, id, token, now)
  rcall('ZREM', k.active, id)
  rcall('HSET', jk, 'lo', 'l:' .. token)
  to_pending(k.pending, jk, id)
  wake(k.wake, 1)
  return {1, now, 0}
end
