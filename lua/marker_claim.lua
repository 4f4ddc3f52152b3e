-- marker_claim: claims a job's effect marker before the effect runs
-- (EffectMarker::claim in src/effect/marker.rs). The marker records which attempt
-- (by fencing token) holds the effect and whether it finished:
--   "held:T:P"  the attempt with token T claimed it and has not finished
--               (P: the token it took over from, 0 if none)
--   "done:T"    the attempt with token T finished the effect
--
-- KEYS[1] job (hash)   KEYS[2] marker (string, "emq:{Q}:fx:EFFECT:ID")
-- ARGV[1] token  fencing token of the calling attempt
-- ARGV[2] ttl    marker TTL, milliseconds (set again on every claim)
--
-- Only the job's current attempt (state active under this token) may
-- claim, so of two deliveries of one job only the newer one gets past
-- here; tokens never repeat for a queue, so neither does an attempt of an
-- earlier job with the same id.
-- REPLY: {code:code, now:int, token:int}
--   OK: no attempt held the marker; the caller holds it now (token 0)
--   MARKER_DONE: the attempt with `token` finished the effect; skip it
--   MARKER_ORPHANED: the attempt with `token` claimed the marker and ended
--     (crashed, lost its lease, failed or was released) without marking it
--     done; the caller holds it now. The effect may or may not have happened.
--   NOT_FOUND; LEASE_LOST (the caller is not the job's current attempt);
--   FOREIGN: the marker holds a value echomq did not write (`token` 0).
--   Nothing changed on a negative code.
-- The holder claiming again gets the answer its first claim got (a retried
-- call whose reply was lost must not turn "orphaned" into "fresh").
local jk, mk = KEYS[1], KEYS[2]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local now = server_now()

local job = rcall('HMGET', jk, 'st', 'tk')
if not job[1] then return {CODE.NOT_FOUND, now, 0} end
if job[1] ~= 'active' or job[2] ~= token then return {CODE.LEASE_LOST, now, 0} end

local v = rcall('GET', mk)
if not v then
  rcall('SET', mk, 'held:' .. token .. ':0', 'PX', ttl)
  return {CODE.OK, now, 0}
end
local state, t, p = marker_state(v)
if state == 'done' then
  rcall('PEXPIRE', mk, ttl)
  return {CODE.MARKER_DONE, now, t}
end
if state ~= 'held' then return {CODE.FOREIGN, now, 0} end
if t == token then
  -- Our own claim, asked again.
  rcall('PEXPIRE', mk, ttl)
  if p == '0' then return {CODE.OK, now, 0} end
  return {CODE.MARKER_ORPHANED, now, p}
end
-- Held by another attempt. We are the current one, so that attempt is over:
-- its lease was reaped or it settled without finishing the effect.
rcall('SET', mk, 'held:' .. token .. ':' .. t, 'PX', ttl)
return {CODE.MARKER_ORPHANED, now, t}
