-- pause: pauses or resumes a queue. While the meta hash holds `paused`,
-- every claim (claim.lua, and the leases settle.lua hands out) leases
-- nothing, in every process: the check and the lease are one script, so
-- once this call returns no claim is applied until the queue is resumed.
-- Enqueue, settlement, reaping and promotion go on.
--
-- KEYS[1] meta (hash)  KEYS[2] wake (list)
-- ARGV[1] paused  "1" to pause, "0" to resume
--
-- REPLY: {now:int, changed:int}
-- changed 1 when the queue was not already in that state. Resuming wakes
-- the waiting consumers.
--
-- Events (lib/events.lua, unless the queue turned them off): paused, resumed
-- (only when the state changed).
local meta_key, wake_key = KEYS[1], KEYS[2]
local now = server_now()
local prefix = string.sub(meta_key, 1, -5)
if ARGV[1] == '1' then
  local changed = rcall('HSET', meta_key, 'paused', '1')
  if changed == 1 then emit(prefix, 'paused', '') end
  return {now, changed}
end
local changed = rcall('HDEL', meta_key, 'paused')
if changed == 1 then
  wake(wake_key, WAKE_CAP)
  emit(prefix, 'resumed', '')
end
return {now, changed}
