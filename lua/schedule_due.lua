-- schedule_due: the schedules whose look time has come (src/schedule/pass.rs).
--
-- KEYS[1] schedules  index (zset): schedule name -> when schedulers next look at it (server ms)
-- ARGV[1] prefix  key prefix "emq:{Q}:" (a schedule's hash is
--                 PREFIX .. "schedule:" .. NAME, in the same slot)
-- ARGV[2] limit   most schedules returned
--
-- REPLY: {now:int, next:int, (name:str, cron:str, tz:str, lt:int, grace:int)*}
-- One group per schedule whose look time is at or before TIME (earliest
-- first, at most `limit`), with its expression, zone, last tick done (lt,
-- see schedule_upsert) and grace (ms); next: the earliest look time after
-- TIME of the others (-1: none). A member whose hash is missing, not a
-- hash, or without an expression (a torn write) is removed from the index.
local index_key = KEYS[1]
local prefix, limit = ARGV[1], tonumber(ARGV[2])
local now = server_now()
local out = {now, -1}
local due = rcall('ZRANGEBYSCORE', index_key, '-inf', now, 'LIMIT', 0, limit)
local gone = {}
for _, name in ipairs(due) do
  local f = hfields(prefix .. 'schedule:' .. name, 'ex', 'tz', 'lt', 'gr')
  if f and f[1] and f[2] and f[3] and f[4] then
    out[#out + 1] = name
    out[#out + 1] = f[1]
    out[#out + 1] = f[2]
    out[#out + 1] = f[3]
    out[#out + 1] = f[4]
  else
    gone[#gone + 1] = name
  end
end
if #gone > 0 then rcall('ZREM', index_key, unpack(gone)) end
local after = rcall('ZRANGEBYSCORE', index_key, '(' .. int_s(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if after[2] then out[2] = after[2] end
return out
