-- retry: settles a leased job whose handler failed; counts a failure.
--
-- KEYS[1] job (hash)  KEYS[2] active  KEYS[3] pending  KEYS[4] delayed
-- KEYS[5] failed      KEYS[6] wake
-- ARGV[1] key prefix  ARGV[2] job id  ARGV[3] fencing token
-- ARGV[4] delay before the next attempt, milliseconds (due = TIME + delay)
-- ARGV[5] error text  ARGV[6] default max_attempts (the job's own wins)
-- ARGV[7] retention of failed jobs (as in complete.lua)
--
-- failures += 1; when failures reaches max_attempts the job fails for good.
-- Returns {code, now, due}: 1 scheduled again (due = 0 when pending at
-- once), 3 failed terminally, 2 already settled this way with this token,
-- -1 no such job, -2 lease lost (nothing changed).
local jk = KEYS[1]
local k = {active = KEYS[2], pending = KEYS[3], delayed = KEYS[4], failed = KEYS[5], wake = KEYS[6]}
local prefix, id, token = ARGV[1], ARGV[2], ARGV[3]
local delay, err = tonumber(ARGV[4]), ARGV[5]
local default_max, keep = tonumber(ARGV[6]), tonumber(ARGV[7])
local now = server_now()
local refused, dd = check_owner(jk, token, 'r', now)
if refused then return refused end
local moves = new_moves()
local r = settle_retry(moves, k, prefix, jk, id, token, now, delay, err, default_max, keep, dd)
apply_moves(moves, k, prefix, -1, keep)
return r
