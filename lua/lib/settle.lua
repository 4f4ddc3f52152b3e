-- lib/settle.lua: the settlements of a leased job (complete, retry, fail,
-- cancel, release, snooze, rate limited), shared by settle.lua and
-- complete.lua; reap.lua and cancel.lua end jobs through sets.lua finish.
--
-- Needs: base (rcall, hfields, int_s, now_str), codes (CODE), defaults (ERRORS_KEEP),
-- keyspace (wake, release_dedup), events (events_on, record_job, ev_text, emit_job),
-- budget (budget, backoff_ms), sets (to_pending, unlease, finish, finished_into),
-- fence (not_owner, remember), expiry (past_expiry, expire).

-- Each settlement but settle_complete assumes check_owner has passed
-- (`owner` is what it returned); each records its set moves in `moves`. `k` holds the queue's
-- keys: active, pending, delayed, completed, failed, wake. Each returns
-- {code, due}.

-- The fields settle_complete reads (hfields; nil for a key of another
-- type): st, tk, lo (the owner check), ln, dd, a, kd. Fewer than
-- check_owner's: a field the record lacks costs the server a scan of the
-- whole record (benches/README.md, "The completion and the claim").
local function complete_fields(jk)
  return hfields(jk, 'st', 'tk', 'lo', 'ln', 'dd', 'a', 'kd')
end

