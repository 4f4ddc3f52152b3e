-- marker_abandon: the holder gives its effect marker back because the
-- effect certainly did not happen (EffectMarker::abandon in src/effect/marker.rs;
-- marker values as in marker_claim.lua). The next attempt then finds the
-- marker fresh instead of orphaned.
--
-- KEYS[1] marker (string)
-- ARGV[1] token  fencing token of the calling attempt
--
-- REPLY: {code:code, now:int, token:int}
-- code OK removed (or already absent); HELD_BY_OTHER
-- held by the attempt with `token`, which took it over; DONE_BY_OTHER done
-- by the attempt with `token` (a finished effect is never given back, not
-- even by its own attempt); FOREIGN a value echomq did not write. Nothing
-- changed on a negative code.
local mk = KEYS[1]
local token = ARGV[1]
local now = server_now()

local v = rcall('GET', mk)
if not v then return {CODE.OK, now, 0} end
local state, t = marker_state(v)
if state == 'done' then return {CODE.DONE_BY_OTHER, now, t} end
if state ~= 'held' then return {CODE.FOREIGN, now, 0} end
if t ~= token then return {CODE.HELD_BY_OTHER, now, t} end
rcall('DEL', mk)
return {CODE.OK, now, token}
