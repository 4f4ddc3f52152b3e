-- layout: stamps a new queue with echomq's layout version and answers the
-- version found. Opening a queue runs it first, so a user the server's ACL
-- does not allow to run scripts (or to touch the queue's keys) is refused
-- there, with a clear error, instead of on every later call.
--
-- KEYS[1] meta (hash)
-- ARGV[1] version  the layout version this echomq writes
--
-- REPLY: version:str
-- The version stored (the caller's, for a new queue).
rcall('HSETNX', KEYS[1], 'v', ARGV[1])
return rcall('HGET', KEYS[1], 'v')
