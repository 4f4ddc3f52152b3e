-- marker_done: records that the holder's effect finished
-- (EffectMarker::done in src/effect/marker.rs; marker values as in marker_claim.lua).
--
-- KEYS[1] marker (string)
-- ARGV[1] token  fencing token of the calling attempt
-- ARGV[2] ttl    marker TTL, milliseconds
--
-- Fenced by the marker, not by the lease: an attempt whose lease was lost
-- after its effect still records the truth, as long as no newer attempt
-- took the marker over. A missing marker (its TTL ran out) is written as
-- done too: the caller's effect happened either way.
-- REPLY: {code:code, now:int, token:int}
-- code OK recorded done by the caller; HELD_BY_OTHER
-- held by the attempt with `token`, which took it over; DONE_BY_OTHER done
-- by the attempt with `token`; FOREIGN a value echomq did not write.
-- Nothing changed on a negative code. Marking done again answers OK.
local mk = KEYS[1]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local now = server_now()

local v = rcall('GET', mk)
if v then
  local state, t = marker_state(v)
  if state == 'done' then
    if t == token then return {CODE.OK, now, t} end
    return {CODE.DONE_BY_OTHER, now, t}
  end
  if state ~= 'held' then return {CODE.FOREIGN, now, 0} end
  if t ~= token then return {CODE.HELD_BY_OTHER, now, t} end
end
rcall('SET', mk, 'done:' .. token, 'PX', ttl)
return {CODE.OK, now, token}
