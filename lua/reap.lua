-- reap: returns expired leases to pending and promotes due delayed jobs.
-- One script, so racing reapers each see a lease expire exactly once.
--
-- KEYS[1] active  KEYS[2] pending  KEYS[3] delayed  KEYS[4] failed
-- KEYS[5] wake  KEYS[6] cancelled  KEYS[7] expired  KEYS[8] expiring
-- ARGV[1] prefix       key prefix "emq:{Q}:"
-- ARGV[2] limit        the most jobs to reap (and, separately, to promote) in this call
-- ARGV[3] keep_failed  retention of failed jobs (as in settle.lua)
--
-- An expired lease (deadline < TIME) counts a stall; a job past its own
-- max_stalls fails for good with reason "stalled"; one whose cancel was
-- requested ends cancelled instead of running again, and one past its
-- expiry ends expired (lib/expiry.lua). Then the jobs still waiting past
-- their expiry end expired (expire_due). A laned job's slot is
-- given back (lib/sets.lua apply_moves). Only a job whose record says
-- active is reaped: an id on active whose record is gone or in another
-- state (a torn write's leftover) is only taken off active, so a finished
-- job never runs again and counts no stall.
--
-- REPLY: {now:int, promoted:int, active:int, next_due:int, expired:int, (id:str,
--   outcome:code, stalls:int)*}
-- One group per lapsed lease: outcome OK back to pending, FAILED failed
-- as stalled, CANCELLED cancelled, EXPIRED expired. `promoted` counts the
-- due delayed jobs moved to pending, `active` the leases still held,
-- `next_due` is the earliest due time of a delayed job or expiry of a job
-- (server ms, 0 for none): the maintenance task reaps an idle queue less
-- often; `expired` counts the waiting jobs ended past their expiry.
--
-- Events (lib/events.lua, unless the queue turned them off): stalled (each
-- lapsed lease), then failed, cancelled or expired when the job does not
-- go back; expired; promoted.
local active_key, pending_key, delayed_key, failed_key, wake_key, cancelled_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local k = {active = active_key, pending = pending_key, delayed = delayed_key, failed = failed_key,
  cancelled = cancelled_key, expired = KEYS[7], expiring = KEYS[8]}
local prefix, limit, keep = ARGV[1], tonumber(ARGV[2]), retention(ARGV[3])
local now = server_now()
local out = {now, 0, 0, 0, 0}

local expired = rcall('ZRANGEBYSCORE', active_key, '-inf', '(' .. now, 'LIMIT', 0, limit)
local moves = new_moves()
local back = 0
for _, id in ipairs(expired) do
  local jk = prefix .. 'job:' .. id
  local job = hfields(jk, 'st', 'lm', 'dd', 'cx', 'ln', 'xa')
  unlease(moves, id, job and job[5])
  if job and job[1] == 'active' then
    local stalls = rcall('HINCRBY', jk, 's', '1')
    emit_job(prefix, 'stalled', id, jk)
    local _, max = budget(job[2])
    local outcome = CODE.OK
    if job[4] then
      outcome = CODE.CANCELLED
      finish(moves, prefix, jk, id, 'cancelled', now, keep, job[3], {'err', 'cancelled'})
    elseif stalls > max then
      outcome = CODE.FAILED
      finish(moves, prefix, jk, id, 'failed', now, keep, job[3], {'err', 'stalled'})
    elseif past_expiry(job[6], now) then
      outcome = CODE.EXPIRED
      expire(moves, prefix, jk, id, now, keep, job[3] or nil)
    else
      to_pending(pending_key, jk, id)
      back = back + 1
    end
    out[#out + 1] = id
    out[#out + 1] = outcome
    out[#out + 1] = stalls
  end
end
if not obliterating(prefix) then out[5] = expire_due(k, prefix, now, limit, keep, moves) end
apply_moves(moves, k, prefix, KEEP_ALL, keep, now)
if back > 0 then wake(wake_key, back) end
if not obliterating(prefix) then
  out[2] = promote_due(delayed_key, pending_key, wake_key, prefix, now, limit)
end
out[3] = rcall('ZCARD', active_key)
for _, key in ipairs({delayed_key, k.expiring}) do
  local first = rcall('ZRANGE', key, 0, 0, 'WITHSCORES')
  local at = first[2] and tonumber(first[2])
  if at and (out[4] == 0 or at < out[4]) then out[4] = at end
end
return out
