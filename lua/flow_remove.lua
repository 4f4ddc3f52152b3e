-- flow_remove: removes a flow (lib/flow.lua): its record, and every step
-- that has not started. A waiting step goes with the record (it was no
-- job); a pending or delayed job is deleted as remove.lua deletes one; a
-- step of another queue that has not ended is sent a remove message
-- there (deliver.lua deletes it if it has not started). A running
-- job is left to finish (its end then reaches no flow), and ended steps'
-- records stay in their sets, as their retention says.
--
-- KEYS[1] pending  KEYS[2] delayed
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] id      the flow
--
-- REPLY: {now:int, code:code, removed:int, running:int, sent:int}
-- OK (removed: steps removed now, waiting ones included; running: active
-- jobs left to finish; sent: remove messages pushed onto the outbox);
-- NOT_FOUND no such flow (the counts 0).
--
-- Events (lib/events.lua, unless the queue turned them off): removed (a
-- pending or delayed job).
local pending_key, delayed_key = KEYS[1], KEYS[2]
local prefix, fid = ARGV[1], ARGV[2]
local now = server_now()
local fk = prefix .. 'flow:' .. fid
local f = rcall('HMGET', fk, 'nodes', 'ct')
if not f[1] then return {now, CODE.NOT_FOUND, 0, 0, 0} end
local removed, running, sent = 0, 0, 0
local jobs = {}
for _, name in ipairs(cut(f[1], '\31')) do
  local g = rcall('HMGET', fk, 'r:' .. name, 'w:' .. name, 'q:' .. name)
  if g[1] then
    -- ended: its record stays
  elseif g[2] then
    removed = removed + 1
  elseif g[3] then
    outbox_push(prefix, g[3], {'x', fid, f[2] or '', name, own_queue(prefix)})
    sent = sent + 1
  else
    jobs[#jobs + 1] = fid .. ':' .. name
  end
end
-- the record first, so no removal below reaches the flow (flow_node_done
-- finds it gone) and fails or releases a parent
rcall('DEL', fk)
local moves = new_moves()
local sets = {pending = pending_key, delayed = delayed_key}
for _, id in ipairs(jobs) do
  local jk = prefix .. 'job:' .. id
  local job = hfields(jk, 'st', 'dd', 'ln')
  local st = job and job[1]
  if st == 'pending' or st == 'delayed' then
    remove_job(moves, prefix, sets, jk, id, st, job[2], job[3], now)
    removed = removed + 1
  elseif st == 'active' then
    running = running + 1
  end
end
return {now, CODE.OK, removed, running, sent}
