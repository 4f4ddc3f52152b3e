-- extend: renews a lease (the heartbeat).
--
-- KEYS[1] job (hash)  KEYS[2] active (zset)
-- ARGV[1] id     job id
-- ARGV[2] token  fencing token
-- ARGV[3] lease  milliseconds
--
-- REPLY: {code:code, now:int, [deadline:int, cancel:int]}
-- code OK, extended to deadline = TIME + lease, with cancel 1 when an
-- operator asked to cancel the job (cancel.lua), else 0; NOT_FOUND;
-- LEASE_LOST (nothing changed; no deadline or cancel follows). Extending
-- is naturally idempotent, so there is no ALREADY answer.
local jk, active_key = KEYS[1], KEYS[2]
local id, token, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = server_now()
local refused, owner = check_owner(jk, token, nil, now)
if refused then return refused end
local deadline = now + lease
rcall('ZADD', active_key, 'XX', deadline, id)
local cancel = 0
if owner.cx then cancel = 1 end
return {CODE.OK, now, deadline, cancel}
