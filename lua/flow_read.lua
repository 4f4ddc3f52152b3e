-- flow_read: reads a flow (lib/flow.lua): every node's state, or the ends
-- of one node's children (what its handler reads).
--
-- KEYS[1] flow    the flow's hash PREFIX:{Q}:flow:ID
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] id      the flow
-- ARGV[3] node    "" for every node's state; else the node whose children
--                 are read
--
-- REPLY: {now:int, code:code, (name:str, state:str, detail:str)*}
-- NOT_FOUND no such flow (or no such node), and nothing more. OK, then
-- with no node one group per node, in the order they were added: state
-- "waiting" (for children), a job's state (pending, delayed, active) or
-- the state it ended in (completed, failed, cancelled, expired, removed),
-- "" when its job is gone without an end (the queue was obliterated),
-- then for a node of another queue "@" and that queue's name (its state
-- "" while it has not ended and does not wait: its job's state is read on
-- its queue), and as detail its children's names joined by "\31". With a node one group per child, in its order: its name, the
-- state it ended in ("" while it has not) and the detail: the completed
-- job's result (JSON, "" for none), else its error; a child whose edge
-- drops it when it fails (policy d) and that did not complete is left out.
local fk = KEYS[1]
local prefix, fid, node = ARGV[1], ARGV[2], ARGV[3]
local now = server_now()
local nodes = rcall('HGET', fk, 'nodes')
if not nodes then return {now, CODE.NOT_FOUND} end
local ENDED = {c = 'completed', f = 'failed', x = 'cancelled', e = 'expired', r = 'removed'}
local out = {now, CODE.OK}
if node == '' then
  for _, name in ipairs(cut(nodes, '\31')) do
    local r = rcall('HGET', fk, 'r:' .. name)
    local st
    local q = rcall('HGET', fk, 'q:' .. name)
    if r then
      st = ENDED[string.sub(r, 1, 1)] or ''
    elseif rcall('HEXISTS', fk, 'w:' .. name) == 1 then
      st = 'waiting'
    elseif q then
      -- its job is on its own queue, where the caller reads its state
      st = ''
    else
      local job = hfields(prefix .. 'job:' .. fid .. ':' .. name, 'st')
      st = job and job[1] or ''
    end
    if q then st = st .. '@' .. q end
    -- its children's names, for a tree of the flow
    local kids = {}
    for _, edge in ipairs(cut(rcall('HGET', fk, 'k:' .. name), '\30')) do kids[#kids + 1] = cut(edge, '\31')[1] end
    out[#out + 1] = name
    out[#out + 1] = st
    out[#out + 1] = table.concat(kids, '\31')
  end
  return out
end
local known = false
for _, name in ipairs(cut(nodes, '\31')) do
  if name == node then known = true; break end
end
if not known then return {now, CODE.NOT_FOUND} end
local kids = rcall('HGET', fk, 'k:' .. node)
for _, edge in ipairs(cut(kids, '\30')) do
  local ce = cut(edge, '\31')
  local r = rcall('HGET', fk, 'r:' .. ce[1])
  local st, detail = '', ''
  if r then st, detail = ENDED[string.sub(r, 1, 1)] or '', string.sub(r, 2) end
  if not (ce[2] == 'd' and st ~= '' and st ~= 'completed') then
    out[#out + 1] = ce[1]
    out[#out + 1] = st
    out[#out + 1] = detail
  end
end
return out
