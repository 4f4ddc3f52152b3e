-- lib/claim.lua: leasing pending jobs: in pending order while no lane is
-- in use, else lanes taking turns (claim_turns), within the queue's
-- throttles; each job leased gets a fencing token and its attempt (used
-- by claim.lua and settle.lua, which claims after settling).
--
-- Needs: base (rcall, hfields, int_s, now_str), keyspace (wake), meta (queue_meta),
-- payload (PAYLOAD_CHUNK, joined_payload), events (events_on, record_job), lanes (LANED, LANE_BLOCKED,
-- LANE_IDLE, LANE_SLACK, lane_key, held_member, lane_active, lane_cap, lane_weight,
-- lane_shut, reopen_lanes, lanes_in_use, mark_lanes), throttle (rate_room, rate_log, lane_rate, lane_log,
-- queue_room), sets (promote_due, new_moves, unlease, apply_moves, KEEP_ALL), fence (mint_tokens),
-- expiry (past_expiry, expire).

-- The fields of job record `jk` a lease needs, in this order: p, f, a,
-- lm, kd, ct, st, ln, tp (lease_job reads them by position), the rest
-- of a split payload, p2, p3, p4 (lib/payload.lua; false when absent),
-- and xa, its expiry (lib/expiry.lua); nil for a key of another type.
-- p3 and p4 are asked for only behind a full p2: a field the record lacks
-- costs the server a scan of the whole record, about 1,200 instructions
-- (benches/README.md). (One HGETALL instead, picking the fields in Lua,
-- measured the same: what it saved the server the loop cost.)
local function lease_fields(jk)
  local job = hfields(jk, 'p', 'f', 'a', 'lm', 'kd', 'ct', 'st', 'ln', 'tp', 'p2', 'xa')
  if not job then return nil end
  job[13], job[11], job[12] = job[11], false, false
  if job[10] and #job[10] == PAYLOAD_CHUNK then
    local more = rcall('HMGET', jk, 'p3', 'p4')
    job[11], job[12] = more[1], more[2]
  end
  return job
end

-- Ends picked job `id` expired instead of leasing it when its expiry has
-- passed (`job`: its lease_fields; `lane` its lane, whose slot the pick
-- took, or nil). `ended` collects the moves (created on first use).
-- Returns true when it ended the job.
local function expired_pick(ended, prefix, jk, id, job, lane, now, keep)
  if not (job and job[1] and past_expiry(job[13], now)) then return false end
  if not ended.moves then ended.moves = new_moves() end
  if lane then unlease(ended.moves, id, lane) end
  expire(ended.moves, prefix, jk, id, now, keep, rcall('HGET', jk, 'dd') or nil)
  ended.n = ended.n + 1
  return true
end

-- True when unlaned jobs wait in `pending` (laned ones sit above them, at LANED).
local function unlaned_waiting(pending_key)
  local first = rcall('ZRANGE', pending_key, 0, 0, 'WITHSCORES')
  return first[2] ~= nil and tonumber(first[2]) < LANED
end

