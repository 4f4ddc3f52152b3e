-- throttle: reads or sets the queue's global cap, its rate limit and the
-- rate limits of its lanes (lib/throttle.lua), stored in the server so
-- every process's next claim honours them.
--
-- KEYS[1] limits (hash; layout 2)  KEYS[2] rates (the lanes:rate hash)  KEYS[3] pending (zset)
-- KEYS[4] wake (list)  KEYS[5] meta (hash: the limits from layout 3 on, lib/throttle.lua)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] what    "get"; "max" the global cap; "rate" the queue's rate
--                 limit; "lane_rate" a lane's rate limit (of `lane`,
--                 "" for the default of lanes); "unhold" ends a handler's
--                 hold of the queue (not of a lane: those end by themselves)
-- ARGV[3] lane    the lane of "get" and "lane_rate" ("" for none / the default)
-- ARGV[4] value   "max": the cap (at least 1); rates: "N:W" (N claims per
--                 W ms, both at least 1); "" removes the setting
--
-- A setting takes effect at the next claim. A raised or removed limit
-- wakes consumers waiting for work (as many as jobs are pending, at most
-- the wake list's cap); a lane its old rate limit stopped gives jobs again
-- when that window reopens, as before.
--
-- REPLY: {now:int, [max:int?, rate:str, hold:int?, lane_rate:str,
--   default_lane_rate:str, lane_reopens:int?]}
-- The rest follows for "get" only, each "" when unset (rates "N:W";
-- hold: server ms, "" when past; lane_reopens: when the lane's window or
-- hold ends, server ms, "" when it is not stopped).
local rates_key, pending_key, wake_key = KEYS[2], KEYS[3], KEYS[4]
local prefix, what, lane, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now = server_now()
local lkey = limits_key(prefix)
if what == 'get' then
  local l = queue_limits(prefix)
  local hold = l[3]
  if hold and tonumber(hold) <= now then hold = nil end
  local r = rcall('HMGET', rates_key, lane, '')
  local reopens = ''
  if lane ~= '' then reopens = int_s(lane_shut(prefix, lane, now) or 0) end
  if reopens == '0' then reopens = '' end
  if lane == '' then r[1] = '' end
  return {now, l[1] or '', l[2] or '', hold or '', r[1] or '', r[2] or '', reopens}
end
if what == 'unhold' then
  rcall('HDEL', lkey, 'hold')
elseif what == 'lane_rate' then
  if value == '' then rcall('HDEL', rates_key, lane) else rcall('HSET', rates_key, lane, value) end
else
  if value == '' then rcall('HDEL', lkey, what) else rcall('HSET', lkey, what, value) end
end
local pending = rcall('ZCARD', pending_key)
if pending > 0 then wake(wake_key, math.min(pending, WAKE_CAP)) end
return {now}
