-- retry_failed: moves failed jobs back to pending, to run again with their
-- full max_attempts: failures and stalls start again from 0 (attempts, the
-- count of claims, and the last error are kept). A job that holds no
-- score any more is left failed.
--
-- KEYS[1] failed (zset)  KEYS[2] pending (zset)  KEYS[3] wake (list)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] limit   with no ids: the oldest `limit` failed jobs; else ignored
-- ARGV[3..] ids   the jobs to retry (each must be failed)
--
-- Returns {now, moved, left, id_1, code_1, ...} with a code per id given
-- (OK moved; NOT_FOUND no such job; REFUSED not failed); `left` is how
-- many failed jobs remain.
local failed_key, pending_key, wake_key = KEYS[1], KEYS[2], KEYS[3]
local prefix, limit = ARGV[1], tonumber(ARGV[2])
local now = server_now()
local out = {now, 0, 0}
local ids = {}
local given = #ARGV > 2
if given then
  for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
else
  ids = rcall('ZRANGE', failed_key, 0, limit - 1)
end
local moved = 0
for _, id in ipairs(ids) do
  local jk = prefix .. 'job:' .. id
  local job = hfields(jk, 'st', 'sc')
  local code = CODE.OK
  if not job or not job[1] then code = CODE.NOT_FOUND
  elseif job[1] ~= 'failed' or not job[2] then code = CODE.REFUSED
  else
    rcall('ZREM', failed_key, id)
    rcall('HSET', jk, 'f', '0', 's', '0')
    rcall('HDEL', jk, 'ft')
    to_pending(pending_key, jk, id)
    moved = moved + 1
  end
  if given then
    out[#out + 1] = id
    out[#out + 1] = code
  end
end
if moved > 0 then wake(wake_key, moved) end
out[2] = moved
out[3] = rcall('ZCARD', failed_key)
return out
