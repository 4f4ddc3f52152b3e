-- layout: stamps a new queue with echomq's layout version and answers the
-- version found; or, asked to, moves a queue from an older version to it
-- (Queue::upgrade_layout). Opening a queue runs it first, so a user the
-- server's ACL does not allow to run scripts (or to touch the queue's
-- keys) is refused there, with a clear error, instead of on every later
-- call.
--
-- KEYS[1] meta (hash)
-- ARGV[1] version  the layout version this echomq writes
-- ARGV[2] from     "" to stamp only; else an older version this echomq
--                  also serves: a queue at it moves to `version`
--
-- REPLY: version:str
-- The version stored (the caller's, for a new queue or one just moved).
rcall('HSETNX', KEYS[1], 'v', ARGV[1])
local v = rcall('HGET', KEYS[1], 'v')
if ARGV[2] ~= '' and v == ARGV[2] then
  rcall('HSET', KEYS[1], 'v', ARGV[1])
  return ARGV[1]
end
return v
