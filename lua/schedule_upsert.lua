-- schedule_upsert: creates a cron schedule, or updates it (src/schedule/).
--
-- KEYS[1] schedules  index (zset): schedule name -> when schedulers next look at it (server ms)
-- KEYS[2] schedule   the schedule's hash
-- ARGV[1] name      the schedule's name (its member in the index)
-- ARGV[2] cron      the cron expression (the caller has parsed it)
-- ARGV[3] tz        the IANA time zone (the caller has looked it up)
-- ARGV[4] payload   JSON bytes each job carries
-- ARGV[5] priority  integer -128..127
-- ARGV[6] limits    the jobs' `lm` field ("" for the defaults; see lib/budget.lua)
-- ARGV[7] missed    the missed-tick policy: "skip" or "latest"
-- ARGV[8] grace     ms: a tick taken more than this after its time is missed
-- ARGV[9] kind      the jobs' kind ("" for none)
--
-- Schedule hash fields: ex, tz, p, pr, lm, mi, gr, kd as above (a schedule
-- stored before kinds has no kd: the same as ""); lt: the last
-- tick done (it made its job, or was passed over as missed), or the time
-- the schedule or its timing was set: schedule_fire takes only ticks after
-- it; ct, ut: created, updated (server ms); nj: jobs made; mt: the latest
-- tick found missed; ps: paused at (server ms, schedule_pause.lua).
--
-- A new schedule starts at TIME: its first tick is the first one after
-- it. An update that changes the expression or the zone moves lt up to
-- TIME (the new timing starts now: no tick before the update is taken
-- under it); any other change keeps lt. Every change puts the schedule's
-- look time at TIME, so schedulers read it again at once (a paused one
-- keeps its place at NEVER until it is resumed). The index
-- member is written before the hash (and schedule_remove deletes the hash
-- first), so a torn write leaves at worst a member without a hash, which
-- schedule_due drops.
--
-- REPLY: {now:int, status:str}
-- status "created", "updated", or "unchanged" (every field already as
-- given: nothing written). A schedule key of another type is not
-- echomq's: an error reply, nothing written.
local index_key, sched_key = KEYS[1], KEYS[2]
local name = ARGV[1]
local fields = {'ex', 'tz', 'p', 'pr', 'lm', 'mi', 'gr', 'kd'}
local now = server_now()
local cur = hfields(sched_key, 'ex', 'tz', 'p', 'pr', 'lm', 'mi', 'gr', 'kd', 'lt', 'ps')
if not cur then
  return redis.error_reply('ERR ' .. sched_key .. ' holds a value of another type; echomq did not write it')
end
local h = {}
for i, f in ipairs(fields) do
  h[#h + 1] = f
  h[#h + 1] = ARGV[i + 1]
end
local now_s = int_s(now)
if not cur[1] then
  -- (a hash without an expression is a torn write: made anew)
  rcall('ZADD', index_key, now, name)
  rcall('DEL', sched_key)
  h[#h + 1] = 'lt'; h[#h + 1] = now_s
  h[#h + 1] = 'ct'; h[#h + 1] = now_s
  h[#h + 1] = 'ut'; h[#h + 1] = now_s
  h[#h + 1] = 'nj'; h[#h + 1] = '0'
  rcall('HSET', sched_key, unpack(h))
  return {now, 'created'}
end
local same = true
for i = 1, #fields do
  if (cur[i] or '') ~= ARGV[i + 1] then same = false end
end
if same then return {now, 'unchanged'} end
-- a paused schedule stays paused (never due in the index: schedule_pause.lua)
if not cur[10] then rcall('ZADD', index_key, now, name) end
if (cur[1] ~= ARGV[2] or cur[2] ~= ARGV[3]) and (tonumber(cur[9]) or 0) < now then
  h[#h + 1] = 'lt'; h[#h + 1] = now_s
end
h[#h + 1] = 'ut'; h[#h + 1] = now_s
rcall('HSET', sched_key, unpack(h))
return {now, 'updated'}
