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
local k = {pending = KEYS[1], active = KEYS[2], delayed = KEYS[3], wake = KEYS[4]}
local now = server_now()
local out = {now}
claim_jobs(k, ARGV[1], now, tonumber(ARGV[2]), tonumber(ARGV[3]), true, out)
return out
