-- flow_add: adds a flow (lib/flow.lua) in one atomic call: its hash, its
-- leaves (jobs that wait for none) on pending, each holding its parents'
-- edges (`fp`), and for each parent its spec, its edges and the count of
-- children it waits for. A leaf on another queue is sent there through
-- the outbox (its parents' edges stay in the hash). The caller has checked
-- the graph: names unique, every edge between two of its nodes, no cycle.
--
-- KEYS[1] seq      mint counter (a minted flow id is its next number)
-- KEYS[2] pending  (zset)   KEYS[3] delayed (zset)   KEYS[4] wake (list)
-- KEYS[5] meta     (hash: `fl` marks the queue as one that has flows)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] id      "" to mint one (N, or N@Q for a flow with nodes on other queues)
-- ARGV[3] keep    ms the hash stays after every node ended (0: until
--                 deleted with the queue)
-- ARGV[4] nodes   number of nodes N, then 10 fields per node:
--   name        the node's name; its job's id is ID:NAME
--   payload     JSON bytes (encoded as the queue encodes payloads)
--   priority    integer -128..127
--   limits      the job's `lm` field ("" for the defaults)
--   lane        "" for none
--   kind        "" for none
--   traceparent "" for none
--   children    "" for a leaf; else its children, "CHILD\31POLICY" each,
--               joined by "\30" (POLICY: f, r or d; lib/flow.lua)
--   parents     "" for none; else "PARENT\31POLICY" each, joined by "\30"
--   queue       "" for this queue; else the name of the node's queue (of
--               the same prefix)
--
-- REPLY: {now:int, code:code, id:str, sent:int}
-- OK added (id: the flow's; sent: messages pushed onto the outbox);
-- EXISTS the flow's id, or a job id of a node of this queue, is taken (id:
-- which one; nothing written). A node of another queue whose id is taken
-- there fails when its message arrives (lib/flow.lua flow_deliver_node).
--
-- Events (lib/events.lua, unless the queue turned them off): enqueued
-- (each leaf).
local seq_key, pending_key, delayed_key, wake_key, meta_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, id, keep = ARGV[1], ARGV[2], ARGV[3]
local n = tonumber(ARGV[4])
local now = server_now()
if id == '' then
  id = int_s(rcall('INCR', seq_key))
  -- a flow with nodes on other queues: its id names this queue too, so
  -- flows of two queues that mint the same number do not take each
  -- other's job ids there
  for j = 0, n - 1 do
    if ARGV[5 + j * 10 + 9] ~= '' then
      -- (':' escaped, as a flow id holds none; '%' too, to stay unique)
      id = id .. '@' .. string.gsub(own_queue(prefix), '[%%:]', {['%'] = '%25', [':'] = '%3A'})
      break
    end
  end
end
local fk = prefix .. 'flow:' .. id
if rcall('EXISTS', fk) == 1 then return {now, CODE.EXISTS, id, 0} end
local names = {}
for j = 0, n - 1 do
  local name = ARGV[5 + j * 10]
  if ARGV[5 + j * 10 + 9] == '' and rcall('EXISTS', prefix .. 'job:' .. id .. ':' .. name) == 1 then
    return {now, CODE.EXISTS, id .. ':' .. name, 0}
  end
  names[#names + 1] = name
end
local ct = now_str(now)
rcall('HSET', fk, 'n', int_s(n), 'left', int_s(n), 'ct', ct, 'kp', keep, 'nodes', table.concat(names, '\31'))
local sent = flow_put_nodes(prefix, {seq = seq_key, pending = pending_key, delayed = delayed_key, wake = wake_key},
  fk, id, ct, ARGV, 5, n, now)
rcall('HSET', meta_key, 'fl', '1')
return {now, CODE.OK, id, sent}
