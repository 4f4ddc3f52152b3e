-- cancel: cancels jobs by id. A pending or delayed job ends cancelled at
-- once and never runs. An active job gets a cancel request (`cx`): its
-- holder learns of it when it next renews the lease (extend.lua), and the
-- job ends cancelled on any settlement but a complete (settle.lua), or
-- when its lease is reaped (reap.lua); a holder that completes it anyway
-- completes it. A finished job is left as it is.
--
-- KEYS[1] pending  KEYS[2] delayed  KEYS[3] cancelled
-- ARGV[1] prefix       key prefix "emq:{Q}:"
-- ARGV[2] keep_failed  retention of cancelled jobs, as of failed ones (settle.lua)
-- ARGV[3..] ids        the jobs to cancel
--
-- REPLY: {now:int, (id:str, code:code, state:str)*}
-- One group per id: CANCELLED (state "cancelled"); REQUESTED (state
-- "active"; asking again changes nothing); FINISHED (the state it
-- finished in: nothing changed); NOT_FOUND (state "").
--
-- Events (lib/events.lua, unless the queue turned them off): cancelled (a
-- waiting job), cancel_requested (a running one, the first time).
local pending_key, delayed_key, cancelled_key = KEYS[1], KEYS[2], KEYS[3]
local prefix, keep = ARGV[1], retention(ARGV[2])
local now = server_now()
local out = {now}
local moves = new_moves()
local waiting = {pending = pending_key, delayed = delayed_key}
for i = 3, #ARGV do
  local id = ARGV[i]
  local jk = prefix .. 'job:' .. id
  local job = hfields(jk, 'st', 'dd', 'cx', 'ln')
  local code, st = CODE.NOT_FOUND, ''
  if job and job[1] then
    st = job[1]
    if waiting[st] then
      if st == 'pending' then from_pending(pending_key, id, job[4]) else rcall('ZREM', waiting[st], id) end
      finish(moves, prefix, jk, id, 'cancelled', now, keep, job[2], {'err', 'cancelled'})
      code, st = CODE.CANCELLED, 'cancelled'
    elseif st == 'active' then
      if not job[3] then
        rcall('HSET', jk, 'cx', int_s(now))
        emit_job(prefix, 'cancel_requested', id, jk)
      end
      code = CODE.REQUESTED
    elseif st == 'completed' or st == 'failed' or st == 'cancelled' or st == 'expired' then
      code = CODE.FINISHED
    else
      -- a state echomq did not write: the sweep repairs it; leave it
      code, st = CODE.NOT_FOUND, ''
    end
  end
  out[#out + 1] = id
  out[#out + 1] = code
  out[#out + 1] = st
end
apply_moves(moves, {cancelled = cancelled_key}, prefix, KEEP_ALL, keep, now)
return out
