-- layout: stamps a new queue with echomq's layout version and answers the
-- version found; or, asked to, moves a queue from an older version to it
-- (Queue::upgrade_layout). Opening a queue runs it first, so a user the
-- server's ACL does not allow to run scripts (or to touch the queue's
-- keys) is refused there, with a clear error, instead of on every later
-- call.
--
-- KEYS[1] meta (hash)  KEYS[2] limits (hash)  KEYS[3] ring (the lanes:ring zset)
-- ARGV[1] version  the layout version this echomq writes
-- ARGV[2] from     "" to stamp only; else an older version this echomq
--                  also serves: a queue at it moves to `version`
--
-- Stamping or moving a queue to version 3 moves what layout 2 kept apart
-- into the meta hash (lib/meta.lua): the limits hash's `max`, `rate` and
-- `hold`, and `ln` when lanes:ring exists (a stamp finds them when the
-- queue's meta hash was deleted while the rest stayed).
--
-- REPLY: version:str
-- The version stored (the caller's, for a new queue or one just moved).
local meta, limits, ring = KEYS[1], KEYS[2], KEYS[3]

local function into_v3()
  if tonumber(ARGV[1]) < 3 then return end
  local l = hfields(limits, 'max', 'rate', 'hold')
  if l then
    local fields = {}
    for i, name in ipairs({'max', 'rate', 'hold'}) do
      if l[i] then
        fields[#fields + 1] = name
        fields[#fields + 1] = l[i]
      end
    end
    if #fields > 0 then rcall('HSET', meta, unpack(fields)) end
    rcall('DEL', limits)
  end
  if rcall('EXISTS', ring) == 1 then rcall('HSET', meta, 'ln', '1') end
end

if rcall('HSETNX', meta, 'v', ARGV[1]) == 1 then
  into_v3()
  return ARGV[1]
end
local v = rcall('HGET', meta, 'v')
if ARGV[2] ~= '' and v == ARGV[2] then
  rcall('HSET', meta, 'v', ARGV[1])
  into_v3()
  return ARGV[1]
end
return v