-- Completes job `id` (record `jk`, its complete_fields `cur`, read here
-- when nil) if the caller holds it with `token`; `result`: the handler's
-- result (JSON) to keep, or nil / "" for none. Returns the reply code:
-- OK, or not_owner's. The most common settlement, so it is written out
-- here rather than through check_owner and finish (what those build per
-- job, an owner table and a field list, cost a fifth of a settlement's
-- server time); it records what finish records for a completed job.
local function settle_complete(moves, prefix, jk, id, token, now, keep, result, cur)
  cur = cur or complete_fields(jk)
  if not (cur and cur[1] == 'active' and cur[2] == token) then
    return not_owner(cur and cur[1], cur and cur[2], cur and cur[3], token, 'c', now)[1]
  end
  -- the helpers are called only when there is work for them: a call per
  -- job costs more here than what most of them do
  local ln = cur[4] or nil
  if ln then unlease(moves, id, ln) else moves.unlease[#moves.unlease + 1] = id end
  if cur[5] then release_dedup(prefix, cur[5], id) end
  local lo = 'c:' .. token
  if cur[3] then lo = remember(cur[3], 'c', token) end
  local finished = now_str(now)
  if keep.n == 0 and moves.gone then
    moves.gone[jk] = lo
  elseif result and result ~= '' then
    rcall('HSET', jk, 'st', 'completed', 'ft', finished, 'lo', lo, 'rs', result)
  else
    rcall('HSET', jk, 'st', 'completed', 'ft', finished, 'lo', lo)
  end
  local cap = events_on(prefix)
  if cap then record_job(prefix, 'completed', cap, id, 'a', cur[6], 'tk', token, 'ln', ln, 'kd', cur[7]) end
  finished_into(moves, prefix, keep, jk, id, 'completed', now, finished, result)
  return CODE.OK
end

-- Back to pending at once (`delay` 0) or delayed until now + delay.
local function requeue(k, jk, id, now, delay)
  if delay > 0 then
    rcall('HSET', jk, 'st', 'delayed')
    rcall('ZADD', k.delayed, now + delay, id)
    return now + delay
  end
  to_pending(k.pending, jk, id)
  wake(k.wake, 1)
  return 0
end

-- The `eh` field with error `err` at `now` added: the last ERRORS_KEEP.
local function errors_with(jk, now, err)
  local list = {}
  local old = rcall('HGET', jk, 'eh')
  if old then
    local ok, decoded = pcall(cjson.decode, old)
    if ok and type(decoded) == 'table' then list = decoded end
  end
  local out = {{at = now, e = err}}
  for i = 1, ERRORS_KEEP - 1 do
    if list[i] then out[#out + 1] = list[i] end
  end
  return cjson.encode(out)
end

-- failures += 1; at the job's max_attempts the job fails for good (code
-- FAILED); else it is due again after `delay` ms, or after the job's
-- backoff (its jitter drawn for this token) when `delay` is negative,
-- unless that is at or past its expiry: then it ends expired (EXPIRED).
local function settle_retry(moves, k, prefix, jk, id, token, now, delay, err, keep, owner)
  unlease(moves, id, owner.ln)
  local failures = rcall('HINCRBY', jk, 'f', '1')
  local max, _, bo, jitter = budget(rcall('HGET', jk, 'lm'))
  local lo = remember(owner.lo, 'r', token)
  local eh = errors_with(jk, now, err)
  if failures >= max then
    finish(moves, prefix, jk, id, 'failed', now, keep, owner.dd, {'err', err, 'eh', eh, 'lo', lo}, owner)
    return {CODE.FAILED, 0}
  end
  if delay < 0 then delay = backoff_ms(bo, failures, jitter, tonumber(token)) end
  if past_expiry(owner.xa, now + delay) then
    expire(moves, prefix, jk, id, now, keep, owner.dd, {'err', 'expired', 'eh', eh, 'lo', lo}, owner)
    return {CODE.EXPIRED, 0}
  end
  rcall('HSET', jk, 'err', err, 'eh', eh, 'lo', lo)
  local due = requeue(k, jk, id, now, delay)
  emit_job(prefix, 'retried', id, jk, {'err', ev_text(err), 'due', due > 0 and int_s(due)}, owner)
  return {CODE.OK, due}
end

-- A handler's failure too, so failures += 1, but whatever attempts remain.
local function settle_fail(moves, prefix, jk, id, token, now, reason, keep, owner)
  unlease(moves, id, owner.ln)
  rcall('HINCRBY', jk, 'f', '1')
  local eh = errors_with(jk, now, reason)
  finish(moves, prefix, jk, id, 'failed', now, keep, owner.dd,
    {'err', reason, 'eh', eh, 'lo', remember(owner.lo, 'f', token)}, owner)
  return {CODE.OK, 0}
end

-- Ends the job cancelled (op x, or any settlement but complete of a job
-- whose cancel was requested: it must not run again). `text` is the
-- reason (op x; "cancelled" when empty) or the error a retry or fail
-- carried, kept in the error history.
local function settle_cancel(moves, prefix, jk, id, token, now, op, text, keep, owner)
  unlease(moves, id, owner.ln)
  local fields = {'err', 'cancelled', 'lo', remember(owner.lo, op, token)}
  if text and text ~= '' then
    if op == 'x' then fields[2] = text end
    fields[5] = 'eh'
    fields[6] = errors_with(jk, now, text)
  end
  finish(moves, prefix, jk, id, 'cancelled', now, keep, owner.dd, fields, owner)
  return {CODE.CANCELLED, 0}
end

-- Release (op l, graceful shutdown), snooze (op s, run later) and rate
-- limited (op h, a snooze; settle.lua also stops claims: throttle.lua
-- hold_starts): back to pending or delayed, counting neither a failure
-- nor a stall; or, when that is at or past the job's expiry, expired
-- (`keep` its retention).
local REQUEUE_EVENT = {l = 'released', s = 'snoozed', h = 'rate_limited'}
local function settle_requeue(moves, k, prefix, jk, id, token, now, op, delay, keep, owner)
  unlease(moves, id, owner.ln)
  local lo = remember(owner.lo, op, token)
  if past_expiry(owner.xa, now + delay) then
    expire(moves, prefix, jk, id, now, keep, owner.dd, {'err', 'expired', 'lo', lo}, owner)
    return {CODE.EXPIRED, 0}
  end
  rcall('HSET', jk, 'lo', lo)
  local due = requeue(k, jk, id, now, delay)
  emit_job(prefix, REQUEUE_EVENT[op] or 'released', id, jk, {'due', due > 0 and int_s(due)}, owner)
  return {CODE.OK, due}
end
