-- flow_cancel: cancels the nodes of a flow (lib/flow.lua) that have not
-- ended. A waiting node (a parent still waiting for children) ends
-- cancelled without running; a pending or delayed job ends cancelled as
-- cancel.lua ends one; an active job gets a cancel request (`cx`), as
-- cancel.lua asks it. Waiting nodes are ended first: each one's parents
-- are waiting too, so no end of this call releases a parent.
--
-- KEYS[1] pending  KEYS[2] delayed  KEYS[3] cancelled
-- ARGV[1] prefix       key prefix "emq:{Q}:"
-- ARGV[2] id           the flow
-- ARGV[3] keep_failed  retention of cancelled jobs, as of failed ones (settle.lua)
--
-- REPLY: {now:int, code:code, cancelled:int, requested:int}
-- OK (cancelled: nodes ended cancelled now; requested: active jobs asked
-- to stop); NOT_FOUND no such flow (the counts 0).
--
-- Events (lib/events.lua, unless the queue turned them off): cancelled (a
-- pending or delayed job), cancel_requested (a running one, the first time).
local pending_key, delayed_key, cancelled_key = KEYS[1], KEYS[2], KEYS[3]
local prefix, fid, keep = ARGV[1], ARGV[2], retention(ARGV[3])
local now = server_now()
local fk = prefix .. 'flow:' .. fid
local nodes = rcall('HGET', fk, 'nodes')
if not nodes then return {now, CODE.NOT_FOUND, 0, 0} end
local names = cut(nodes, '\31')
local moves = new_moves()
local cancelled, requested = 0, 0
for _, name in ipairs(names) do
  if rcall('HEXISTS', fk, 'w:' .. name) == 1 then
    flow_end_waiting(moves, prefix, keep, fk, fid, name, 'cancelled', 'cancelled', now)
    flow_mark(fk, name, 'x', 'cancelled')
    cancelled = cancelled + 1
  end
end
local waiting = {pending = pending_key, delayed = delayed_key}
for _, name in ipairs(names) do
  if rcall('HEXISTS', fk, 'r:' .. name) == 0 then
    local id = fid .. ':' .. name
    local jk = prefix .. 'job:' .. id
    local job = hfields(jk, 'st', 'dd', 'cx', 'ln')
    local st = job and job[1]
    if waiting[st] then
      if st == 'pending' then from_pending(pending_key, id, job[4]) else rcall('ZREM', delayed_key, id) end
      local why = {'err', 'cancelled'}
      finish(moves, prefix, jk, id, 'cancelled', now, keep, job[2], why)
      cancelled = cancelled + 1
    elseif st == 'active' then
      if not job[3] then
        rcall('HSET', jk, 'cx', int_s(now))
        emit_job(prefix, 'cancel_requested', id, jk)
      end
      requested = requested + 1
    end
  end
end
apply_moves(moves, {cancelled = cancelled_key}, prefix, KEEP_ALL, keep, now)
return {now, CODE.OK, cancelled, requested}