-- Pops up to `want` unlaned pending jobs into `picked`. Returns how many,
-- and whether more wait.
local function take_unlaned(pending_key, want, picked)
  local popped = rcall('ZPOPMIN', pending_key, want)
  local got, back = 0, {}
  for i = 1, #popped, 2 do
    if tonumber(popped[i + 1]) >= LANED then
      back[#back + 1] = popped[i + 1]
      back[#back + 1] = popped[i]
    else
      got = got + 1
      picked[#picked + 1] = {id = popped[i]}
    end
  end
  if #back > 0 then
    rcall('ZADD', pending_key, unpack(back))
    return got, false
  end
  return got, got == want and unlaned_waiting(pending_key)
end

-- Picks up to `limit` pending jobs while lanes are in use, taking the
-- ready lanes of the ring in turn: each lane gives up to its weight in
-- jobs per turn (fewer when its cap leaves fewer free slots, or the limit
-- runs out: then it keeps the head of the ring and its turn goes on at the
-- next claim), then goes to the back, or out when it has no pending jobs
-- (idle) or no free slot (blocked). The unlaned jobs take turns as one
-- more lane, "", of the default weight and without a cap. Within a lane,
-- jobs come in pending order (priority, then mint order). A lane that finds
-- no other lane ready takes the rest of the limit in its turn. At most
-- `limit` + LANE_SLACK lanes are looked at, whatever the number of lanes;
-- each step is a few commands on one lane or on the ring (O(log n)).
-- Appends {id, job, lane} to `picked` (job: the fields claim_jobs needs,
-- read here for laned jobs). Returns whether the claim stopped for the
-- slack with ready lanes left (claim_jobs then leaves a wake token).
local function claim_turns(k, prefix, limit, picked, now, lane_limits)
  local ring, turn_key = prefix .. 'lanes:ring', prefix .. 'lanes:turn'
  -- jobs each rate-limited lane gave in this claim (logged by claim_jobs)
  local taken = {}
  -- The turn counter is kept here and written once at the end (nothing
  -- else hands out turns while this runs).
  local t = rcall('HMGET', turn_key, 'lane', 'used', 'seq')
  local head, used, seq = t[1], tonumber(t[2]) or 0, tonumber(t[3]) or 0
  local seq0 = seq
  local function turn()
    seq = seq + 1
    return seq
  end
  local unlaned = false -- whether this claim gave the unlaned jobs a turn
  if unlaned_waiting(k.pending) and not rcall('ZSCORE', ring, '') then
    rcall('ZADD', ring, turn(), '')
    unlaned = true
  end
  local looks, cut = limit + LANE_SLACK, false
  -- Whether another lane was seen ready; looked up again once a lane has
  -- left the ready part of the ring.
  local crowded = false
  while #picked < limit do
    if looks == 0 then
      cut = true
      break
    end
    looks = looks - 1
    local p = rcall('ZPOPMIN', ring)
    if not p[1] then break end
    local lane, score = p[1], tonumber(p[2])
    if score >= LANE_BLOCKED then
      -- the rest of the ring is blocked or idle
      rcall('ZADD', ring, p[2], lane)
      break
    end
    if lane ~= head then head, used = lane, 0 end
    local w = lane_weight(prefix, lane)
    if used >= w then used = 0 end
    local want = math.min(w - used, limit - #picked)
    if want < limit - #picked and not crowded then
      -- No other lane ready: nobody to take turns with, so take the rest.
      local nxt = rcall('ZRANGE', ring, 0, 0, 'WITHSCORES')
      if not nxt[2] or tonumber(nxt[2]) >= LANE_BLOCKED then want = limit - #picked else crowded = true end
    end
    local place -- the lane's ring score after this turn; nil: out of the ring
    if lane == '' then
      unlaned = true
      local got, more = take_unlaned(k.pending, want, picked)
      used = used + got
      if more then
        if used >= w then place, used = turn(), 0 else place = score end
      end
    else
      local active, cap = lane_active(prefix, lane), lane_cap(prefix, lane)
      if cap and want > cap - active then want = cap - active end
      local lk = lane_key(prefix, lane)
      -- its rate limit, or a handler's rate_limited, may stop it until
      -- `shut` (looked up only when some lane has a limit or is stopped)
      local rn, rw, shut
      if lane_limits then
        rn, rw = lane_rate(prefix, lane)
        shut = lane_shut(prefix, lane, now)
      end
      if not shut and rn then
        local room, at = rate_room(lane_log(prefix, lane), rn, rw, now, taken[lane] or 0)
        if room <= 0 then shut = at elseif want > room then want = room end
      end
      if shut or want <= 0 then
        -- stopped until `shut`, or no free slot (its cap or the default
        -- was lowered): blocked, or idle when it has no pending job
        if shut then rcall('ZADD', prefix .. 'lanes:wait', 'GT', shut, lane) end
        if rcall('ZCARD', lk) > 0 then place = LANE_BLOCKED elseif active > 0 then place = LANE_IDLE end
        used = 0
      else
        local popped = rcall('ZPOPMIN', lk, want)
        local gone, held = {}, {}
        for i = 1, #popped, 2 do
          local id = popped[i]
          -- Only a pending job of this lane is leased: an id without a
          -- record, or one a torn write (or an older echomq's claim) left
          -- here, is dropped from the lane, as claim drops pending ids
          -- without a record. Its entry in `pending` goes too unless a
          -- pending job holds that id (another lane's, or an unlaned job
          -- that reuses the id): that one stays claimable.
          local job = lease_fields(prefix .. 'job:' .. id)
          if job and job[1] and job[7] == 'pending' and job[8] == lane then
            gone[#gone + 1] = id
            picked[#picked + 1] = {id = id, job = job, lane = lane}
            held[#held + 1] = 0
            held[#held + 1] = held_member(lane, id)
            active = active + 1
            used = used + 1
          elseif not (job and job[7] == 'pending') then
            gone[#gone + 1] = id
          end
        end
        if #gone > 0 then rcall('ZREM', k.pending, unpack(gone)) end
        -- the slots are taken now, so a later turn of this claim counts them
        if #held > 0 then rcall('ZADD', prefix .. 'lanes:active', unpack(held)) end
        local full -- its rate limit is used up: when it reopens
        if rn then
          taken[lane] = (taken[lane] or 0) + #held / 2
          local room, at = rate_room(lane_log(prefix, lane), rn, rw, now, taken[lane])
          if room <= 0 then full = at end
        end
        if rcall('ZCARD', lk) == 0 then
          if active > 0 then place = LANE_IDLE end
          used = 0
        elseif cap and active >= cap then
          place, used = LANE_BLOCKED, 0
        elseif full then
          rcall('ZADD', prefix .. 'lanes:wait', 'GT', full, lane)
          place, used = LANE_BLOCKED, 0
        elseif used >= w then
          place, used = turn(), 0
        else
          place = score
        end
      end
    end
    if place then rcall('ZADD', ring, place, lane) end
    if not place or place >= LANE_BLOCKED then crowded = false end
  end
  if head then
    rcall('HSET', turn_key, 'lane', head, 'used', used, 'seq', seq)
  elseif seq ~= seq0 then
    rcall('HSET', turn_key, 'seq', seq)
  end
  -- The unlaned jobs need no turn of their own once no lane is left.
  if unlaned and rcall('ZCARD', ring) == 1 and rcall('ZSCORE', ring, '') then rcall('DEL', ring) end
  return cut
end

-- Leases job `id` (record `jk` of the queue whose keys start with
-- `prefix`; its fields `job`, as lease_fields reads them) with fencing
-- token `token` until `deadline_s`: attempts += 1, state active, holder.
-- Appends its reply fields to `out` (claim's reply, lua/README.md) and
-- its deadline and id to `zargs` (the active set's ZADD), and its
-- `claimed` event when `cap` (the queue's events_on) is set. A pending id without a record
-- (evicted, a torn write, a foreign key) is dropped.
local function lease_job(prefix, jk, id, job, token, now, deadline_s, holder, lane, zargs, out, cap)
  if not job or not job[1] then return end
  local attempt = int_s((tonumber(job[3]) or 0) + 1)
  local token_s = int_s(token)
  -- one write for the attempt, the token and the state (the script is atomic)
  if attempt == '1' then
    rcall('HSET', jk, 'a', attempt, 'tk', token_s, 'st', 'active', 'hd', holder, 'fs', now_str(now))
  else
    rcall('HSET', jk, 'a', attempt, 'tk', token_s, 'st', 'active', 'hd', holder)
  end
  local z = #zargs
  zargs[z + 1] = deadline_s
  zargs[z + 2] = id
  if cap then record_job(prefix, 'claimed', cap, id, 'a', attempt, 'tk', token_s, 'ln', lane, 'kd', job[5]) end
  -- two reply elements a job, the payload and the rest NUL-joined (lua/README.md,
  -- claim): each element costs the client a parse, about 1,200 instructions
  -- (benches/README.md, "The replies the client parses"); the fields most jobs
  -- lack are left off when a job has none of them
  local o = #out
  local head = id .. '\0' .. token_s .. '\0' .. attempt .. '\0' .. (job[6] or '0')
  local f, lm, kd, tp = job[2], job[4], job[5], job[9]
  if f or lm or kd or tp or lane ~= '' then
    head = head .. '\0' .. (f or '0') .. '\0' .. (lm or '') .. '\0' .. lane .. '\0' .. (kd or '') .. '\0' .. (tp or '')
  end
  out[o + 1] = head
  out[o + 2] = job[10] and joined_payload(job[1], job[10], job[11], job[12]) or job[1]
end

-- Leases up to `limit` pending jobs until now + lease, after promoting up
-- to `limit` due delayed jobs when `promote` is set (a plain claim does;
-- the settle path, hot under load, leaves promotion to the reaper and to
-- plain claims). Leases nothing while the queue is paused (pause.lua).
-- Without lanes in use it pops `pending` in order, as it did before lanes
-- existed (lanes.lua lanes_in_use); with lanes, lanes take turns
-- (claim_turns).
-- The queue's global cap, its rate limit and a handler's hold
-- (throttle.lua queue_room) lease fewer jobs, or none: then the wake list is
-- cleared (a consumer that finds nothing waits for a slot to free, which
-- wakes it, or for the time `wait` says) and `wait` is the ms until the
-- queue's window reopens (0: no time to wait for; a freed slot wakes).
-- A picked job whose expiry has passed ends expired instead (expired_pick;
-- kept as `keep`, the queue's retention of failed jobs says).
-- `k` holds pending, active, delayed, wake, token, meta, expired; `holder` names
-- the claiming consumer (stored as `hd`).
-- Appends {deadline, wait, id_1, token_1, attempt_1, failures_1, limits_1,
-- payload_1, lane_1, kind_1, created_1, traceparent_1, ...} to `out` (lane,
-- kind and traceparent "" for none; created: the record's `ct`, server ms,
-- "0" if it has none);
-- `wait` also says when the first stopped lane reopens, when the claim
-- leased fewer than `limit` jobs.
local function claim_jobs(k, prefix, now, lease, limit, promote, holder, out, keep)
  local deadline = now + lease
  out[#out + 1] = deadline
  out[#out + 1] = 0
  local wait_at = #out
  if limit <= 0 then return end
  if queue_meta(prefix)[4] then
    -- Idle consumers sleep until resume wakes them.
    rcall('DEL', k.wake)
    return
  end
  if promote then promote_due(k.delayed, k.pending, k.wake, prefix, now, limit) end
  local stop, rn, rw, soon
  limit, stop, rn, rw, soon = queue_room(prefix, k.active, now, limit)
  if stop then
    rcall('DEL', k.wake)
    out[wait_at] = stop - now
    return
  end
  -- the rate limit left room for fewer than asked: when the next slot frees
  if soon then out[wait_at] = math.max(soon - now, 1) end
  -- the tokens of the jobs leased, when a rate limit logs them
  local logged = {}
  local deadline_s = int_s(deadline)
  local zargs = {}
  local ended = {n = 0}
  local cap = events_on(prefix)
  if not lanes_in_use(prefix) then
    local popped = rcall('ZPOPMIN', k.pending, limit)
    -- Nothing left to hand out: clear stale wake tokens so idle consumers sleep.
    if #popped / 2 < limit then rcall('DEL', k.wake) end
    if #popped > 0 and tonumber(popped[#popped]) >= LANED then
      -- Laned jobs while no lane is in the ring (a torn write): they wait
      -- for their lane, which the sweep puts back. (Scores come in order,
      -- so one look at the last tells.) Or while the ring is there but
      -- the meta hash lost `ln` (a torn write too): the next claim takes
      -- turns again.
      if rcall('EXISTS', prefix .. 'lanes:ring') == 1 then
        queue_meta(prefix)[8] = false
        mark_lanes(prefix)
      end
      local keep, back = {}, {}
      for i = 1, #popped, 2 do
        local into = keep
        if tonumber(popped[i + 1]) >= LANED then into = back end
        into[#into + 1] = popped[i]
        into[#into + 1] = popped[i + 1]
      end
      for i = 1, #back, 2 do back[i], back[i + 1] = back[i + 1], back[i] end
      rcall('ZADD', k.pending, unpack(back))
      popped = keep
    end
    local n = #popped / 2
    if n == 0 then return end
    local token = mint_tokens(k.token, now, n) - n
    for i = 1, #popped, 2 do
      local id = popped[i]
      local jk = prefix .. 'job:' .. id
      token = token + 1
      local job = lease_fields(jk)
      -- Only a job whose record says pending: a torn write (a restart that
      -- replayed part of a script) can leave a finished or running job's id
      -- on pending too, and leasing it would run it again. Its id just
      -- leaves pending; the sweep puts the job where its state says.
      if job and job[7] and job[7] ~= 'pending' then job = nil end
      if job and job[13] and expired_pick(ended, prefix, jk, id, job, nil, now, keep) then job = nil end
      lease_job(prefix, jk, id, job, token, now, deadline_s, holder, '', zargs, out, cap)
      if rn and #zargs > 2 * #logged then logged[#logged + 1] = int_s(token) end
    end
  else
    local lane_limits = rcall('EXISTS', prefix .. 'lanes:rate', prefix .. 'lanes:wait') > 0
    if lane_limits then reopen_lanes(prefix, now, limit + LANE_SLACK) end
    local picked = {}
    if claim_turns(k, prefix, limit, picked, now, lane_limits) then
      wake(k.wake, 1)
    elseif #picked < limit then
      rcall('DEL', k.wake)
      if lane_limits then
        local first = rcall('ZRANGE', prefix .. 'lanes:wait', 0, 0, 'WITHSCORES')
        if first[2] then out[wait_at] = math.max(tonumber(first[2]) - now, 1) end
      end
    end
    local n = #picked
    if n == 0 then return end
    local token = mint_tokens(k.token, now, n) - n
    local by_lane = {} -- lane -> tokens leased, for the lanes' logs
    for _, pick in ipairs(picked) do
      local jk = prefix .. 'job:' .. pick.id
      token = token + 1
      local job = pick.job or lease_fields(jk)
      if expired_pick(ended, prefix, jk, pick.id, job, pick.lane, now, keep) then job = nil end
      lease_job(prefix, jk, pick.id, job, token, now, deadline_s, holder, pick.lane or '', zargs, out, cap)
      if #zargs > 2 * #logged then
        logged[#logged + 1] = int_s(token)
        if pick.lane and lane_limits then
          by_lane[pick.lane] = by_lane[pick.lane] or {}
          table.insert(by_lane[pick.lane], int_s(token))
        end
      end
    end
    for lane, tokens in pairs(by_lane) do
      local ln, lw = lane_rate(prefix, lane)
      if ln then rate_log(lane_log(prefix, lane), lw, now, tokens) end
    end
  end
  if #zargs > 0 then rcall('ZADD', k.active, unpack(zargs)) end
  if rn then rate_log(prefix .. 'limits:log', rw, now, logged) end
  if ended.moves then
    apply_moves(ended.moves, k, prefix, KEEP_ALL, keep, now)
    -- the jobs behind the expired ones are someone's to claim now
    wake(k.wake, ended.n)
  end
end
