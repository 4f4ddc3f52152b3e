-- claim: leases up to N ready jobs to the caller.
--
-- KEYS[1] pending (zset)  KEYS[2] active (zset)  KEYS[3] delayed (zset)
-- KEYS[4] wake (list)
-- ARGV[1] key prefix "emq:{Q}:" (job keys are built from it, same slot)
-- ARGV[2] lease length in milliseconds (deadline = TIME + lease)
-- ARGV[3] N, the most jobs to lease
--
-- First promotes up to N due delayed jobs, so delayed work does not wait
-- for a reaper. Each leased job gets attempts += 1; the new value is its
-- fencing token.
-- Returns {now, deadline, id_1, token_1, failures_1, payload_1, ...}.
local pending_key, active_key, delayed_key, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix = ARGV[1]
local lease = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local now = server_now()
local deadline = now + lease

promote_due(delayed_key, pending_key, wake_key, prefix, now, limit)

local popped = rcall('ZPOPMIN', pending_key, limit)
local out = {now, deadline}
local zargs = {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local jk = prefix .. 'job:' .. id
  local job = rcall('HMGET', jk, 'p', 'f')
  -- a pending id without a hash (evicted, or a torn write) is dropped
  if job[1] then
    local token = rcall('HINCRBY', jk, 'a', 1)
    rcall('HSET', jk, 'st', 'active')
    zargs[#zargs + 1] = deadline
    zargs[#zargs + 1] = id
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = tonumber(job[2] or 0)
    out[#out + 1] = job[1]
  end
end
if #zargs > 0 then rcall('ZADD', active_key, unpack(zargs)) end
-- Nothing left to hand out: clear stale wake tokens so idle consumers sleep.
if #popped < limit * 2 then rcall('DEL', wake_key) end
return out
