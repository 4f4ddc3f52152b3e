-- schedule_pause: pauses or resumes a cron schedule. A paused schedule
-- holds `ps` (the server ms it was paused at) and sits in the index at
-- NEVER (listed, but never due), so no scheduler looks at it and
-- schedule_fire makes nothing for it (a pass that read it before the pause
-- finds `ps`: STALE); resuming takes `ps` away, moves `lt` (the last tick
-- done) up to now, so the ticks that passed while paused are skipped, not
-- made up, and gives it the look time now.
--
-- KEYS[1] schedules  index (zset)   KEYS[2] schedule  the schedule's hash
-- ARGV[1] name       the schedule's name
-- ARGV[2] paused     "1" to pause, "0" to resume
--
-- REPLY: {code:code, now:int, changed:int}
-- code OK or NOT_FOUND (no such schedule); changed 1 when it was not
-- already in that state.
local index_key, sched_key = KEYS[1], KEYS[2]
local name = ARGV[1]
local now = server_now()
local f = hfields(sched_key, 'ex', 'ps', 'lt')
if not f or not f[1] then return {CODE.NOT_FOUND, now, 0} end
local NEVER = 9007199254740991
if ARGV[2] == '1' then
  rcall('ZADD', index_key, NEVER, name)
  if f[2] then return {CODE.OK, now, 0} end
  rcall('HSET', sched_key, 'ps', int_s(now))
  return {CODE.OK, now, 1}
end
if not f[2] then return {CODE.OK, now, 0} end
rcall('HDEL', sched_key, 'ps')
if (tonumber(f[3]) or 0) < now then rcall('HSET', sched_key, 'lt', int_s(now)) end
rcall('ZADD', index_key, now, name)
return {CODE.OK, now, 1}
