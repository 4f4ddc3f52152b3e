-- marker_claim: claims a job's effect marker before the effect runs
-- (EffectMarker::claim in src/effect.rs). The marker records which attempt
-- holds the effect and whether it finished:
--   "held:T:P"  attempt T claimed it and has not finished (P: the attempt it
--               took over from, 0 if none)
--   "done:T"    attempt T finished the effect
--
-- KEYS[1] job (hash)   KEYS[2] marker (string, "emq:{Q}:fx:EFFECT:ID")
-- ARGV[1] fencing token of the calling attempt
-- ARGV[2] marker TTL, milliseconds (set again on every claim)
--
-- Only the job's current attempt (state active, attempts == token) may
-- claim, so of two deliveries of one job only the newer one gets past here.
-- Returns {code, now, attempt}:
--   1 fresh: no attempt held the marker; the caller holds it now (attempt 0)
--   2 done: attempt `attempt` finished the effect; the caller must skip it
--   3 orphaned: attempt `attempt` claimed the marker and ended (crashed, lost
--     its lease, failed or was released) without marking it done; the
--     caller holds it now. The effect may or may not have happened.
--   -1 no such job; -2 lease lost (the caller is not the job's current
--   attempt); -6 the marker holds a value echomq did not write (`attempt`
--   is 0). Nothing changed on a negative code.
-- The holder claiming again gets the answer its first claim got (a retried
-- call whose reply was lost must not turn "orphaned" into "fresh").
local jk, mk = KEYS[1], KEYS[2]
local token, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = server_now()

local job = rcall('HMGET', jk, 'st', 'a')
if not job[1] then return {-1, now, 0} end
if job[1] ~= 'active' or tonumber(job[2]) ~= token then return {-2, now, 0} end

local v = rcall('GET', mk)
if not v then
  rcall('SET', mk, 'held:' .. token .. ':0', 'PX', ttl)
  return {1, now, 0}
end
local kind, t, p = string.match(v, '^(%a+):(%d+):?(%d*)$')
t = tonumber(t)
if kind == 'done' and p == '' then
  rcall('PEXPIRE', mk, ttl)
  return {2, now, t}
end
if kind ~= 'held' or p == '' then return {-6, now, 0} end
if t == token then
  -- Our own claim, asked again.
  rcall('PEXPIRE', mk, ttl)
  if tonumber(p) == 0 then return {1, now, 0} end
  return {3, now, tonumber(p)}
end
-- Held by another attempt. We are the current one, so that attempt is over:
-- its lease was reaped or it settled without finishing the effect.
rcall('SET', mk, 'held:' .. token .. ':' .. t, 'PX', ttl)
return {3, now, t}
