-- claim: leases up to N ready jobs to the caller.
--
-- KEYS[1] pending (zset)  KEYS[2] active (zset)  KEYS[3] delayed (zset)
-- KEYS[4] wake (list)  KEYS[5] token (the fencing-token counter)
-- KEYS[6] meta (hash; a paused queue leases nothing)  KEYS[7] expired (zset)
-- ARGV[1] prefix  key prefix "emq:{Q}:" (job keys are built from it, same slot)
-- ARGV[2] keep_failed  retention of expired jobs, kept as failed ones (as in settle.lua)
-- ARGV[3] lease   lease length in milliseconds (deadline = TIME + lease)
-- ARGV[4] max     N, the most jobs to lease
-- ARGV[5] holder  the claiming consumer's name (kept as the job's `hd`)
--
-- First promotes up to N due delayed jobs, so delayed work does not wait
-- for a reaper. Each leased job gets attempts += 1 and a fencing token
-- minted from the queue-wide counter (never repeated for the queue). While
-- lanes are in use, lanes take turns and a lane at its cap gives no job
-- (lib/claim.lua claim_turns). The queue's global cap, its rate limit and
-- its lanes' rate limits lease fewer jobs, or none (lib/throttle.lua). A
-- job past its expiry is not leased: it ends expired (lib/expiry.lua).
--
-- REPLY: {now:int, deadline:int, wait:int, (head:str, payload:str)*}
-- Two elements per job leased (lib/claim.lua lease_job): head is its id,
-- token, attempt and created (its record's `ct`, server ms, 0 if it has
-- none) joined by NUL bytes, then its failures, `lm`, lane, kind and
-- traceparent too when it has any of them; lua/README.md, claim, tells
-- why. `wait` is 0, or the ms until a rate limit that stopped the claim
-- (or a lane it left out) lets it lease again, or until the next slot of
-- the queue's rate limit frees when it left room for fewer jobs than
-- asked.
--
-- Events (lib/events.lua, unless the queue turned them off): promoted (due
-- delayed jobs), claimed (each job leased), expired (each job past its
-- expiry).
local k = {pending = KEYS[1], active = KEYS[2], delayed = KEYS[3], wake = KEYS[4], token = KEYS[5],
  meta = KEYS[6], expired = KEYS[7]}
local now = server_now()
local out = {now}
claim_jobs(k, ARGV[1], now, tonumber(ARGV[3]), tonumber(ARGV[4]), true, ARGV[5], out, retention(ARGV[2]))
return out
