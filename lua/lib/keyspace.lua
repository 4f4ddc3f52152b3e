-- lib/keyspace.lua: the queue's keys as the scripts see them (lua/README.md
-- lists every key and every job-hash field; src/keys.rs names the keys on
-- the Rust side): the job key's parts, the pending score, the wake list,
-- the obliterating mark, dedup and effect markers, SCAN patterns.
--
-- Needs: base (rcall, sget, hfields, int_s).

-- The queue prefix and job id of job key `jk` (PREFIX:{Q}:job:ID: the
-- first '}' closes the hash tag, as neither prefix nor queue holds one).
local function job_parts(jk)
  return string.match(jk, '^(.-}:)job:(.*)$')
end

-- Pending scores: (127 - priority) * 2^45 + mint number, so ZPOPMIN takes
-- the highest priority first, then the oldest; an exact integer in a double.
local PRIO_STEP = 35184372088832

-- With priority aging (`aging` ms of waiting worth one priority level,
-- aging.lua): (ready - AGE_EPOCH + (127 - priority) * aging) * 1024 + nth,
-- ready being the server ms the job became ready (enqueued, or due) and
-- nth its place among the jobs of the call that minted it (at most 1,023;
-- a call mints at most 1,000): a job of priority p is taken before one of
-- priority p + d enqueued more than d * aging ms after it, so a waiting
-- job's effective priority rises with its wait without rescoring anyone.
-- Below 2^50 until about 2060 for agings up to an hour (aging.lua's most).
local AGE_EPOCH = 1735689600000 -- 2025-01-01T00:00:00Z

-- The pending score of a job of `priority` minted as number `seq` (the
-- queue's `aging`, or nil; the job's `ready` ms and `nth` for aging).
local function pending_score(priority, seq, aging, ready, nth)
  if aging then
    return int_s(((ready - AGE_EPOCH) + (127 - priority) * aging) * 1024 + math.min(nth, 1023))
  end
  -- as decimal strings: a number argument is formatted with %.17g, which costs more
  return int_s((127 - priority) * PRIO_STEP + seq)
end

-- Leaves up to `n` wake tokens for consumers blocked on the wake list
-- (capped so a busy queue does not grow it without bound).
local WAKE_CAP = 64
local function wake(wake_key, n)
  local room = WAKE_CAP - rcall('LLEN', wake_key)
  if n > room then n = room end
  for _ = 1, n do rcall('LPUSH', wake_key, '1') end
end

-- True while obliterate.lua deletes the queue: its first step marks the
-- meta hash (deleted last), and the scripts that could make a key the
-- deletion has already passed (promotion, a retry or promotion by hand,
-- the sweep, a schedule's tick) write nothing meanwhile.
local function obliterating(prefix)
  local r = redis.pcall('HEXISTS', prefix .. 'meta', 'ob')
  return r == 1
end

-- A dedup marker PREFIX:de:DEDUP holds its holder's id: "ID" for a marker
-- that stands until the job finishes (the job's `dd`) or for a TTL, or
-- "ID\31LETTERS" for a unique-by-states marker (EnqueueOptions::unique:
-- ids hold no control characters), which holds while the holder's state
-- is one of LETTERS (STATE_LETTER), looked up when an enqueue finds it.
local STATE_LETTER = {pending = 'p', delayed = 'd', active = 'a', completed = 'c', failed = 'f', cancelled = 'x',
  expired = 'e'}

-- A marker's value: the holder's id and, for a by-states one, its letters.
local function marker_parts(v)
  local id, letters = string.match(v, '^(.-)\31(%a+)$')
  if id then return id, letters end
  return v, nil
end

-- The id of the job marker value `v` stands for while it holds, else nil,
-- and the holder's state when it was read (by-states markers only). A
-- by-states marker holds while its holder's record exists in one of its
-- states; the others hold while they stand.
local function marker_holder(prefix, v)
  local id, letters = marker_parts(v)
  if not letters then return id end
  local st = hfields(prefix .. 'job:' .. id, 'st')
  st = st and st[1]
  if st and STATE_LETTER[st] and string.find(letters, STATE_LETTER[st], 1, true) then return id, st end
  return nil
end

-- Releases dedup marker PREFIX:de:`dd` if job `id` still holds it (a
-- finished or removed job; nothing when `dd` is nil).
local function release_dedup(prefix, dd, id)
  if dd then
    local mk = prefix .. 'de:' .. dd
    if sget(mk) == id then rcall('DEL', mk) end
  end
end

-- An effect marker's value `v` (marker_claim.lua): 'held', T, P for
-- "held:T:P", 'done', T for "done:T", nil for a value echomq did not write.
local function marker_state(v)
  local kind, t, p = string.match(v, '^(%a+):(%d+):?(%d*)$')
  if kind == 'done' and p == '' then return 'done', t end
  if kind == 'held' and p ~= '' then return 'held', t, p end
  return nil
end

-- The SCAN MATCH pattern of the keys that start with `text` (the prefix
-- holds the queue name, which may contain glob characters: they are
-- escaped; callers still compare each key's start as a plain string).
local function match_prefix(text)
  return (string.gsub(text, '[%*%?%[%]\\]', '\\%0')) .. '*'
end
