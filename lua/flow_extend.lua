-- flow_extend: adds children to a step of a flow (lib/flow.lua) that
-- still waits for its own, in one atomic call: the new steps (a graph of
-- their own, which the caller checked) join the flow's record as
-- flow_add.lua writes a flow's steps, and those no new step runs after
-- become children of the waiting step, which then waits for them too.
--
-- KEYS[1] seq      mint counter
-- KEYS[2] pending  (zset)   KEYS[3] delayed (zset)   KEYS[4] wake (list)
-- ARGV[1] prefix    key prefix "emq:{Q}:"
-- ARGV[2] id        the flow
-- ARGV[3] parent    the waiting step that gets the new children
-- ARGV[4] children  the edges the parent gains, "CHILD\31POLICY" each,
--                   joined by "\30" (lib/flow.lua)
-- ARGV[5] nodes     number of new steps N, then 10 fields per step, as
--                   flow_add.lua's nodes lists them
--
-- REPLY: {now:int, code:code, which:str, sent:int}
-- OK added (sent: messages pushed onto the outbox for steps of other
-- queues); NOT_FOUND no such flow (which ""), or no step `parent` in it
-- (which: the parent); FINISHED the parent no longer waits for children
-- (its job was made, or it ended); EXISTS a new step's name is the flow's
-- already, or its job id is taken on this queue (which: the step's job
-- id). Nothing is written unless OK.
--
-- Events (lib/events.lua, unless the queue turned them off): enqueued
-- (each new leaf of this queue).
local seq_key, pending_key, delayed_key, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, fid, parent, children = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local n = tonumber(ARGV[5])
local now = server_now()
local fk = prefix .. 'flow:' .. fid
local f = rcall('HMGET', fk, 'nodes', 'ct', 'w:' .. parent)
if not f[1] then return {now, CODE.NOT_FOUND, '', 0} end
local names = {}
for _, name in ipairs(cut(f[1], '\31')) do names[name] = true end
if not names[parent] then return {now, CODE.NOT_FOUND, parent, 0} end
if not f[3] then return {now, CODE.FINISHED, parent, 0} end
local added = {}
for j = 0, n - 1 do
  local name = ARGV[6 + j * 10]
  local id = fid .. ':' .. name
  if names[name] or (ARGV[6 + j * 10 + 9] == '' and rcall('EXISTS', prefix .. 'job:' .. id) == 1) then
    return {now, CODE.EXISTS, id, 0}
  end
  added[#added + 1] = name
end
rcall('HSET', fk, 'nodes', f[1] .. '\31' .. table.concat(added, '\31'))
rcall('HINCRBY', fk, 'n', n)
rcall('HINCRBY', fk, 'left', n)
rcall('HSET', fk, 'k:' .. parent, rcall('HGET', fk, 'k:' .. parent) .. '\30' .. children)
rcall('HINCRBY', fk, 'w:' .. parent, #cut(children, '\30'))
local sent = flow_put_nodes(prefix, {seq = seq_key, pending = pending_key, delayed = delayed_key, wake = wake_key},
  fk, fid, f[2] or '', ARGV, 6, n, now)
return {now, CODE.OK, '', sent}
