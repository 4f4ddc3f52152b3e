-- progress: records a running job's progress (a JSON value), fenced like
-- a settlement: only the attempt holding the lease may write it.
--
-- KEYS[1] job (hash)
-- ARGV[1] token  fencing token of the calling attempt
-- ARGV[2] value  the progress, JSON
--
-- REPLY: {code:code, now:int}
-- code OK recorded; NOT_FOUND; LEASE_LOST (nothing changed).
--
-- Events (lib/events.lua, unless the queue turned them off): progress.
local jk = KEYS[1]
local now = server_now()
local refused, owner = check_owner(jk, ARGV[1], nil, now)
if refused then return refused end
rcall('HSET', jk, 'pg', ARGV[2])
local prefix, id = job_parts(jk)
if prefix then emit_job(prefix, 'progress', id, jk, {'pg', ev_text(ARGV[2])}, owner) end
return {CODE.OK, now}
