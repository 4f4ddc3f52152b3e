-- lib/batch.lua: batches, groups of jobs of one queue whose end enqueues
-- callback jobs (batch_open.lua opens one, enqueue.lua adds members,
-- batch_close.lua closes it). A batch is the hash PREFIX:{Q}:batch:BID
-- (lua/README.md, "Batch hash"); a member's record names it in `bt` and
-- is counted once, at its first end (`bf`). The script that counts the
-- last member of a closed batch enqueues its callbacks, so each is
-- enqueued once, in the same atomic call as the count that fires it.
--
-- Needs: base (rcall, hfields, int_s, now_str), keyspace (wake), meta (queue_meta, queue_aging),
-- payload (payload_split), mint (minter, new_job, store_job).

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

-- Counts job `jk`, which ended in `state` (completed, failed, cancelled,
-- expired, or removed), toward its batch if it is a member not counted
-- yet; a member that failed for good fires the death callback. A member
-- of a batch whose hash is gone (expired after its end) changes nothing.
local function batch_member_done(prefix, jk, state, now)
  local m = hfields(jk, 'bt', 'bf')
  if not (m and m[1]) or m[2] then return end
  rcall('HSET', jk, 'bf', '1')
  local bid = m[1]
  local bk = prefix .. 'batch:' .. bid
  local b = batch_fields(bk)
  if not (b and b[1]) then return end
  local at = state == 'completed' and 2 or (state == 'failed' and 3 or 4)
  b[at] = int_s((tonumber(b[at]) or 0) + 1)
  rcall('HINCRBY', bk, ({'', 'c', 'f', 'x'})[at], 1)
  if state == 'failed' then fire_callback(prefix, bk, bid, 'death', now) end
  batch_end(prefix, bk, bid, b, now)
end
