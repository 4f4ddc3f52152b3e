-- marker_done: records that the holder's effect finished
-- (EffectMarker::done in src/effect.rs; marker values as in marker_claim.lua).
--
-- KEYS[1] marker (string)
-- ARGV[1] fencing token of the calling attempt   ARGV[2] marker TTL, ms
--
-- Fenced by the marker, not by the lease: an attempt whose lease was lost
-- after its effect still records the truth, as long as no newer attempt
-- took the marker over. A missing marker (its TTL ran out) is written as
-- done too: the caller's effect happened either way.
-- Returns {code, now, attempt}: 1 recorded done by the caller; -4 held by
-- attempt `attempt`, which took it over; -5 done by attempt `attempt`;
-- -6 a value echomq did not write. Nothing changed on a negative code.
-- Marking done again with the same token answers 1.
local mk = KEYS[1]
local token, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = server_now()

local v = rcall('GET', mk)
if v then
  local kind, t, p = string.match(v, '^(%a+):(%d+):?(%d*)$')
  t = tonumber(t)
  if kind == 'done' and p == '' then
    if t == token then return {1, now, t} end
    return {-5, now, t}
  end
  if kind ~= 'held' or p == '' then return {-6, now, 0} end
  if t ~= token then return {-4, now, t} end
end
rcall('SET', mk, 'done:' .. token, 'PX', ttl)
return {1, now, token}
