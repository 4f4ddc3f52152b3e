-- lib/flow.lua: flows, graphs of jobs in which a job (a parent) waits
-- for others (its children) to end before it is enqueued (flow_add.lua
-- adds a flow, flow_cancel.lua cancels it, flow_read.lua reads it,
-- deliver.lua applies a message from another queue). A flow is the
-- hash PREFIX:{H}:flow:FID of its home queue H (lua/README.md, "Flow
-- hash"); its jobs have the ids FID:NAME and name their flow in `fl`. A
-- parent is no job while it waits: the flow hash holds its spec and how
-- many children it still waits for, and the script that ends the last of
-- them enqueues it in the same atomic call, so it is enqueued once. Each
-- node's end is written once (`r:NAME`), by the call that ended its job,
-- with its result or error for its parents to read.
--
-- A node on another queue R (`q:NAME`; on a Cluster another slot, which
-- no script may touch) is reached by message: the home's call that
-- releases or ends it pushes a message onto the home's `outbox`, and its
-- job (field `fh`: its home and the flow's `ct`) pushes its end onto R's
-- `outbox` instead of writing the flow (lib/outbox.lua). The relay
-- (src/relay.rs) carries each message to its queue's deliver.lua, at least once, and takes
-- it off the outbox after it was applied; applying is once (a receipt in
-- R's `inbox`, a node's end written once at home) and fenced by the
-- flow's `ct` (a message of an older flow of the same id changes nothing).
--
-- Needs: base (rcall, int_s, now_str, cut), keyspace (wake), meta (queue_meta, queue_aging),
-- payload (payload_split), mint (minter, new_job, store_job, add_all), outbox (own_queue, outbox_push, receipt_new).

-- Whether a flow was ever added to the queue (meta `fl`, read with the
-- queue's settings): a queue that never had one reads no job field.
local function flows_on(prefix)
  return queue_meta(prefix)[11] == '1'
end

-- The letter `r:NAME` starts with, by the state the node ended in.
local OUTCOME = {completed = 'c', failed = 'f', cancelled = 'x', expired = 'e', removed = 'r'}

-- Writes the end of node `name` of flow hash `fk` (outcome letter and
-- detail) unless one is written: counts it off the flow's `left`, whose
-- last one starts the flow's keep time. Returns true when written.
local function flow_mark(fk, name, letter, detail)
  if rcall('HSETNX', fk, 'r:' .. name, letter .. (detail or '')) == 0 then return false end
  if rcall('HINCRBY', fk, 'left', -1) <= 0 then
    local kp = tonumber(rcall('HGET', fk, 'kp'))
    if kp and kp > 0 then rcall('PEXPIRE', fk, kp) end
  end
  return true
end

-- A waiting node's spec (payload, then priority, limits, lane, kind,
-- traceparent, its parents' edges and its queue, nil for the home),
-- taken off the flow hash: it waits no more. A node on another queue
-- keeps its parents' edges in the hash (its end comes back by message).
local function take_spec(fk, name)
  local s = rcall('HMGET', fk, 'sp:' .. name, 'so:' .. name, 'p:' .. name, 'q:' .. name)
  if s[4] then
    rcall('HDEL', fk, 'w:' .. name, 'sp:' .. name, 'so:' .. name)
  else
    rcall('HDEL', fk, 'w:' .. name, 'sp:' .. name, 'so:' .. name, 'p:' .. name)
  end
  local o = cut(s[2] or '', '\31')
  return s[1] or '', tonumber(o[1]) or 0, o[2] or '', o[3] or '', o[4] or '', o[5] or '', s[3] or '', s[4]
end

-- Sends node `name` of flow `fid` (hash `fk`) to its queue `q`, to be
-- made there in `state` (pending, or failed or cancelled with `err`
-- without running) from its spec (deliver.lua); `ct` the flow's
-- creation time, read from the hash when nil.
local function send_node(prefix, fk, fid, name, q, state, err, payload, priority, lm, lane, kind, tp, ct)
  outbox_push(prefix, q, {'n', fid, ct or rcall('HGET', fk, 'ct') or '', name, own_queue(prefix), state, err, payload,
    int_s(priority), lm, lane, kind, tp})
end

-- The fields of a node's job that name its flow and its parents' edges.
local function node_fields(h, fid, parents)
  h[#h + 1] = 'fl'; h[#h + 1] = fid
  if parents ~= '' then h[#h + 1] = 'fp'; h[#h + 1] = parents end
end

-- Enqueues waiting node `name` of flow `fid` (hash `fk`) as the job
-- FID:NAME on pending (a node on another queue: sends it there). Returns
-- true, or false and the node's parents' edges, enqueueing nothing, when
-- another job took that id meanwhile.
local function flow_release(prefix, fk, fid, name, now)
  local payload, priority, lm, lane, kind, tp, parents, q = take_spec(fk, name)
  if q then
    send_node(prefix, fk, fid, name, q, 'pending', '', payload, priority, lm, lane, kind, tp)
    return true
  end
  local id = fid .. ':' .. name
  if rcall('EXISTS', prefix .. 'job:' .. id) == 1 then return false, parents end
  local mint = minter(prefix .. 'seq')
  local jid, score, h = new_job(mint(1), id, payload, priority, lm, lane, nil, now, kind, tp, payload_split(prefix),
    queue_aging(prefix), 0)
  node_fields(h, fid, parents)
  store_job(prefix, prefix .. 'pending', prefix .. 'delayed', jid, score, nil, h, lane, nil)
  wake(prefix .. 'wake', 1)
  return true
end

-- Writes `n` new nodes of flow `fid` (hash `fk`, added at `ct`), 10
-- fields each in `argv` from index `at` on (as flow_add.lua's `nodes`
-- lists them): a node that waits for children gets its spec, its count
-- and its edges in the hash; a leaf becomes the pending job FID:NAME, or
-- is sent to its queue. `k` holds the queue's seq, pending, delayed and
-- wake keys. Returns how many messages it pushed onto the outbox.
local function flow_put_nodes(prefix, k, fk, fid, ct, argv, at, n, now)
  local mint = minter(k.seq)
  local split = payload_split(prefix)
  local aging = queue_aging(prefix)
  local adds = {pending = {}, delayed = {}}
  local woken, sent = 0, 0
  for j = 0, n - 1 do
    local b = at + j * 10
    local name, payload, priority, lm = argv[b], argv[b + 1], argv[b + 2], argv[b + 3]
    local lane, kind, tp, children, parents = argv[b + 4], argv[b + 5], argv[b + 6], argv[b + 7], argv[b + 8]
    local q = argv[b + 9]
    if q ~= '' then
      local there = {'q:' .. name, q}
      if parents ~= '' then there[#there + 1] = 'p:' .. name; there[#there + 1] = parents end
      rcall('HSET', fk, unpack(there))
    end
    if children ~= '' then
      -- (the flow hash's fields, not a job's)
      local waits = {'k:' .. name, children, 'w:' .. name, int_s(#cut(children, '\30')), 'sp:' .. name, payload,
        'so:' .. name, table.concat({priority, lm, lane, kind, tp}, '\31')}
      if parents ~= '' then waits[#waits + 1] = 'p:' .. name; waits[#waits + 1] = parents end
      rcall('HSET', fk, unpack(waits))
    elseif q ~= '' then
      send_node(prefix, fk, fid, name, q, 'pending', '', payload, tonumber(priority), lm, lane, kind, tp, ct)
      sent = sent + 1
    else
      local jid, score, h = new_job(mint(n - j), fid .. ':' .. name, payload, tonumber(priority), lm, lane, nil, now,
        kind, tp, split, aging, j)
      node_fields(h, fid, parents)
      if store_job(prefix, k.pending, k.delayed, jid, score, nil, h, lane, adds) then woken = woken + 1 end
    end
  end
  add_all(adds, k.pending, k.delayed)
  if woken > 0 then wake(k.wake, woken) end
  return sent
end

-- Ends waiting node `name` of flow `fid` (hash `fk`) in `state` (failed
-- or cancelled) without running it: its record is written in that state
-- with error `err` and goes onto the state's set through `moves` (none
-- with retention `keep` of 0 records, or when another job holds its id;
-- a node on another queue is sent there to be written). Returns its
-- parents' edges.
local function flow_end_waiting(moves, prefix, keep, fk, fid, name, state, err, now)
  local payload, priority, lm, lane, kind, tp, parents, q = take_spec(fk, name)
  if q then
    send_node(prefix, fk, fid, name, q, state, err, payload, priority, lm, lane, kind, tp)
    return parents
  end
  local id = fid .. ':' .. name
  local jk = prefix .. 'job:' .. id
  if keep.n == 0 or rcall('EXISTS', jk) == 1 then return parents end
  local _, _, h = new_job(0, id, payload, priority, lm, lane, nil, now, kind, tp, payload_split(prefix), nil, 0)
  h[2] = state
  local finished = now_str(now)
  h[#h + 1] = 'ft'; h[#h + 1] = finished
  h[#h + 1] = 'err'; h[#h + 1] = err
  node_fields(h, fid, parents)
  rcall('HSET', jk, unpack(h))
  local into = moves[state]
  into[#into + 1] = finished
  into[#into + 1] = id
  return parents
end

-- Node `name` of flow `fid` ended in `state` with `detail` (a completed
-- job's result, else its error); `parents` are its parents' edges. Its
-- end is written once, and each parent still waiting learns of it along
-- its edge's policy (f: a child that did not complete fails the parent;
-- r: the parent runs and reads the failure; d: the parent runs without
-- it). A parent that fails ends its own parents' waits in turn, through
-- the same work list, not recursion. The common end, a child completing,
-- costs one HINCRBY per parent: a parent that no longer waits has no
-- `w:` field, so the count it answers is below 0, and the field it made
-- is taken away again.
local function flow_node_done(moves, prefix, keep, fid, name, state, detail, parents, now)
  local fk = prefix .. 'flow:' .. fid
  -- a flow whose record is gone (its keep time passed; the queue was
  -- obliterated) learns nothing, and is not made again by the writes below
  if rcall('EXISTS', fk) == 0 then return end
  local todo = {{name, state, detail, parents}}
  local i = 1
  while i <= #todo do
    local nm, st, dt, ps = todo[i][1], todo[i][2], todo[i][3], todo[i][4]
    i = i + 1
    if flow_mark(fk, nm, OUTCOME[st] or 'r', dt) then
      for _, edge in ipairs(cut(ps, '\30')) do
        local pe = cut(edge, '\31')
        local parent, policy = pe[1], pe[2]
        local wk = 'w:' .. parent
        if st == 'completed' or policy ~= 'f' then
          local left = rcall('HINCRBY', fk, wk, -1)
          if left < 0 then
            rcall('HDEL', fk, wk)
          elseif left == 0 then
            local ok, its = flow_release(prefix, fk, fid, parent, now)
            if not ok then todo[#todo + 1] = {parent, 'failed', 'its job id was taken by another job', its} end
          end
        elseif rcall('HEXISTS', fk, wk) == 1 then
          local err = 'child ' .. nm .. ' ' .. st
          todo[#todo + 1] = {parent, 'failed', err, flow_end_waiting(moves, prefix, keep, fk, fid, parent, 'failed', err, now)}
        end
      end
    end
  end
end

-- Job `id` (record `jk`) ended in `state` with `detail`: if it is a node
-- of a flow (`fl`), its end reaches the flow (flow_node_done), or, for a
-- node whose flow's home is another queue (`fh`), goes there by message.
local function flow_job_done(moves, prefix, keep, jk, id, state, detail, now)
  local f = rcall('HMGET', jk, 'fl', 'fp', 'fh')
  local fid = f[1]
  if not fid then return end
  local name = string.sub(id, #fid + 2)
  if f[3] then
    local home = cut(f[3], '\31')
    outbox_push(prefix, home[1], {'d', fid, home[2] or '', name, state, detail or ''})
    -- told: the sweep tells the end of one ended without it (an older
    -- process's settlement)
    rcall('HSET', jk, 'fd', '1')
    return
  end
  flow_node_done(moves, prefix, keep, fid, name, state, detail, f[2] or '', now)
end

-- Applies message `m` (message_fields) from another queue to this one's
-- flows: a node to make here ("n"), a node's end to write into its flow
-- here ("d"; its parents learn of it as from a job of this queue), or a
-- node to cancel or remove here ("c" and "x" are deliver.lua's).
-- Returns false for a message it does not know. Nodes made pending are
-- counted in `moves.woken`, for the caller's one wake-up; `moves.left`
-- (the messages of the call from this one on) lets one INCRBY number them.
local function flow_deliver_node(moves, prefix, keep, m, now)
  local kind, fid, ct, name = m[1], m[2], m[3], m[4]
  if kind == 'd' then
    local fk = prefix .. 'flow:' .. fid
    local f = rcall('HMGET', fk, 'ct', 'p:' .. name, 'q:' .. name)
    -- the flow is gone, or is another of the same id: nothing to tell
    if f[1] ~= ct or not f[3] then return true end
    flow_node_done(moves, prefix, keep, fid, name, m[5], m[6], f[2] or '', now)
    return true
  end
  if kind ~= 'n' or #m < 13 then return false end
  local home, state, err = m[5], m[6], m[7]
  local receipt = table.concat({home, fid, ct, name}, '\31')
  if not receipt_new(moves, prefix, receipt, now) then return true end
  if not moves.flows_marked then
    moves.flows_marked = true
    rcall('HSET', prefix .. 'meta', 'fl', '1')
  end
  local id = fid .. ':' .. name
  local jk = prefix .. 'job:' .. id
  if rcall('EXISTS', jk) == 1 then
    if state == 'pending' then
      outbox_push(prefix, home, {'d', fid, ct, name, 'failed', 'its job id was taken by another job'})
    end
    return true
  end
  local payload, priority, lm, lane, kd, tp = m[8], tonumber(m[9]) or 0, m[10], m[11], m[12], m[13]
  local fh = home .. '\31' .. ct
  if state == 'pending' then
    -- one minter per call, taking numbers for the messages still to come
    moves.mint = moves.mint or minter(prefix .. 'seq')
    local jid, score, h = new_job(moves.mint(moves.left or 1), id, payload, priority, lm, lane, nil, now, kd, tp,
      payload_split(prefix), queue_aging(prefix), 0)
    h[#h + 1] = 'fl'; h[#h + 1] = fid
    h[#h + 1] = 'fh'; h[#h + 1] = fh
    store_job(prefix, prefix .. 'pending', prefix .. 'delayed', jid, score, nil, h, lane, nil)
    moves.woken = (moves.woken or 0) + 1
  elseif keep.n ~= 0 and moves[state] then
    local _, _, h = new_job(0, id, payload, priority, lm, lane, nil, now, kd, tp, payload_split(prefix), nil, 0)
    h[2] = state
    local finished = now_str(now)
    h[#h + 1] = 'ft'; h[#h + 1] = finished
    h[#h + 1] = 'err'; h[#h + 1] = err
    h[#h + 1] = 'fl'; h[#h + 1] = fid
    h[#h + 1] = 'fh'; h[#h + 1] = fh
    rcall('HSET', jk, unpack(h))
    local into = moves[state]
    into[#into + 1] = finished
    into[#into + 1] = id
  end
  return true
end
