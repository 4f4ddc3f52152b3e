-- release: hands a leased job back unfinished (graceful shutdown). It is
-- claimable at once and counts as neither a failure nor a stall.
--
-- KEYS[1] job (hash)  KEYS[2] active  KEYS[3] pending  KEYS[4] wake
-- ARGV[1] job id  ARGV[2] fencing token
--
-- Returns {code, now}: 1 released; 2 already released with this token;
-- -1 no such job; -2 lease lost (nothing changed).
local jk, active_key, pending_key, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, token = ARGV[1], tonumber(ARGV[2])
local now = server_now()
local refused = check_owner(jk, token, 'l', now)
if refused then return refused end
rcall('ZREM', active_key, id)
rcall('HSET', jk, 'lo', 'l:' .. token)
to_pending(pending_key, jk, id)
wake(wake_key, 1)
return {1, now}
