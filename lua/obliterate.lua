-- obliterate: one bounded step of deleting every key of a queue.
--
-- KEYS[1] active (zset)  KEYS[2] meta (hash)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] cursor  SCAN cursor ("0" to start)
-- ARGV[3] count   COUNT hint per step
-- ARGV[4] force   "1" to go on while jobs are active
--
-- The first step (cursor "0") refuses while jobs are leased unless forced,
-- and pauses the queue, so consumers lease nothing more while the keys go.
-- Each step SCANs for the queue's keys and deletes them, except meta
-- (which holds the pause); the last step (the SCAN's end) deletes meta.
-- Returns {code, next_cursor, deleted, active}: OK, or BUSY (nothing
-- deleted) when `active` jobs are leased and the call is not forced.
local active_key, meta_key = KEYS[1], KEYS[2]
local prefix, cursor, count, force = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'
if cursor == '0' then
  local active = rcall('ZCARD', active_key)
  if active > 0 and not force then return {CODE.BUSY, '0', 0, active} end
  rcall('HSET', meta_key, 'paused', '1')
end
-- The prefix holds the queue name, which may contain glob characters:
-- escape them, and still compare each key's prefix as a plain string.
local pattern = string.gsub(prefix, '[%*%?%[%]\\]', '\\%0') .. '*'
local r = rcall('SCAN', cursor, 'MATCH', pattern, 'COUNT', count)
local doomed = {}
for _, key in ipairs(r[2]) do
  if string.sub(key, 1, #prefix) == prefix and key ~= meta_key then doomed[#doomed + 1] = key end
end
if #doomed > 0 then rcall('DEL', unpack(doomed)) end
local deleted = #doomed
if r[1] == '0' then deleted = deleted + rcall('DEL', meta_key) end
return {CODE.OK, r[1], deleted, 0}
