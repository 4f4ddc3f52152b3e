-- lib/sets.lua: a job's moves between the state sets (pending, delayed,
-- active, completed, failed, cancelled, expired), batched per call, and the
-- retention of finished jobs.
--
-- Needs: base (rcall, hfields, int_s, now_str), keyspace (wake, release_dedup),
-- events (events_on, ev_text, emit, emit_job), lanes (LANE_BLOCKED, lane_key, held_member,
-- lane_settle, lane_push), throttle (global_cap), batch (batches_on, batch_member_done),
-- flow (flows_on, flow_job_done), sequence (sequences_on, seq_leave).

-- Puts job `id` on pending at its own score (so a returned job keeps its
-- place: priority first, then mint order), on its lane when it has one. A
-- job whose hash is gone is skipped (returns false): there is nothing left
-- to run. The single place that makes a job pending again (requeue, reap,
-- promotion, retry_failed, the sweep's repairs); `pending_key` is
-- PREFIX:{Q}:pending, so the lane keys come from it.
local function to_pending(pending_key, jk, id)
  local f = rcall('HMGET', jk, 'sc', 'ln')
  local sc = f[1]
  if not sc then return false end
  if f[2] then
    lane_push(string.sub(pending_key, 1, -8), pending_key, f[2], sc, id)
  else
    rcall('ZADD', pending_key, sc, id)
  end
  rcall('HSET', jk, 'st', 'pending')
  return true
end

-- Takes pending job `id` (of lane `ln`, or nil) off pending, and off its
-- lane: the one way a waiting job leaves pending other than a claim
-- (remove, cancel, drain, a debounce that delays it). A lane left without
-- pending jobs goes idle or leaves the ring. Returns true if it was pending.
local function from_pending(pending_key, id, ln)
  if ln then
    local prefix = string.sub(pending_key, 1, -8)
    local lk = lane_key(prefix, ln)
    if rcall('ZREM', lk, id) == 1 and rcall('ZCARD', lk) == 0 then lane_settle(prefix, ln) end
  end
  return rcall('ZREM', pending_key, id) == 1
end

-- Moves due delayed jobs (score <= now) to pending, at most `limit`.
-- Only a job whose record says delayed moves: a torn write (a restart
-- replaying part of a script) can leave the id of a job that has since
-- finished, or runs, on delayed too, and promoting it would run it again.
-- Such an id just leaves delayed; the sweep puts any job back where its
-- state says. Returns how many moved.
local function promote_due(delayed_key, pending_key, wake_key, prefix, now, limit)
  local due = rcall('ZRANGEBYSCORE', delayed_key, '-inf', now, 'LIMIT', 0, limit)
  local moved = 0
  for _, id in ipairs(due) do
    local jk = prefix .. 'job:' .. id
    local st = hfields(jk, 'st')
    if st and st[1] == 'delayed' and to_pending(pending_key, jk, id) then
      moved = moved + 1
      emit_job(prefix, 'promoted', id, jk)
    end
  end
  if #due > 0 then
    rcall('ZREM', delayed_key, unpack(due))
    if moved > 0 then wake(wake_key, moved) end
  end
  return moved
end

-- Set moves collected while settling and applied by apply_moves with one
-- variadic command per set, so a batch of N settlements costs about two
-- commands per job instead of eight. Hash writes are not deferred, so a
-- later check in the same call sees every earlier settlement.
local function new_moves()
  return {unlease = {}, held = {}, lanes = {}, completed = {}, failed = {}, cancelled = {}, expired = {},
    delete = {}}
end

-- Job `id` (of lane `ln`, or nil) leaves the active set: every end of a
-- lease (settlement, release, snooze, reap) goes through here, and
-- apply_moves gives its lane's slot back. A slot is given back by removing
-- the job's lanes:active member, which succeeds once per claim.
local function unlease(moves, id, ln)
  moves.unlease[#moves.unlease + 1] = id
  if ln then
    moves.held[#moves.held + 1] = held_member(ln, id)
    if not moves.lanes[ln] then
      moves.lanes[ln] = true
      moves.lanes[#moves.lanes + 1] = ln
    end
  end
end

-- A retention setting as the scripts take it: "N" (-1 keep all, 0 delete
-- the record at once, n keep the newest n) or "N/AGE_MS" (and delete
-- records finished more than AGE_MS ago).
local function retention(s)
  local n, age = string.match(s, '^(%-?%d+)/(%d+)$')
  if n then return {n = tonumber(n), age = tonumber(age)} end
  return {n = tonumber(s), age = 0}
end
local KEEP_ALL = {n = -1, age = 0}

-- Job `id` (record `jk`) ended for good or was removed: it leaves its
-- sequence (lib/sequence.lua), and the job after it, if one waits, is
-- made pending now.
local function seq_next(prefix, jk, id)
  local nxt, sc, ln = seq_leave(prefix, jk, id)
  if not nxt then return end
  rcall('ZREM', prefix .. 'delayed', nxt)
  -- as to_pending, with the fields seq_leave read
  if ln then
    lane_push(prefix, prefix .. 'pending', ln, sc, nxt)
  else
    rcall('ZADD', prefix .. 'pending', sc, nxt)
  end
  rcall('HSET', prefix .. 'job:' .. nxt, 'st', 'pending')
  wake(prefix .. 'wake', 1)
end

-- The set move of job `id` (record `jk`) finished in `state` at
-- `finished` (now_str, of server ms `now`): onto the state's set, or, with
-- retention `keep` of 0 records, its record deleted at the end of the
-- call. Every end of a job passes here, so a batch member is counted here,
-- a sequence moves on here, and a flow's node reaches its flow here (`detail`: a completed job's
-- result, else its error; nil for none).
local function finished_into(moves, prefix, keep, jk, id, state, now, finished, detail)
  if batches_on(prefix) then batch_member_done(prefix, jk, state, now) end
  if flows_on(prefix) then flow_job_done(moves, prefix, keep, jk, id, state, detail, now) end
  if sequences_on(prefix) then seq_next(prefix, jk, id) end
  if keep.n == 0 then
    moves.delete[#moves.delete + 1] = jk
    return
  end
  local into = moves[state]
  into[#into + 1] = finished
  into[#into + 1] = id
end

-- Terminal move into state `state` (completed, failed, cancelled or expired) at `now`: releases
-- the job's dedup marker `dd` if it still holds it; with retention `keep`
-- of 0 records the record is deleted, otherwise it is stamped with `fields`.
-- Its event is named after the state (`owner`: fence.lua check_owner's
-- fields, when a settlement holds them, so the event reads nothing more).
local function finish(moves, prefix, jk, id, state, now, keep, dd, fields, owner)
  release_dedup(prefix, dd, id)
  local finished = now_str(now)
  if keep.n == 0 and moves.gone then
    -- The record is deleted at the end of the call: a later item of the
    -- same call learns that it was settled from moves.gone (settled_in_call),
    -- not from the hash (one write less per job).
    local lo = ''
    for i = 1, #fields, 2 do
      if fields[i] == 'lo' then lo = fields[i + 1] end
    end
    moves.gone[jk] = lo
  else
    -- Written even when the record is about to be deleted, so a later item
    -- of the same call sees the job settled (check_owner reads the hash).
    rcall('HSET', jk, 'st', state, 'ft', finished, unpack(fields))
  end
  local err
  for i = 1, #fields, 2 do
    if fields[i] == 'err' then err = fields[i + 1] end
  end
  if events_on(prefix) then emit_job(prefix, state, id, jk, err and {'err', ev_text(err)}, owner) end
  finished_into(moves, prefix, keep, jk, id, state, now, finished, err)
end

-- Deletes job `id` (record `jk`) in state `st` (of lane `ln`, or nil),
-- which is not active, off its set in `sets` (state -> key), releasing its
-- dedup marker `dd` if it holds it: a batch member not yet ended counts as
-- ended (lib/batch.lua), a flow's step ends removed (lib/flow.lua: its
-- parents' set moves go into `moves`), a job of a sequence leaves it.
local function remove_job(moves, prefix, sets, jk, id, st, dd, ln, now)
  release_dedup(prefix, dd, id)
  if st == 'pending' then
    from_pending(sets.pending, id, ln)
  else
    rcall('ZREM', sets[st], id)
  end
  if batches_on(prefix) then batch_member_done(prefix, jk, 'removed', now) end
  if flows_on(prefix) then flow_job_done(moves, prefix, KEEP_ALL, jk, id, 'removed', nil, now) end
  if sequences_on(prefix) then seq_next(prefix, jk, id) end
  rcall('DEL', jk)
  emit(prefix, 'removed', id)
end

-- Cancels job `id` (record `jk`, `job` its hfields 'st', 'dd', 'cx',
-- 'ln'), as Queue::cancel asks: a pending or delayed job ends cancelled,
-- an active one is asked to stop (`cx`, once). Returns "cancelled",
-- "requested", "finished" (it had ended) or nil (no record, or a state
-- echomq did not write: the sweep repairs that, so it is left alone).
local function cancel_job(moves, prefix, pending_key, delayed_key, jk, id, job, keep, now)
  local st = job and job[1]
  if st == 'pending' or st == 'delayed' then
    if st == 'pending' then from_pending(pending_key, id, job[4]) else rcall('ZREM', delayed_key, id) end
    finish(moves, prefix, jk, id, 'cancelled', now, keep, job[2], {'err', 'cancelled'})
    return 'cancelled'
  elseif st == 'active' then
    if not job[3] then
      rcall('HSET', jk, 'cx', int_s(now))
      emit_job(prefix, 'cancel_requested', id, jk)
    end
    return 'requested'
  elseif st == 'completed' or st == 'failed' or st == 'cancelled' or st == 'expired' then
    return 'finished'
  end
  return nil
end

-- Deletes the oldest records of `set_key` beyond the newest `keep.n` (-1:
-- keep all) once they exceed it by TRIM_SLACK, so a steady stream of
-- completions trims every few dozen calls, not every call, and those that
-- finished more than `keep.age` ms before `now`; at most 1,000 of each per
-- call so the work stays bounded.
local TRIM_SLACK = 64
local function trim(set_key, prefix, keep, now)
  local doomed = {}
  if keep.age > 0 then
    local old = rcall('ZRANGEBYSCORE', set_key, '-inf', '(' .. int_s(now - keep.age), 'LIMIT', 0, 1000)
    if #old > 0 then
      rcall('ZREM', set_key, unpack(old))
      for _, id in ipairs(old) do doomed[#doomed + 1] = prefix .. 'job:' .. id end
    end
  end
  if keep.n > 0 then
    local over = rcall('ZCARD', set_key) - keep.n
    if over >= TRIM_SLACK then
      if over > 1000 then over = 1000 end
      local old = rcall('ZPOPMIN', set_key, over)
      for i = 1, #old, 2 do doomed[#doomed + 1] = prefix .. 'job:' .. old[i] end
    end
  end
  if #doomed > 0 then rcall('DEL', unpack(doomed)) end
end

-- Wakes up to the slots `moves` freed under the queue's global cap (as
-- many as are still free, once), when jobs are pending.
local function wake_freed(prefix, moves)
  local n = moves.freed or 0
  moves.freed = 0
  if n <= 0 then return end
  local max = global_cap(prefix)
  if max then
    local free = max - rcall('ZCARD', prefix .. 'active')
    if free < n then n = free end
  end
  if n > 0 and rcall('ZCARD', prefix .. 'pending') > 0 then wake(prefix .. 'wake', n) end
end

-- `k` holds active and the finished sets moves may go to (completed,
-- failed, cancelled, expired; one not given is PREFIX .. its name);
-- cancelled and expired jobs are kept as failed ones are.
local function apply_moves(moves, k, prefix, keep_completed, keep_failed, now)
  if #moves.unlease > 0 then
    -- Slots freed under a global cap wake consumers that found none
    -- (wake_freed; settle.lua leaves it until after its own claim).
    local max = global_cap(prefix)
    local full = max and rcall('ZCARD', k.active) >= max
    local gone = rcall('ZREM', k.active, unpack(moves.unlease))
    if full and gone > 0 then
      moves.freed = gone
      if not moves.defer then wake_freed(prefix, moves) end
    end
  end
  if #moves.held > 0 then
    rcall('ZREM', prefix .. 'lanes:active', unpack(moves.held))
    -- A ready lane stays ready; a blocked one may have a free slot now, an
    -- idle one may have no job left.
    local ring = prefix .. 'lanes:ring'
    for _, lane in ipairs(moves.lanes) do
      local s = tonumber(rcall('ZSCORE', ring, lane))
      if not s or s >= LANE_BLOCKED then lane_settle(prefix, lane) end
    end
  end
  for _, m in ipairs({{'completed', keep_completed}, {'failed', keep_failed}, {'cancelled', keep_failed},
    {'expired', keep_failed}}) do
    local into = moves[m[1]]
    if #into > 0 then
      -- a set the caller did not name (a flow parent failing in a cancel:
      -- lib/flow.lua) is the queue's own, in the same slot
      local set_key = k[m[1]] or prefix .. m[1]
      -- A finish is never scored below the newest of its set: after the
      -- server's clock went back, finishes keep the order they happened
      -- in, and retention still trims the oldest records first.
      local newest = rcall('ZRANGE', set_key, -1, -1, 'WITHSCORES')[2]
      if newest and tonumber(newest) > now then
        for i = 1, #into, 2 do into[i] = newest end
      end
      rcall('ZADD', set_key, unpack(into))
      trim(set_key, prefix, m[2], now)
    end
  end
  if #moves.delete > 0 then rcall('DEL', unpack(moves.delete)) end
end
