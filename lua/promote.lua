-- promote: makes delayed jobs due now ("run now"): they move to pending at
-- their own score, as if their time had come.
--
-- KEYS[1] delayed (zset)  KEYS[2] pending (zset)  KEYS[3] wake (list)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] limit   with no ids: the `limit` delayed jobs due first; else ignored
-- ARGV[3..] ids   the jobs to promote (each must be delayed)
--
-- Returns {now, moved, left, id_1, code_1, ...} with a code per id given
-- (OK moved; NOT_FOUND no such job; REFUSED not delayed); `left` is how
-- many delayed jobs remain.
local delayed_key, pending_key, wake_key = KEYS[1], KEYS[2], KEYS[3]
local prefix, limit = ARGV[1], tonumber(ARGV[2])
local now = server_now()
local out = {now, 0, 0}
local ids = {}
local given = #ARGV > 2
if given then
  for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
else
  ids = rcall('ZRANGE', delayed_key, 0, limit - 1)
end
local moved = 0
for _, id in ipairs(ids) do
  local jk = prefix .. 'job:' .. id
  local job = hfields(jk, 'st')
  local code = CODE.OK
  if not job or not job[1] then code = CODE.NOT_FOUND
  elseif job[1] ~= 'delayed' then code = CODE.REFUSED
  else
    rcall('ZREM', delayed_key, id)
    if to_pending(pending_key, jk, id) then moved = moved + 1 end
  end
  if given then
    out[#out + 1] = id
    out[#out + 1] = code
  end
end
if moved > 0 then wake(wake_key, moved) end
out[2] = moved
out[3] = rcall('ZCARD', delayed_key)
return out
