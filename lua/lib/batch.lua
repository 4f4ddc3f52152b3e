-- lib/batch.lua: batches, groups of jobs whose end enqueues callback
-- jobs of the batch's queue (batch_open.lua opens one, enqueue.lua adds
-- members of its queue, batch_join.lua members of other queues,
-- batch_close.lua closes it). A batch is the hash PREFIX:{Q}:batch:BID
-- (lua/README.md, "Batch hash"); a member's record names it in `bt` and
-- is counted once, at its first end (`bf`). The script that counts the
-- last member of a closed batch enqueues its callbacks, so each is
-- enqueued once, in the same atomic call as the count that fires it.
--
-- A member on another queue R (another slot, on a Cluster perhaps another
-- master) is counted in at home by batch_join.lua, which leaves a message
-- that makes it on R (`m`, once, by its receipt in R's inbox) and keeps
-- `m:NUMBER` in the batch hash until its end comes back by message (`e`,
-- counted once: the call that takes `m:NUMBER` away counts it). A member
-- added again under the id of one already made (a retried add) un-joins
-- (`u`); one whose id another job holds on R counts failed. Its record names its home in
-- `bh`: the home queue, the batch's `ct` and its number, so a message of
-- an older batch of the same id changes nothing.
--
-- Needs: base (rcall, hfields, int_s, now_str, cut), keyspace (wake), meta (queue_meta, queue_aging),
-- payload (payload_split), mint (minter, new_job, store_job), outbox (outbox_push, receipt_new).

-- Whether a batch was ever opened on the queue (meta `bt`, read with the
-- queue's settings): a queue that never had one reads no member field.
local function batches_on(prefix)
  return queue_meta(prefix)[10] == '1'
end

-- Each callback's fields in the batch hash: payload, kind, fired at.
local CALLBACK = {success = {'sp', 'sk', 'sf'}, complete = {'cp', 'ck', 'cf'}, death = {'dp', 'dk', 'df'}}

-- Enqueues callback `which` of batch `bid` (hash `bk`) if it has one and it
-- has not fired: an ordinary pending job of the queue, id "BID:WHICH",
-- with the callback's payload and kind. The fired mark and the id both
-- keep it to once. Returns true when a job was enqueued.
local function fire_callback(prefix, bk, bid, which, now)
  local f = CALLBACK[which]
  local cb = rcall('HMGET', bk, f[1], f[2], f[3])
  if not cb[1] or cb[3] then return false end
  rcall('HSET', bk, f[3], now_str(now))
  local id = bid .. ':' .. which
  if rcall('EXISTS', prefix .. 'job:' .. id) == 1 then return false end
  local mint = minter(prefix .. 'seq')
  local jid, score, h = new_job(mint(1), id, cb[1], 0, '', '', nil, now, cb[2] or '', '', payload_split(prefix),
    queue_aging(prefix), 0)
  store_job(prefix, prefix .. 'pending', prefix .. 'delayed', jid, score, nil, h, '', nil)
  wake(prefix .. 'wake', 1)
  return true
end

-- A closed batch (hash `bk`, its fields n c f x cl kp in `b`) whose members
-- have all ended: success when every one completed, then complete; its
-- hash is kept `kp` ms more for status reads.
local function batch_end(prefix, bk, bid, b, now)
  local n, c = tonumber(b[1]) or 0, tonumber(b[2]) or 0
  if not b[5] or c + (tonumber(b[3]) or 0) + (tonumber(b[4]) or 0) < n then return end
  if c == n then fire_callback(prefix, bk, bid, 'success', now) end
  fire_callback(prefix, bk, bid, 'complete', now)
  if rcall('HSETNX', bk, 'fin', now_str(now)) == 1 then
    local kp = tonumber(b[6])
    if kp and kp > 0 then rcall('PEXPIRE', bk, kp) end
  end
end

-- The fields batch_end reads.
local function batch_fields(bk)
  return hfields(bk, 'n', 'c', 'f', 'x', 'cl', 'kp')
end

-- Counts a member of batch `bid` (hash `bk`) that ended in `state`
-- (completed, failed, cancelled, expired, or removed); one that failed
-- for good fires the death callback. A batch whose hash is gone (expired
-- after its end) changes nothing.
local function batch_count(prefix, bk, bid, state, now)
  local b = batch_fields(bk)
  if not (b and b[1]) then return end
  local at = state == 'completed' and 2 or (state == 'failed' and 3 or 4)
  b[at] = int_s((tonumber(b[at]) or 0) + 1)
  rcall('HINCRBY', bk, ({'', 'c', 'f', 'x'})[at], 1)
  if state == 'failed' then fire_callback(prefix, bk, bid, 'death', now) end
  batch_end(prefix, bk, bid, b, now)
end

-- Counts job `jk`, which ended in `state`, toward its batch if it is a
-- member not counted yet: here, or for a member of a batch of another
-- queue (`bh`), by a message to that queue.
local function batch_member_done(prefix, jk, state, now)
  local m = hfields(jk, 'bt', 'bf', 'bh')
  if not (m and m[1]) or m[2] then return end
  rcall('HSET', jk, 'bf', '1')
  if m[3] then
    local home = cut(m[3], '\31')
    outbox_push(prefix, home[1], {'e', m[1], home[2] or '', home[3] or '', state})
    return
  end
  batch_count(prefix, prefix .. 'batch:' .. m[1], m[1], state, now)
end

-- Applies message `m` (lib/outbox.lua message_fields) of a batch that
-- spans queues: "m" makes a member here for the batch of another queue
-- (once, by its receipt and its record's `bh`; an id the batch's own
-- member holds answers "u", one another job holds "e" failed), "e"
-- counts the end of a member of another queue toward its batch here, "u"
-- un-joins one added twice under its id. Returns false for a message it does not
-- know. Members made pending are counted in `moves.woken`.
local function batch_deliver(moves, prefix, m, now)
  local kind, bid, ct, num = m[1], m[2], m[3], m[4]
  if kind == 'e' or kind == 'u' then
    if #m < 4 or (kind == 'e' and #m < 5) then return false end
    local bk = prefix .. 'batch:' .. bid
    -- another batch of the same id, or one gone: nothing to tell; a
    -- member counted already (a message delivered twice): nothing either
    if rcall('HGET', bk, 'ct') ~= ct or rcall('HDEL', bk, 'm:' .. num) == 0 then return true end
    if kind == 'e' then
      batch_count(prefix, bk, bid, m[5], now)
    else
      rcall('HINCRBY', bk, 'n', -1)
      local b = batch_fields(bk)
      if b and b[1] then batch_end(prefix, bk, bid, b, now) end
    end
    return true
  end
  if kind ~= 'm' or #m < 13 then return false end
  local home, id = m[5], m[6]
  if not receipt_new(moves, prefix, table.concat({home, bid, ct, num, 'b'}, '\31'), now) then return true end
  if not moves.batches_marked then
    moves.batches_marked = true
    rcall('HSET', prefix .. 'meta', 'bt', '1')
  end
  local held = hfields(prefix .. 'job:' .. id, 'st', 'bt', 'bh')
  if held and held[1] then
    local mine = home .. '\31' .. ct .. '\31'
    if held[3] == mine .. num then
      -- this very member, its receipt gone (a delivery more than a day
      -- late): nothing to do
    elseif held[2] == bid and held[3] and string.sub(held[3], 1, #mine) == mine then
      -- the batch's own member added again under its id (a retried add)
      outbox_push(prefix, home, {'u', bid, ct, num})
    else
      -- another job holds the id: the member cannot run, and counts failed
      outbox_push(prefix, home, {'e', bid, ct, num, 'failed'})
    end
    return true
  end
  local due = tonumber(m[13])
  if due and due <= now then due = nil end
  moves.mint = moves.mint or minter(prefix .. 'seq')
  local jid, score, h = new_job(moves.mint(moves.left or 1), id, m[7], tonumber(m[8]) or 0, m[9], m[10], due, now,
    m[11], m[12], payload_split(prefix), queue_aging(prefix), 0)
  h[#h + 1] = 'bt'; h[#h + 1] = bid
  h[#h + 1] = 'bh'; h[#h + 1] = table.concat({home, ct, num}, '\31')
  if store_job(prefix, prefix .. 'pending', prefix .. 'delayed', jid, score, due, h, m[10], nil) then
    moves.woken = (moves.woken or 0) + 1
  end
  return true
end
