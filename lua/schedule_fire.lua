-- schedule_fire: takes a schedule's ticks and makes their jobs: at most
-- one job per tick, and each tick at most once (src/schedule/pass.rs).
--
-- KEYS[1] schedules  index (zset)   KEYS[2] schedule  the schedule's hash
-- KEYS[3] seq        mint counter   KEYS[4] pending   (zset)
-- KEYS[5] wake       (list)
-- ARGV[1] prefix  key prefix "emq:{Q}:" (job keys are built from it; same slot)
-- ARGV[2] name    the schedule's name
-- ARGV[3] cron    the expression the ticks were computed from
-- ARGV[4] tz      the zone they were computed in
-- ARGV[5] next    the tick after the last one offered (server ms), -1 when none follows
-- ARGV[6..]       the ticks offered (server ms, ascending; none is fine),
--                 each the one after the one before it; the first may be
--                 the latest missed tick, the older ones passed over unoffered
--
-- A tick is taken only when it is later than the schedule's `lt` (the last
-- tick done) and not later than TIME: the first tick after TIME is refused
-- and becomes the schedule's look time, so schedulers come back then. A
-- tick taken more than the schedule's grace after its time is missed:
-- under "skip" it makes no job; under "latest" it makes one only when the
-- next offered tick is not missed too (one job for a run of missed
-- ticks). Every tick taken, job or not, moves `lt` up to it, in this same
-- script, so no tick is taken twice, whatever retention deleted since. A
-- tick's job has the id "cron:NAME@TICK" and the schedule's payload,
-- priority, limits and kind, and is pending at once; a job with that id still
-- there is left as it is (status EXISTS).
--
-- REPLY: {code:code, now:int, lt:int, look:int, missed:int, (tick:int,
--   status:code, id:str)*}
-- code OK, NOT_FOUND (no such schedule: its index member is removed) or
-- STALE (its expression or zone is no longer `cron` and `tz`, or it was
-- paused: nothing written); lt after the call; look: the schedule's look time now
-- (9007199254740991 when no tick follows); missed: the latest missed tick
-- taken (0: none); then one group per job made (status OK) or found
-- (EXISTS).
--
-- Events (lib/events.lua, unless the queue turned them off): enqueued (each
-- job a tick makes).
local index_key, sched_key, seq_key, pending_key, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, name, cron, tz = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local NEVER = 9007199254740991
local now = server_now()
-- A queue being obliterated makes no more jobs.
if obliterating(prefix) then return {CODE.NOT_FOUND, now, 0, 0, 0} end
local f = hfields(sched_key, 'ex', 'tz', 'lt', 'mi', 'gr', 'p', 'pr', 'lm', 'kd', 'ps')
if not f or not f[1] then
  rcall('ZREM', index_key, name)
  return {CODE.NOT_FOUND, now, 0, 0, 0}
end
-- paused since the pass read it (schedule_pause.lua): never due
if f[10] then
  rcall('ZADD', index_key, NEVER, name)
  return {CODE.STALE, now, 0, 0, 0}
end
if f[1] ~= cron or f[2] ~= tz then return {CODE.STALE, now, 0, 0, 0} end
local lt = tonumber(f[3]) or now
local skip = f[4] == 'skip'
local grace = tonumber(f[5]) or 60000
local payload, priority, lm, kind = f[6] or 'null', tonumber(f[7]) or 0, f[8] or '', f[9] or ''
local look = tonumber(ARGV[5])
if look < 0 then look = NEVER end
local ticks = {}
for i = 6, #ARGV do ticks[#ticks + 1] = tonumber(ARGV[i]) end

local out = {CODE.OK, now, 0, 0, 0}
local missed, made = 0, 0
for i, t in ipairs(ticks) do
  if t > now then
    look = t
    break
  end
  if t > lt then
    local run = true
    if now - t > grace then
      missed = t
      local later = ticks[i + 1]
      if skip or (later and later <= now and now - later > grace) then run = false end
    end
    if run then
      local id = 'cron:' .. name .. '@' .. int_s(t)
      local status = CODE.EXISTS
      if rcall('EXISTS', prefix .. 'job:' .. id) == 0 then
        local score, h
        id, score, h = new_job(rcall('INCR', seq_key), id, payload, priority, lm, '', nil, now, kind, nil,
          payload_split(prefix), queue_aging(prefix), made)
        store_job(prefix, pending_key, nil, id, score, nil, h, '')
        status = CODE.OK
        made = made + 1
      end
      out[#out + 1] = t
      out[#out + 1] = status
      out[#out + 1] = id
    end
    lt = t
  end
end

local sh = {'lt', int_s(lt)}
if missed > 0 then
  sh[#sh + 1] = 'mt'; sh[#sh + 1] = int_s(missed)
end
rcall('HSET', sched_key, unpack(sh))
if made > 0 then
  rcall('HINCRBY', sched_key, 'nj', made)
  wake(wake_key, made)
end
rcall('ZADD', index_key, look, name)
out[3], out[4], out[5] = lt, look, missed
return out
