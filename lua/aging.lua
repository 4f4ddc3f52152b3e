-- aging: reads or sets the queue's priority aging, `ag` in its meta hash:
-- how many ms of waiting are worth one priority level (lib/keyspace.lua
-- pending_score). Scores with and without aging do not compare, so it is
-- changed only while the queue holds no pending, delayed or active job.
--
-- KEYS[1] meta (hash)  KEYS[2] pending (zset)  KEYS[3] delayed (zset)  KEYS[4] active (zset)
-- ARGV[1] aging  "get"; ms per level (1 to 3600000); "" turns it off
--
-- REPLY: {code:code, aging:int, jobs:int}
-- code OK (set, or read) or BUSY (jobs there: nothing changed); aging the
-- setting now (0 for none); jobs the pending, delayed and active jobs.
local meta, pending, delayed, active = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local cur = tonumber(rcall('HGET', meta, 'ag')) or 0
local jobs = rcall('ZCARD', pending) + rcall('ZCARD', delayed) + rcall('ZCARD', active)
if ARGV[1] == 'get' then return {CODE.OK, cur, jobs} end
local want = tonumber(ARGV[1]) or 0
if want == cur then return {CODE.OK, cur, jobs} end
if jobs > 0 then return {CODE.BUSY, cur, jobs} end
if want > 0 then rcall('HSET', meta, 'ag', ARGV[1]) else rcall('HDEL', meta, 'ag') end
return {CODE.OK, want, jobs}
