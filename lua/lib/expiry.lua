-- lib/expiry.lua: expires-at. A job enqueued with an expiry (its `xa`,
-- server ms) that has not started by then never runs: it ends expired, a
-- finished state of its own, kept as failed jobs are. Decided on the
-- server's clock where a job would start or wait again: a claim (lib/claim.lua),
-- a settlement that would put it back to wait (lib/settle.lua), the reaper
-- (reap.lua); and, for jobs nobody claims, by the reaper's pass over
-- PREFIX:expiring, the ids of the jobs with an expiry scored by it (a
-- queue without expiries has none, and pays one ZRANGEBYSCORE per reap).
--
-- Needs: base (rcall, hfields), sets (finish, from_pending).

-- True when a job with expiry `xa` (its `xa` field: a string, or
-- nil/false for none) can no longer start at server ms `at`.
local function past_expiry(xa, at)
  local t = xa and tonumber(xa)
  if not t then return false end
  return at >= t
end

-- Ends job `id` (record `jk`) expired at `now`, releasing its dedup marker
-- `dd`; `fields` the fields to stamp, {'err', 'expired'} when nil (a
-- settlement's add the attempt's error history and `lo`).
local function expire(moves, prefix, jk, id, now, keep, dd, fields, owner)
  if not fields then fields = {'err', 'expired'} end
  finish(moves, prefix, jk, id, 'expired', now, keep, dd, fields, owner)
end

-- The reaper's pass: ends up to `limit` jobs still waiting (pending or
-- delayed) whose expiry has passed. An entry leaves PREFIX:expiring once
-- its time has come, whatever its job's state: a job that is active then
-- is ended by the settlement or reap that would make it wait again, and a
-- finished or deleted one needs nothing. `k` holds pending, delayed,
-- expiring. Returns how many ended.
local function expire_due(k, prefix, now, limit, keep, moves)
  local due = rcall('ZRANGEBYSCORE', k.expiring, '-inf', now, 'LIMIT', 0, limit)
  if #due == 0 then return 0 end
  local n, later = 0, {}
  for _, id in ipairs(due) do
    local jk = prefix .. 'job:' .. id
    local job = hfields(jk, 'st', 'xa', 'dd', 'ln')
    if job and job[2] and not past_expiry(job[2], now) and (job[1] == 'pending' or job[1] == 'delayed') then
      -- a job enqueued again under this id, with a later expiry
      later[#later + 1] = job[2]
      later[#later + 1] = id
    elseif job and past_expiry(job[2], now) and (job[1] == 'pending' or job[1] == 'delayed') then
      if job[1] == 'pending' then
        from_pending(k.pending, id, job[4] or nil)
      else
        rcall('ZREM', k.delayed, id)
      end
      expire(moves, prefix, jk, id, now, keep, job[3] or nil)
      n = n + 1
    end
  end
  rcall('ZREM', k.expiring, unpack(due))
  if #later > 0 then rcall('ZADD', k.expiring, unpack(later)) end
  return n
end
