-- marker_abandon: the holder gives its effect marker back because the
-- effect certainly did not happen (EffectMarker::abandon in src/effect.rs;
-- marker values as in marker_claim.lua). The next attempt then finds the
-- marker fresh instead of orphaned.
--
-- KEYS[1] marker (string)
-- ARGV[1] fencing token of the calling attempt
--
-- Returns {code, now, attempt}: 1 removed (or already absent); -4 held by
-- attempt `attempt`, which took it over; -5 done by attempt `attempt` (a
-- finished effect is never given back, not even by its own attempt);
-- -6 a value echomq did not write. Nothing changed on a negative code.
local mk = KEYS[1]
local token = tonumber(ARGV[1])
local now = server_now()

local v = rcall('GET', mk)
if not v then return {1, now, 0} end
local kind, t, p = string.match(v, '^(%a+):(%d+):?(%d*)$')
t = tonumber(t)
if kind == 'done' and p == '' then return {-5, now, t} end
if kind ~= 'held' or p == '' then return {-6, now, 0} end
if t ~= token then return {-4, now, t} end
rcall('DEL', mk)
return {1, now, token}
