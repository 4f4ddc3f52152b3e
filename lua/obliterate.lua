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
-- 2. Scan (cursor "s" and SCAN's cursor): each step SCANs for the queue's
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
if cursor == '0' then
  local active = rcall('ZCARD', active_key)
  if active > 0 and not force then return {CODE.BUSY, '0', 0, active} end
  rcall('HSET', meta_key, 'paused', '1', 'ob', '1')
  cursor = 'f'
end

if cursor == 'f' then
  local popped = rcall('ZPOPMIN', active_key, count)
  local doomed = {}
  for i = 1, #popped, 2 do doomed[#doomed + 1] = prefix .. 'job:' .. popped[i] end
  local deleted = 0
  if #doomed > 0 then deleted = rcall('DEL', unpack(doomed)) end
  if rcall('EXISTS', active_key) == 1 then return {CODE.OK, 'f', deleted, 0} end
  -- Popping its last entry deleted the active set: one more key gone.
  if #popped > 0 then deleted = deleted + 1 end
  return {CODE.OK, 's0', deleted, 0}
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
