-- progress: records what a running attempt reports about its job, fenced
-- like a settlement (only the attempt holding the lease may write it): its
-- progress (a JSON value, shown by inspection and evented), or its
-- checkpoint (a JSON value the next attempt reads to resume: after a
-- stall, a release or a retry), or clears the checkpoint.
--
-- KEYS[1] job (hash)
-- ARGV[1] token  fencing token of the calling attempt
-- ARGV[2] value  the value, JSON ("" with `ck`: clears the checkpoint)
-- ARGV[3] field  "pg" progress (the default) or "ck" checkpoint
--
-- REPLY: {code:code, now:int}
-- code OK recorded; NOT_FOUND; LEASE_LOST (nothing changed).
--
-- Events (lib/events.lua, unless the queue turned them off): progress (a
-- checkpoint is not evented: an iterable job may save one per step).
local jk = KEYS[1]
local now = server_now()
local refused, owner = check_owner(jk, ARGV[1], nil, now)
if refused then return refused end
if ARGV[3] == 'ck' then
  if ARGV[2] == '' then rcall('HDEL', jk, 'ck') else rcall('HSET', jk, 'ck', ARGV[2]) end
  return {CODE.OK, now}
end
rcall('HSET', jk, 'pg', ARGV[2])
local prefix, id = job_parts(jk)
if prefix then emit_job(prefix, 'progress', id, jk, {'pg', ev_text(ARGV[2])}, owner) end
return {CODE.OK, now}
