-- to_pending: moves jobs of one state back to pending by hand, each at its
-- own score (priority, then enqueue order): failed jobs retried by an
-- operator (their failures and stalls start again from 0 and the finish
-- time goes; attempts, the count of claims, and the last error are kept),
-- or delayed jobs run now ("promote"). A job that holds no score any more
-- is left where it is. A failed job retried takes its dedup marker again
-- (its failure released a marker that stood until it finished; a
-- by-states marker, EnqueueOptions::unique, is set again with its states
-- and period from now), unless another job holds it now: then it stays
-- failed (DEDUPED), since two jobs would share one dedup id. A failed
-- job of a sequence (lib/sequence.lua) joins the back of it again: it is
-- pending if no job of its key is left, else delayed until its turn; a
-- job waiting for its turn is not promoted (REFUSED).
--
-- KEYS[1] from (zset: failed or delayed)  KEYS[2] pending (zset)  KEYS[3] wake (list)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] limit   with no ids: the first `limit` jobs of `from`; else ignored
-- ARGV[3] state   the state a job must be in: "failed" or "delayed"
-- ARGV[4..] ids   the jobs to move
--
-- REPLY: {now:int, moved:int, left:int, (id:str, code:code)*}
-- A code per id given (OK moved; NOT_FOUND no such job; REFUSED not in
-- `state`, or the queue is being obliterated; DEDUPED its dedup id is held
-- by another job); `left` is how many jobs remain in `from`.
--
-- Events (lib/events.lua, unless the queue turned them off): promoted (a
-- delayed job), requeued (a failed one).
local from_key, pending_key, wake_key = KEYS[1], KEYS[2], KEYS[3]
local prefix, limit, state = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = server_now()
local out = {now, 0, 0}
if obliterating(prefix) then
  for i = 4, #ARGV do
    out[#out + 1] = ARGV[i]
    out[#out + 1] = CODE.REFUSED
  end
  return out
end
local ids = {}
local given = #ARGV > 3
if given then
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
else
  ids = rcall('ZRANGE', from_key, 0, limit - 1)
end
-- Takes dedup marker `dd` for job `id` again: true when no other job
-- holds it now (then set, to stand until the job finishes) or it is
-- already the job's.
local function retake(dd, id)
  local mk = prefix .. 'de:' .. dd
  local v = sget(mk)
  local holder = v and marker_holder(prefix, v)
  if holder and holder ~= id then return false end
  if v ~= id then rcall('SET', mk, id) end
  return true
end

-- Takes by-states dedup marker `dq` for job `id` again (`uq` its STATES
-- or STATES/TTL_MS): true when no other job holds it now (then set).
local function retake_unique(dq, uq, id)
  local mk = prefix .. 'de:' .. dq
  local v = sget(mk)
  local holder = v and marker_holder(prefix, v)
  if holder and holder ~= id then return false end
  local states, ttl = string.match(uq, '^(%a+)/?(%d*)$')
  if not states then return true end
  if ttl ~= '' then
    rcall('SET', mk, id .. '\31' .. states, 'PX', ttl)
  else
    rcall('SET', mk, id .. '\31' .. states)
  end
  return true
end

local moved, moved_waiting = 0, 0
for _, id in ipairs(ids) do
  local jk = prefix .. 'job:' .. id
  local job = hfields(jk, 'st', 'sc', 'dd', 'uq', 'dq', 'sq')
  local code = CODE.OK
  if not job or not job[1] then code = CODE.NOT_FOUND
  elseif job[1] ~= state or not job[2] then code = CODE.REFUSED
  elseif state == 'delayed' and job[6] and seq_waiting(prefix, job[6], id) then code = CODE.REFUSED
  elseif state == 'failed' and job[3] and not retake(job[3], id) then code = CODE.DEDUPED
  elseif state == 'failed' and job[4] and job[5] and not retake_unique(job[5], job[4], id) then code = CODE.DEDUPED
  else
    rcall('ZREM', from_key, id)
    if state == 'failed' then
      rcall('HSET', jk, 'f', '0', 's', '0')
      rcall('HDEL', jk, 'ft')
    end
    moved = moved + 1
    if state == 'failed' and job[6] and not seq_join(prefix, job[6], id) then
      -- it joins the back of its sequence again, and waits for its turn
      rcall('HSET', jk, 'st', 'delayed')
      rcall('ZADD', prefix .. 'delayed', SEQ_WAIT, id)
      moved_waiting = moved_waiting + 1
    else
      to_pending(pending_key, jk, id)
    end
    emit_job(prefix, state == 'delayed' and 'promoted' or 'requeued', id, jk)
  end
  if given then
    out[#out + 1] = id
    out[#out + 1] = code
  end
end
if moved > moved_waiting then wake(wake_key, moved - moved_waiting) end
out[2] = moved
out[3] = rcall('ZCARD', from_key)
return out
