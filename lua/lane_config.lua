-- lane_config: sets a lane's cap or weight, or the queue-wide default of
-- lanes, and puts the lanes it changes where their counts say in the ring
-- (lib/lanes.lua lane_settle), so every process's next claim honours it.
--
-- KEYS[1] ring (zset)  KEYS[2] setting (the lanes:cap or lanes:weight hash)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] lane    the lane, or "" for the default of lanes without their own
-- ARGV[3] value   the cap or weight (at least 1), or "" to remove it
-- ARGV[4] cursor  "" on the first step, which writes the setting; else a
--                 ZSCAN cursor of the ring to go on from
-- ARGV[5] count   ZSCAN COUNT hint per step
--
-- A weight takes effect at each lane's next turn. A lane's cap settles
-- that lane at once (a lower cap blocks it, a higher one readies it). The
-- default cap can change any number of lanes, so they are settled in
-- bounded steps over the ring: the first step writes the setting and
-- settles the first ZSCAN batch; the caller repeats with the cursor
-- returned until it is "0" (claims meanwhile find a lane over its new cap
-- blocked, and block it themselves).
--
-- REPLY: {now:int, next_cursor:str}
-- next_cursor "0" when there is nothing more to settle.
local ring, setting = KEYS[1], KEYS[2]
local prefix, lane, value, cursor, count = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now = server_now()
local is_cap = setting == prefix .. 'lanes:cap'
if cursor == '' then
  if value == '' then rcall('HDEL', setting, lane) else rcall('HSET', setting, lane, value) end
  if not is_cap then return {now, '0'} end
  if lane ~= '' then
    if rcall('ZSCORE', ring, lane) then lane_settle(prefix, lane) end
    return {now, '0'}
  end
  cursor = '0'
end
local r = rcall('ZSCAN', ring, cursor, 'COUNT', count)
for i = 1, #r[2], 2 do
  if r[2][i] ~= '' then lane_settle(prefix, r[2][i]) end
end
return {now, r[1]}
