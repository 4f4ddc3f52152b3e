-- lanes: reads lanes: the named ones, or one ZSCAN step of the ring (every
-- lane with pending or active jobs), with the queue-wide defaults.
--
-- KEYS[1] ring (zset)  KEYS[2] held (the lanes:active zset)
-- KEYS[3] caps (hash)  KEYS[4] weights (hash)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] cursor  ZSCAN cursor ("0" to start), or "" to read only the
--                 lanes named (none: only the defaults)
-- ARGV[3] count   ZSCAN COUNT hint
-- ARGV[4..] lanes the lanes to read when the cursor is ""
--
-- REPLY: {next_cursor:str, default_cap:int?, default_weight:int?, (lane:str,
--   pending:int, active:int, cap:int?, weight:int?, state:str)*}
-- One group per lane: caps and weights are the lane's own ("" when it
-- has none, "" defaults when unset); state is "ready", "blocked", "idle"
-- or "" (not in the ring: no jobs). Next cursor "0": the walk is done.
local ring, held, caps, weights = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix = ARGV[1]
local names, next_cursor = {}, '0'
if ARGV[2] == '' then
  for i = 4, #ARGV do names[#names + 1] = ARGV[i] end
else
  local r = rcall('ZSCAN', ring, ARGV[2], 'COUNT', ARGV[3])
  next_cursor = r[1]
  for i = 1, #r[2], 2 do
    if r[2][i] ~= '' then names[#names + 1] = r[2][i] end
  end
end
local out = {next_cursor, rcall('HGET', caps, '') or '', rcall('HGET', weights, '') or ''}
for _, lane in ipairs(names) do
  local score = tonumber(rcall('ZSCORE', ring, lane))
  local state = ''
  if score then
    if score >= LANE_IDLE then state = 'idle' elseif score >= LANE_BLOCKED then state = 'blocked' else state = 'ready' end
  end
  out[#out + 1] = lane
  out[#out + 1] = rcall('ZCARD', lane_key(prefix, lane))
  out[#out + 1] = rcall('ZLEXCOUNT', held, '[' .. lane .. '\0', '(' .. lane .. '\1')
  out[#out + 1] = rcall('HGET', caps, lane) or ''
  out[#out + 1] = rcall('HGET', weights, lane) or ''
  out[#out + 1] = state
end
return out
