-- enqueue: adds jobs, one or many in one call, perhaps to a batch.
--
-- KEYS[1] seq      mint counter          KEYS[2] pending (zset)
-- KEYS[3] delayed  (zset)                KEYS[4] wake (list)
-- KEYS[5] expiring (zset: the jobs with an expiry, lib/expiry.lua)
-- ARGV[1] prefix  key prefix "emq:{Q}:" (job and dedup keys are built from
--                 it; they carry the same hash tag, so they live in the same slot)
-- ARGV[2] batch   "" for none, else the id of an open batch the jobs join
--                 (lib/batch.lua: each job stored holds it in `bt`)
-- ARGV[3] jobs    number of jobs N, then 14 fields per job:
--   id          "" to mint one from seq
--   payload     JSON bytes
--   priority    integer -128..127, higher runs first
--   delay       milliseconds, 0 for none (due = TIME + delay); or "@MS": due at
--               MS, ms since the Unix epoch on the server's clock (a time
--               already past is now)
--   limits      the job's `lm` field ("" for the defaults; see lib/budget.lua)
--   dedup       "" for none, else the dedup id
--   dedup_ttl   milliseconds the dedup marker stands; 0 = until the job
--               finishes (or, with `unique`, no TTL)
--   replace     "1": when the dedup marker's holder is waiting (pending or
--               delayed), replace its payload and due time with this job's
--               (debounce); "0": leave the holder alone
--   lane        "" for none, else the job's lane (kept as `ln`; a pending
--               laned job waits on its lane, see lib/lanes.lua)
--   kind        "" for none, else the job's kind (kept as `kd`; claims
--               hand it to the worker, which routes the job by it)
--   traceparent "" for none, else the W3C traceparent of the enqueuing
--               span (kept as `tp`; claims hand it to the worker)
--   expires     "" for none; else the job's expiry (kept as `xa`): "MS",
--               milliseconds from the server's now, or "@MS", ms since the
--               Unix epoch on the server's clock. A job not started by then
--               ends expired (lib/expiry.lua); a debounce keeps the
--               holder's expiry.
--   unique      "" for a dedup marker that stands until the job finishes
--               or for its TTL; else the state letters in which the job
--               holds its dedup id (lib/keyspace.lua STATE_LETTER,
--               EnqueueOptions::unique): a marker found taken holds only
--               while its holder's state is one of its letters
--   sequence    "" for none; else the job's sequence key (kept as `sq`;
--               lib/sequence.lua): a job behind others of its key waits,
--               delayed at SEQ_WAIT, until they ended
--
-- REPLY: {now:int, (status:code, id:str)*}
-- With a batch that does not exist or is closed, one (status, id) only:
-- NOT_FOUND or CLOSED and the batch's id, and nothing written. Otherwise
-- one (status, id) per job, in order: OK created (taking the dedup id
-- over when its marker no longer holds),
-- EXISTS a job with that id already exists (nothing written), DEDUPED the
-- dedup marker is held by job id (nothing written), REPLACED the dedup
-- marker is held by waiting job id, whose payload and due time are now
-- this job's (its id, priority, limits, lane, created time, counters and pending
-- place are kept; the marker is set again as this job asks). Jobs are
-- handled in order, so a later job of the call may replace an earlier one.
--
-- Events (lib/events.lua, unless the queue turned them off): enqueued (each
-- job stored), replaced (a debounce).
local seq_key, pending_key, delayed_key, wake_key, expiring_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, batch = ARGV[1], ARGV[2]
local n = tonumber(ARGV[3])
local now = server_now()
local out = {now}
-- the batch the jobs join, and how many of them did
local batch_key, joined
if batch ~= '' then
  batch_key = prefix .. 'batch:' .. batch
  local b = hfields(batch_key, 'n', 'cl')
  if not (b and b[1]) then return {now, CODE.NOT_FOUND, batch} end
  if b[2] then return {now, CODE.CLOSED, batch} end
  joined = 0
