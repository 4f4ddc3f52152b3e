-- lib/mint.lua: new jobs: their numbers, ids, pending scores and first
-- fields, and storing them (enqueue.lua, schedule_fire.lua).
--
-- Needs: base (rcall, int_s, now_str), keyspace (pending_score), payload (put_payload), events (events_on, emit),
-- lanes (lane_push).

-- Hands out job numbers from the counter `seq_key`: `mint(left)` returns
-- the next, taking numbers for the `left` jobs still to come in one INCRBY
-- when it has none (a bulk enqueue then pays one command, not one per
-- job). A job of the batch refused afterwards (an existing id, a dedup
-- marker) leaves its number unused: numbers order jobs and name minted
-- ids, and need not be consecutive.
local function minter(seq_key)
  local nxt, last = 1, 0
  return function(left)
    if nxt > last then
      last = rcall('INCRBY', seq_key, left)
      nxt = last - left + 1
    end
    nxt = nxt + 1
    return nxt - 1
  end
end

-- A new job, not stored yet (store_job does), numbered `seq` (minter; an
-- empty `id` becomes that number: minted ids are all
-- digits, which caller ids may not be, src/job.rs) and returns its id, its
-- pending score (a decimal string) and its hash fields: state delayed with a `due` time, else
-- pending; `lm` its limits ("" for the defaults, then no field); `lane`
-- its lane ("" for none); `kind` its kind ("" or nil for none: no `kd`
-- field, as records from before kinds have none); `tp` its traceparent
-- ("" or nil for none); `split` whether the queue splits payloads
-- (lib/payload.lua payload_split); `aging` the queue's priority aging (nil
-- for none: lib/meta.lua queue_aging) and `nth` the job's place in its call
-- (lib/keyspace.lua pending_score).
local function new_job(seq, id, payload, priority, lm, lane, due, now, kind, tp, split, aging, nth)
  if id == '' then id = int_s(seq) end
  local score = pending_score(priority, seq, aging, due or now, nth or 0)
  local h = {'st', due and 'delayed' or 'pending', 'sc', score, 'ct', now_str(now)}
  put_payload(h, payload, split)
  if lm ~= '' then h[#h + 1] = 'lm'; h[#h + 1] = lm end
  if lane ~= '' then h[#h + 1] = 'ln'; h[#h + 1] = lane end
  if kind and kind ~= '' then h[#h + 1] = 'kd'; h[#h + 1] = kind end
  if tp and tp ~= '' then h[#h + 1] = 'tp'; h[#h + 1] = tp end
  return id, score, h
end

-- Stores job `id` with hash fields `h` (new_job's, perhaps with more) on
-- delayed until `due`, or on pending at `score` (on lane `lane` unless it
-- is ""). Returns true when it went to pending (the caller wakes a
-- consumer for it). With `adds` ({pending = {}, delayed = {}}) the set
-- moves of unlaned jobs are collected there for one variadic ZADD per set
-- (add_all), which a bulk enqueue pays once instead of once per job.
local function store_job(prefix, pending_key, delayed_key, id, score, due, h, lane, adds)
  rcall('HSET', prefix .. 'job:' .. id, unpack(h))
  if events_on(prefix) then
    local kind
    for i = 1, #h, 2 do
      if h[i] == 'kd' then kind = h[i + 1] end
    end
    emit(prefix, 'enqueued', id, {'ln', lane, 'kd', kind, 'due', due and int_s(due)})
  end
  local into = adds and (due and adds.delayed or adds.pending)
  if lane ~= '' and not due then
    lane_push(prefix, pending_key, lane, score, id)
  elseif into then
    into[#into + 1] = due and int_s(due) or score
    into[#into + 1] = id
  elseif due then
    rcall('ZADD', delayed_key, int_s(due), id)
  else
    rcall('ZADD', pending_key, score, id)
  end
  return not due
end

-- Applies the set moves store_job collected in `adds`, and empties it.
local function add_all(adds, pending_key, delayed_key)
  if #adds.pending > 0 then rcall('ZADD', pending_key, unpack(adds.pending)) end
  if #adds.delayed > 0 then rcall('ZADD', delayed_key, unpack(adds.delayed)) end
  adds.pending, adds.delayed = {}, {}
end
