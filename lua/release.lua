-- release: hands a leased job back unfinished (graceful shutdown). It is
-- claimable at once and counts as neither a failure nor a stall.
--
-- KEYS[1] job (hash)  KEYS[2] active  KEYS[3] pending  KEYS[4] wake
-- ARGV[1] job id  ARGV[2] fencing token
--
-- Returns {code, now}: 1 released; 2 already released with this token;
-- -1 no such job; -2 lease lost (nothing changed).
local jk = KEYS[1]
local k = {active = KEYS[2], pending = KEYS[3], wake = KEYS[4]}
local id, token = ARGV[1], ARGV[2]
local now = server_now()
local refused = check_owner(jk, token, 'l', now)
if refused then return refused end
local moves = new_moves()
local r = settle_release(moves, k, jk, id, token, now)
apply_moves(moves, k, '', -1, -1)
return r
