-- list: one page of a state's jobs, in the set's order, after a cursor.
--
-- KEYS[1] set (pending, delayed, active, completed, failed, cancelled, or a lane's pending set)
-- ARGV[1] order   "asc" (oldest score first) or "desc" (newest first)
-- ARGV[2] limit   the most jobs on the page
-- ARGV[3] score   the cursor's score ("" to start at the beginning)
-- ARGV[4] id      the cursor's job id (the last one shown)
--
-- A page holds the members strictly after (score, id) in the order: by
-- score, then by id as the set orders equal scores.
--
-- REPLY: {(id:str, score:str)*}
-- At most `limit` pairs; fewer when the set ends.
local key, order, limit = KEYS[1], ARGV[1], tonumber(ARGV[2])
local cs, cid = ARGV[3], ARGV[4]
local asc = order == 'asc'
local out = {}
-- The cursor's job still where the cursor says: the page starts right
-- after it by rank (bounded, however many jobs share its score, as laned
-- pending jobs all do).
if cs ~= '' then
  local at = rcall('ZSCORE', KEYS[1], cid)
  if at and tonumber(at) == tonumber(cs) then
    local r
    if asc then
      local rank = rcall('ZRANK', key, cid)
      r = rcall('ZRANGE', key, rank + 1, rank + limit, 'WITHSCORES')
    else
      local rank = rcall('ZREVRANK', key, cid)
      r = rcall('ZRANGE', key, rank + 1, rank + limit, 'REV', 'WITHSCORES')
    end
    return r
  end
end
-- Otherwise (it left the set or moved): walk from its score.
local offset = 0
local chunk = limit + 16
while #out < limit * 2 do
  local r
  if cs == '' then
    if asc then r = rcall('ZRANGE', key, offset, offset + chunk - 1, 'WITHSCORES')
    else r = rcall('ZRANGE', key, offset, offset + chunk - 1, 'REV', 'WITHSCORES') end
  elseif asc then
    r = rcall('ZRANGE', key, cs, '+inf', 'BYSCORE', 'LIMIT', offset, chunk, 'WITHSCORES')
  else
    r = rcall('ZRANGE', key, cs, '-inf', 'BYSCORE', 'REV', 'LIMIT', offset, chunk, 'WITHSCORES')
  end
  for i = 1, #r, 2 do
    local id, sc = r[i], r[i + 1]
    local after = true
    if cs ~= '' and tonumber(sc) == tonumber(cs) then
      if asc then after = id > cid else after = id < cid end
    end
    if after and #out < limit * 2 then
      out[#out + 1] = id
      out[#out + 1] = sc
    end
  end
  if #r < chunk * 2 then break end
  offset = offset + chunk
end
return out
