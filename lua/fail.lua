-- fail: settles a leased job as failed for good (no further attempts).
--
-- KEYS[1] job (hash)  KEYS[2] active  KEYS[3] failed
-- ARGV[1] key prefix  ARGV[2] job id  ARGV[3] fencing token
-- ARGV[4] reason      ARGV[5] retention of failed jobs (as in complete.lua)
--
-- Returns {code, now}: 1 failed; 2 already failed with this token;
-- -1 no such job; -2 lease lost (nothing changed).
local jk = KEYS[1]
local k = {active = KEYS[2], failed = KEYS[3]}
local prefix, id, token, reason, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local now = server_now()
local refused, dd = check_owner(jk, token, 'f', now)
if refused then return refused end
local moves = new_moves()
local r = settle_fail(moves, prefix, jk, id, token, now, reason, keep, dd)
apply_moves(moves, k, prefix, -1, keep)
return r
