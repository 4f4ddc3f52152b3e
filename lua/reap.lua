-- reap: returns expired leases to pending and promotes due delayed jobs.
-- One script, so racing reapers each see a lease expire exactly once.
--
-- KEYS[1] active  KEYS[2] pending  KEYS[3] delayed  KEYS[4] failed
-- KEYS[5] wake
-- ARGV[1] key prefix  ARGV[2] the most jobs to reap (and, separately, to
-- promote) in this call  ARGV[3] default max_stalls (the job's own wins)
-- ARGV[4] retention of failed jobs (as in complete.lua)
--
-- An expired lease (deadline < TIME) counts a stall; a job past max_stalls
-- fails for good with reason "stalled".
-- Returns {now, promoted, id_1, outcome_1, stalls_1, ...}; outcome 1
-- back to pending, 3 failed as stalled.
local active_key, pending_key, delayed_key, failed_key, wake_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, limit = ARGV[1], tonumber(ARGV[2])
local default_max, keep = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = server_now()
local out = {now, 0}

local expired = rcall('ZRANGEBYSCORE', active_key, '-inf', '(' .. now, 'LIMIT', 0, limit)
local moves = new_moves()
local back = 0
for _, id in ipairs(expired) do
  moves.unlease[#moves.unlease + 1] = id
  local jk = prefix .. 'job:' .. id
  if rcall('EXISTS', jk) == 1 then
    local stalls = rcall('HINCRBY', jk, 's', '1')
    local max = tonumber(rcall('HGET', jk, 'ms') or default_max)
    local outcome = 1
    if stalls > max then
      outcome = 3
      finish(moves, prefix, jk, id, 'failed', now, keep, rcall('HGET', jk, 'dd'), {'err', 'stalled'})
    else
      to_pending(pending_key, jk, id)
      back = back + 1
    end
    out[#out + 1] = id
    out[#out + 1] = outcome
    out[#out + 1] = stalls
  end
end
apply_moves(moves, {active = active_key, failed = failed_key}, prefix, -1, keep)
if back > 0 then wake(wake_key, back) end
out[2] = promote_due(delayed_key, pending_key, wake_key, prefix, now, limit)
return out
