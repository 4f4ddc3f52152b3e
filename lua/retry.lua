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
local jk, active_key, pending_key, delayed_key, failed_key, wake_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, id, token = ARGV[1], ARGV[2], tonumber(ARGV[3])
local delay, err = tonumber(ARGV[4]), ARGV[5]
local default_max, keep = tonumber(ARGV[6]), tonumber(ARGV[7])
local now = server_now()
local refused = check_owner(jk, token, 'r', now)
if refused then return refused end
rcall('ZREM', active_key, id)
local failures = rcall('HINCRBY', jk, 'f', 1)
local max = tonumber(rcall('HGET', jk, 'ma') or default_max)
local settled = 'r:' .. token
if failures >= max then
  finish(prefix, failed_key, jk, id, 'failed', now, keep, {'err', err, 'lo', settled})
  return {3, now, 0}
end
rcall('HSET', jk, 'err', err, 'lo', settled)
if delay > 0 then
  rcall('HSET', jk, 'st', 'delayed')
  rcall('ZADD', delayed_key, now + delay, id)
  return {1, now, now + delay}
end
to_pending(pending_key, jk, id)
wake(wake_key, 1)
return {1, now, 0}
