-- fail: settles a leased job as failed for good (no further attempts).
--
-- KEYS[1] job (hash)  KEYS[2] active  KEYS[3] failed
-- ARGV[1] key prefix  ARGV[2] job id  ARGV[3] fencing token
-- ARGV[4] reason      ARGV[5] retention of failed jobs (as in complete.lua)
--
-- Returns {code, now}: 1 failed; 2 already failed with this token;
-- -1 no such job; -2 lease lost (nothing changed).
local jk, active_key, failed_key = KEYS[1], KEYS[2], KEYS[3]
local prefix, id, token, reason, keep = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local now = server_now()
local refused = check_owner(jk, token, 'f', now)
if refused then return refused end
rcall('ZREM', active_key, id)
finish(prefix, failed_key, jk, id, 'failed', now, keep, {'err', reason, 'lo', 'f:' .. token})
return {1, now}
