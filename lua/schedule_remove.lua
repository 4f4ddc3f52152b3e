-- schedule_remove: removes a cron schedule; the jobs it already made stay.
--
-- KEYS[1] schedules  index (zset)   KEYS[2] schedule  the schedule's hash
-- ARGV[1] name       the schedule's name
--
-- The hash goes first, so a torn write leaves at worst an index member
-- without a hash, which schedule_due drops. Once this returns, no
-- schedule_fire makes a job for the schedule (it finds no hash).
--
-- REPLY: existed:int
-- 1 when the schedule existed, else 0.
local existed = rcall('DEL', KEYS[2])
rcall('ZREM', KEYS[1], ARGV[1])
return existed
