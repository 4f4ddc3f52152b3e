-- complete: settles a leased job as done.
--
-- KEYS[1] job (hash)  KEYS[2] active (zset)  KEYS[3] completed (zset)
-- ARGV[1] key prefix "emq:{Q}:"   ARGV[2] job id   ARGV[3] fencing token
-- ARGV[4] retention: -1 keep all, 0 delete the record, n keep the newest n
--
-- Returns {code, now}: 1 completed; 2 already completed with this token (a
-- retried settle whose first reply was lost); -1 no such job; -2 lease lost
-- (not active, or a newer token owns it): nothing changed.
local jk, active_key, completed_key = KEYS[1], KEYS[2], KEYS[3]
local prefix, id, token, keep = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now = server_now()
local refused = check_owner(jk, token, 'c', now)
if refused then return refused end
rcall('ZREM', active_key, id)
finish(prefix, completed_key, jk, id, 'completed', now, keep, {'lo', 'c:' .. token})
return {1, now}
