-- lib/sequence.lua: sequences, strict FIFO per key
-- (EnqueueOptions::sequence). The jobs of key KEY that have not ended wait
-- in the list PREFIX:{Q}:sequence:KEY, oldest first: the first (the head)
-- is an ordinary job, pending, running or waiting for a retry; the others
-- are delayed at SEQ_WAIT, a due time that never comes, so nothing but
-- the head's end moves them. Each job names its key in `sq`. The call
-- that ends the head for good (sets.lua finished_into; remove.lua) takes
-- it off and makes the next one pending, in the same atomic call; a job
-- of the key that ends while it waits (cancelled, expired, removed) just
-- leaves the list.
--
-- Needs: base (rcall, hfields), meta (queue_meta).

-- The due time of a job waiting for its turn in a sequence: 2^53 - 1.
local SEQ_WAIT = 9007199254740991

-- Whether a job with a sequence was ever enqueued on the queue (meta
-- `sq`, read with the queue's settings): a queue that never had one
-- reads no job field for them.
local function sequences_on(prefix)
  return queue_meta(prefix)[12] == '1'
end

-- Job `id` joins the back of sequence `key`: true when it is the head
-- (it may run now), false when it waits for the jobs before it.
local function seq_join(prefix, key, id)
  return rcall('RPUSH', prefix .. 'sequence:' .. key, id) == 1
end

-- Job `id` (record `jk`) ended for good, or was removed: it leaves its
-- sequence, if it has one. Returns the job that becomes the head and
-- should be made pending now (one delayed at SEQ_WAIT): its id, its
-- score `sc` and its lane (nil for none); or nil. A member whose record is
-- gone is passed over. The common end is the head's, one LPOP; for a job
-- that ends while it waits, the head popped is pushed back and the job
-- is taken out where it is.
local function seq_leave(prefix, jk, id)
  local key = rcall('HGET', jk, 'sq')
  if not key then return nil end
  local lk = prefix .. 'sequence:' .. key
  local head = rcall('LPOP', lk)
  if head and head ~= id then
    rcall('LPUSH', lk, head)
    rcall('LREM', lk, 1, id)
    return nil
  end
  while true do
    local nxt = rcall('LINDEX', lk, 0)
    if not nxt then return nil end
    local f = hfields(prefix .. 'job:' .. nxt, 'st', 'sc', 'ln')
    if f and f[1] == 'delayed' and f[2] then return nxt, f[2], f[3] or nil end
    if f and f[1] then return nil end
    rcall('LPOP', lk)
  end
end

-- Whether job `id` of sequence `key` waits for its turn (it is not the head).
local function seq_waiting(prefix, key, id)
  return rcall('LINDEX', prefix .. 'sequence:' .. key, 0) ~= id
end
