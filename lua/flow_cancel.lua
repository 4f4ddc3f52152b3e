-- flow_cancel: cancels the nodes of a flow (lib/flow.lua) that have not
-- ended. A waiting node (a parent still waiting for children) ends
-- cancelled without running; a pending or delayed job ends cancelled as
-- cancel.lua ends one; an active job gets a cancel request (`cx`), as
-- cancel.lua asks it; a node of another queue that has not ended is sent
-- a cancel message there (deliver.lua cancels it as this call would).
-- Waiting nodes are ended first: each one's parents are waiting too, so no
-- end of this call releases a parent.
--
-- KEYS[1] pending  KEYS[2] delayed  KEYS[3] cancelled
-- ARGV[1] prefix       key prefix "emq:{Q}:"
-- ARGV[2] id           the flow
-- ARGV[3] keep_failed  retention of cancelled jobs, as of failed ones (settle.lua)
--
-- REPLY: {now:int, code:code, cancelled:int, requested:int, sent:int}
-- OK (cancelled: nodes ended cancelled now; requested: active jobs asked
-- to stop; sent: cancel messages pushed onto the outbox for nodes of
-- other queues); NOT_FOUND no such flow (the counts 0).
--
-- Events (lib/events.lua, unless the queue turned them off): cancelled (a
-- pending or delayed job), cancel_requested (a running one, the first time).
local pending_key, delayed_key, cancelled_key = KEYS[1], KEYS[2], KEYS[3]
local prefix, fid, keep = ARGV[1], ARGV[2], retention(ARGV[3])
local now = server_now()
local fk = prefix .. 'flow:' .. fid
local nodes = rcall('HGET', fk, 'nodes')
if not nodes then return {now, CODE.NOT_FOUND, 0, 0, 0} end
local names = cut(nodes, '\31')
local moves = new_moves()
local cancelled, requested, sent = 0, 0, 0
for _, name in ipairs(names) do
  if rcall('HEXISTS', fk, 'w:' .. name) == 1 then
    -- (a node of another queue is sent there, to be written cancelled)
    if rcall('HEXISTS', fk, 'q:' .. name) == 1 then sent = sent + 1 end
    flow_end_waiting(moves, prefix, keep, fk, fid, name, 'cancelled', 'cancelled', now)
    flow_mark(fk, name, 'x', 'cancelled')
    cancelled = cancelled + 1
  end
end
local ct = rcall('HGET', fk, 'ct') or ''
for _, name in ipairs(names) do
  if rcall('HEXISTS', fk, 'r:' .. name) == 0 then
    local q = rcall('HGET', fk, 'q:' .. name)
    if q then
      outbox_push(prefix, q, {'c', fid, ct, name, own_queue(prefix)})
      sent = sent + 1
    else
      local id = fid .. ':' .. name
      local jk = prefix .. 'job:' .. id
      local job = hfields(jk, 'st', 'dd', 'cx', 'ln')
      local did = cancel_job(moves, prefix, pending_key, delayed_key, jk, id, job, keep, now)
      if did == 'cancelled' then
        cancelled = cancelled + 1
      elseif did == 'requested' then
        requested = requested + 1
      end
    end
  end
end
apply_moves(moves, {cancelled = cancelled_key}, prefix, KEEP_ALL, keep, now)
return {now, CODE.OK, cancelled, requested, sent}
