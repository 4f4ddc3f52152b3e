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
local CODES = {cancelled = CODE.CANCELLED, requested = CODE.REQUESTED, finished = CODE.FINISHED}
for i = 3, #ARGV do
  local id = ARGV[i]
  local jk = prefix .. 'job:' .. id
  local job = hfields(jk, 'st', 'dd', 'cx', 'ln')
  local did = cancel_job(moves, prefix, pending_key, delayed_key, jk, id, job, keep, now)
  local code, st = CODES[did] or CODE.NOT_FOUND, ''
  if did == 'cancelled' then
    st = 'cancelled'
  elseif did then
    st = job[1]
  end
  out[#out + 1] = id
  out[#out + 1] = code
  out[#out + 1] = st
end
apply_moves(moves, {cancelled = cancelled_key}, prefix, KEEP_ALL, keep, now)
return out
