-- remove: deletes jobs that are not active (pending, delayed, completed,
-- failed, cancelled or expired), with their dedup markers; or, in drain mode, the oldest
-- pending and delayed jobs. An active job is leased to a worker and is
-- never removed here (cancel it, or wait for it to finish).
--
-- KEYS[1] pending  KEYS[2] delayed  KEYS[3] completed  KEYS[4] failed
-- KEYS[5] cancelled  KEYS[6] expired
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] limit   drain mode (no ids): at most this many pending and
--                 delayed jobs per call
-- ARGV[3..] ids   the jobs to remove
--
-- REPLY: {now:int, removed:int, left:int, (id:str, code:code)*}
-- A code per id given (OK removed; NOT_FOUND no such job; BUSY active,
-- not removed); in drain mode `left` is how many pending and delayed jobs
-- remain.
--
-- A batch member removed before it ended counts toward its batch as
-- ended, not completed (lib/batch.lua), and may end the batch; a flow's
-- job removed ends its node as removed (lib/flow.lua), which may fail or
-- release its parents; a job of a sequence leaves it, and the next one
-- of its key may run (lib/sequence.lua).
--
-- Events (lib/events.lua, unless the queue turned them off): removed.
local prefix, limit = ARGV[1], tonumber(ARGV[2])
local now = server_now()
local sets = {pending = KEYS[1], delayed = KEYS[2], completed = KEYS[3], failed = KEYS[4], cancelled = KEYS[5],
  expired = KEYS[6]}
local out = {now, 0, 0}
local removed = 0
-- the set moves of flow parents that fail without running (lib/flow.lua)
local moves = new_moves()

local function delete(id, st, dd, ln)
  remove_job(moves, prefix, sets, prefix .. 'job:' .. id, id, st, dd, ln, now)
  removed = removed + 1
end

if #ARGV > 2 then
  for i = 3, #ARGV do
    local id = ARGV[i]
    local job = hfields(prefix .. 'job:' .. id, 'st', 'dd', 'ln')
    local code = CODE.OK
    if not job or not job[1] then code = CODE.NOT_FOUND
    elseif job[1] == 'active' then code = CODE.BUSY
    elseif sets[job[1]] then delete(id, job[1], job[2], job[3])
    else code = CODE.NOT_FOUND end
    out[#out + 1] = id
    out[#out + 1] = code
  end
else
  for _, st in ipairs({'pending', 'delayed'}) do
    local room = limit - removed
    if room > 0 then
      for _, id in ipairs(rcall('ZRANGE', sets[st], 0, room - 1)) do
        local job = hfields(prefix .. 'job:' .. id, 'dd', 'ln')
        delete(id, st, job and job[1], job and job[2])
      end
    end
  end
  out[3] = rcall('ZCARD', sets.pending) + rcall('ZCARD', sets.delayed)
end
apply_moves(moves, sets, prefix, KEEP_ALL, KEEP_ALL, now)
out[2] = removed
return out
