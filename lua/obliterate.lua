-- obliterate: one bounded step of deleting every key of a queue.
--
-- KEYS[1] active (zset)  KEYS[2] meta (hash)
-- KEYS[3..] the queue's other own keys (every fixed key src/keys.rs names:
--           the state sets, wake list, counters)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] cursor  "0" to start, then the cursor the previous step returned
-- ARGV[3] count   the most records fenced, or the COUNT hint of SCAN, per step
-- ARGV[4] force   "1" to go on while jobs are active
--
-- The first step (cursor "0") refuses while jobs are leased unless forced,
-- and pauses the queue, so no job is leased again while the keys go, and
-- marks it as going (`ob`, see lib/keyspace.lua obliterating), so no
-- promotion, hand retry, sweep or schedule writes meanwhile. Then:
-- 1. Fence (cursor "f"): the leased jobs' records are deleted, `count` a
--    step, with their entries in active, until no job is active. From then
--    every settlement, renewal, progress report and effect of a lease held
--    before answers NOT_FOUND and writes nothing. (The first step fences
--    too.)
-- 2. Homes (cursor "h" and SCAN's cursor; only on a queue that ever had a
--    flow or batch, meta `fl`/`bt`): each step SCANs the job records for
--    steps and members of other queues' flows and batches (`fh`, `bh`)
--    that have not ended, and pushes each one's end, "removed", onto the
--    outbox for its home (as remove.lua would), so no parent or batch
--    there waits for good on a job that is gone. Leased ones are told in
--    the fence, before their records go. The caller relays the outbox
--    when this phase is done (src/admin/lifecycle.rs), before the last
--    step deletes it. The first step drops the outbox's messages that
--    would make a job on another queue (`m`, `n`: steps and members of
--    this queue's own flows and batches, which go with it) and keeps the
--    rest (ends for other homes, cancels).
-- 3. Scan (cursor "s" and SCAN's cursor): each step SCANs for the queue's
--    keys and deletes them, except the queue's own keys in KEYS. What may
--    still write while the steps run (a reaper promoting due delayed jobs,
--    an operator's retry_failed, the sweep) writes only those and the
--    records, never a key that was not there before; so deleting the KEYS
--    in the last step (the SCAN's end), with UNLINK to free a big set off
--    the server's main thread, leaves no key behind. Producers must stop
--    first: a job enqueued while this runs may survive it.
--
-- REPLY: {code:code, next_cursor:str, deleted:int, active:int}
-- code OK (next_cursor "0" once done), or BUSY (nothing deleted) when
-- `active` jobs are leased and the call is not forced.
local active_key, meta_key = KEYS[1], KEYS[2]
local prefix, cursor, count, force = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local now = server_now()
-- a queue that never had a flow or batch holds no job of another's
local groups = flows_on(prefix) or batches_on(prefix)

local ENDED = {completed = true, failed = true, cancelled = true, expired = true}

-- Tells the home of job record `jk` (a step or member of another queue's
-- flow or batch that has not ended) that it ended "removed".
local function tell_home(jk)
  -- no record, or a key of another type under the job pattern: nothing to tell
  if rcall('TYPE', jk)['ok'] ~= 'hash' then return end
  local r = rcall('HMGET', jk, 'st', 'bh', 'fh')
  if not r[1] or ENDED[r[1]] then return end
  if r[2] then batch_member_done(prefix, jk, 'removed', now) end
  if r[3] then flow_job_done(nil, prefix, nil, jk, string.sub(jk, #prefix + 5), 'removed', nil, now) end
end

if cursor == '0' then
  local active = rcall('ZCARD', active_key)
  if active > 0 and not force then return {CODE.BUSY, '0', 0, active} end
  rcall('HSET', meta_key, 'paused', '1', 'ob', '1')
  if groups then
    local outbox = prefix .. 'outbox'
    local kept = {}
    for _, m in ipairs(rcall('LRANGE', outbox, 0, -1)) do
      local at = string.find(m, '\30', 1, true)
      local f = at and message_fields(string.sub(m, at + 1))
      if not (f and (f[1] == 'm' or f[1] == 'n')) then kept[#kept + 1] = m end
    end
    rcall('DEL', outbox)
    for i = 1, #kept, 1000 do rcall('RPUSH', outbox, unpack(kept, i, math.min(i + 999, #kept))) end
  end
  cursor = 'f'
end

if cursor == 'f' then
  local popped = rcall('ZPOPMIN', active_key, count)
  local doomed = {}
  for i = 1, #popped, 2 do doomed[#doomed + 1] = prefix .. 'job:' .. popped[i] end
  if groups then
    for _, jk in ipairs(doomed) do tell_home(jk) end
  end
  local deleted = 0
  if #doomed > 0 then deleted = rcall('DEL', unpack(doomed)) end
  if rcall('EXISTS', active_key) == 1 then return {CODE.OK, 'f', deleted, 0} end
  -- Popping its last entry deleted the active set: one more key gone.
  if #popped > 0 then deleted = deleted + 1 end
  return {CODE.OK, groups and 'h0' or 's0', deleted, 0}
end

if string.sub(cursor, 1, 1) == 'h' then
  local r = rcall('SCAN', string.sub(cursor, 2), 'MATCH', match_prefix(prefix .. 'job:'), 'COUNT', count)
  for _, jk in ipairs(r[2]) do
    if string.sub(jk, 1, #prefix + 4) == prefix .. 'job:' then tell_home(jk) end
  end
  if r[1] ~= '0' then return {CODE.OK, 'h' .. r[1], 0, 0} end
  return {CODE.OK, 's0', 0, 0}
end

local own = {}
for _, key in ipairs(KEYS) do own[key] = true end
local r = rcall('SCAN', string.sub(cursor, 2), 'MATCH', match_prefix(prefix), 'COUNT', count)
local doomed = {}
for _, key in ipairs(r[2]) do
  if string.sub(key, 1, #prefix) == prefix and not own[key] then doomed[#doomed + 1] = key end
end
local deleted = 0
if #doomed > 0 then deleted = rcall('DEL', unpack(doomed)) end
if r[1] ~= '0' then return {CODE.OK, 's' .. r[1], deleted, 0} end
return {CODE.OK, '0', deleted + rcall('UNLINK', unpack(KEYS)), 0}