end
local woken = 0
-- whether a job of this call has a sequence (the queue's `sq` is set once)
local sequenced = false
local mint = minter(seq_key)
-- whether payloads are split (lib/payload.lua), read with the queue's settings
local split = payload_split(prefix)
-- the queue's priority aging (lib/keyspace.lua pending_score), nil for none
local aging = queue_aging(prefix)
-- new jobs' set moves, applied in one ZADD per set (lib/mint.lua store_job)
local adds = {pending = {}, delayed = {}}
-- the new jobs with an expiry, for one ZADD to expiring
local expiring = {}

-- Sets dedup marker `mk` to job `id` as this enqueue asks, with its
-- fields appended to the job's fields `h`: by states `states` (not ""),
-- the marker's value carries them and the job keeps `uq` (STATES, or
-- STATES/TTL_MS: a hand retry takes the marker again with them) and `dq`
-- (the dedup id); else for `ttl` ms, or (ttl 0) until the job finishes,
-- which finish() and remove.lua learn from the job's `dd`. A TTL is set
-- on the marker in either case. Returns the mode ('states', 'ttl' or
-- 'finish'): a job being replaced drops the other modes' fields.
local function hold(mk, id, ttl, dedup, states, h)
  local v = id
  if states ~= '' then v = id .. '\31' .. states end
  if ttl > 0 then rcall('SET', mk, v, 'PX', ttl) else rcall('SET', mk, v) end
  if states ~= '' then
    local uq = states
    if ttl > 0 then uq = states .. '/' .. int_s(ttl) end
    h[#h + 1] = 'uq'; h[#h + 1] = uq
    h[#h + 1] = 'dq'; h[#h + 1] = dedup
    return 'states'
  end
  if ttl > 0 then return 'ttl' end
  h[#h + 1] = 'dd'; h[#h + 1] = dedup
  return 'finish'
end

-- Debounce: waiting job `id` (state `st`, pending or delayed) takes
-- `payload`, is due at `due` (nil: now) and holds marker `mk` as this
-- enqueue asks; it stays in exactly one set, and keeps its place on
-- pending when it stays there.
local function replace(id, st, payload, due, mk, ttl, dedup, states)
  -- the holder may be a job of this call, whose set move is still in `adds`
  add_all(adds, pending_key, delayed_key)
  local jk = prefix .. 'job:' .. id
  -- a holder waiting for its turn in a sequence keeps waiting
  local turn = st == 'delayed' and sequences_on(prefix) and rcall('HGET', jk, 'sq')
  if turn and seq_waiting(prefix, turn, id) then due, st = nil, 'waiting' end
  local h = {}
  put_payload(h, payload, split)
  -- the old payload's parts past the new one's
  if split then rcall('HDEL', jk, 'p2', 'p3', 'p4') end
  if due then
    if st == 'pending' then
      from_pending(pending_key, id, rcall('HGET', jk, 'ln') or nil)
      h[#h + 1] = 'st'; h[#h + 1] = 'delayed'
    end
    rcall('ZADD', delayed_key, due, id)
  elseif st == 'delayed' then
    rcall('ZREM', delayed_key, id)
    to_pending(pending_key, jk, id)
    woken = woken + 1
  end
  local mode = hold(mk, id, ttl, dedup, states, h)
  if mode == 'states' then
    rcall('HDEL', jk, 'dd')
  elseif mode == 'ttl' then
    rcall('HDEL', jk, 'dd', 'uq', 'dq')
  else
    rcall('HDEL', jk, 'uq', 'dq')
  end
  rcall('HSET', jk, unpack(h))
  emit(prefix, 'replaced', id, {'due', due and int_s(due)})
end

for j = 0, n - 1 do
  -- job j's fields, named here once in the header's order
  local b = 4 + j * 14
  local id, payload = ARGV[b], ARGV[b + 1]
  local priority, when = tonumber(ARGV[b + 2]), ARGV[b + 3]
  -- The due time, or nil to be pending at once.
  local due
  if string.sub(when, 1, 1) == '@' then
    due = tonumber(string.sub(when, 2))
  elseif tonumber(when) > 0 then
    due = now + tonumber(when)
  end
  if due and due <= now then due = nil end
  local lm, dedup, dedup_ttl = ARGV[b + 4], ARGV[b + 5], tonumber(ARGV[b + 6])
  local replacing = ARGV[b + 7] == '1'
  local lane, kind, tp, expires = ARGV[b + 8], ARGV[b + 9], ARGV[b + 10], ARGV[b + 11]
  local states, sequence = ARGV[b + 12], ARGV[b + 13]
  local status = CODE.OK
  local mk
  if dedup ~= '' then
    mk = prefix .. 'de:' .. dedup
    -- (a marker key of another type is not echomq's: it is replaced)
    local v = sget(mk)
    local holder, st
    if v then holder, st = marker_holder(prefix, v) end
    if holder then
      status = CODE.DEDUPED
      id = holder
      if replacing then
        if not st then
          st = hfields(prefix .. 'job:' .. holder, 'st')
          st = st and st[1]
        end
        if st == 'pending' or st == 'delayed' then
          status = CODE.REPLACED
          replace(holder, st, payload, due, mk, dedup_ttl, dedup, states)
        end
      end
    end
  end
  if status == CODE.OK and id ~= '' and rcall('EXISTS', prefix .. 'job:' .. id) == 1 then
    status = CODE.EXISTS
  end
  if status == CODE.OK then
    local score, h
    id, score, h = new_job(mint(n - j), id, payload, priority, lm, lane, due, now, kind, tp, split, aging, j)
    if mk then hold(mk, id, dedup_ttl, dedup, states, h) end
    if expires ~= '' then
      local xa = string.sub(expires, 1, 1) == '@' and string.sub(expires, 2) or int_s(now + tonumber(expires))
      h[#h + 1] = 'xa'; h[#h + 1] = xa
      expiring[#expiring + 1] = xa
      expiring[#expiring + 1] = id
    end
    if batch_key then
      h[#h + 1] = 'bt'; h[#h + 1] = batch
      joined = joined + 1
    end
    if sequence ~= '' then
      h[#h + 1] = 'sq'; h[#h + 1] = sequence
      sequenced = true
      if not seq_join(prefix, sequence, id) then
        h[2] = 'delayed'
        due = SEQ_WAIT
      end
    end
    if store_job(prefix, pending_key, delayed_key, id, score, due, h, lane, adds) then woken = woken + 1 end
  end
  out[#out + 1] = status
  out[#out + 1] = id
end
add_all(adds, pending_key, delayed_key)
if joined and joined > 0 then rcall('HINCRBY', batch_key, 'n', joined) end
if sequenced and not sequences_on(prefix) then rcall('HSET', prefix .. 'meta', 'sq', '1') end
if #expiring > 0 then rcall('ZADD', expiring_key, unpack(expiring)) end
if woken > 0 then wake(wake_key, woken) end
return out
