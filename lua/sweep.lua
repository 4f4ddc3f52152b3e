-- sweep: one bounded step of the consistency sweep (docs/operating-the-server.md: the consistency sweep repairs what a torn write left). Checks
-- that each job's state agrees with the set that holds it, exactly once,
-- and repairs what a torn write (Redis 7.0 can apply part of a script after
-- a torn AOF tail) or a lost key left behind.
--
-- KEYS[1] pending  KEYS[2] active  KEYS[3] delayed  KEYS[4] completed
-- KEYS[5] failed   KEYS[6] cancelled  KEYS[7] expired
-- KEYS[8] seq (mint counter, for a job that lost its score)
-- KEYS[9] expiring (the jobs with an expiry, lib/expiry.lua)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] phase   "jobs", a set's KEYS index 1..7, "held", "ring", "markers",
--                 "sequences", "flows" or "keys"
-- ARGV[3] cursor  "0" to start (ignored by "keys")
-- ARGV[4] count   COUNT hint per step
-- ARGV[5] chain   optional; "chain": a phase among 1..7, "held", "ring"
--                 that ends in this call goes on into the next of them,
--                 while fewer than `count` were checked (so a small queue's
--                 sets are swept in one call)
-- KEYS[10..] with phase "keys": job hashes (PREFIX .. "job:" .. ID),
--           dedup markers (PREFIX .. "de:" .. DEDUP), sequence lines
--           (PREFIX .. "sequence:" .. KEY) and flows (PREFIX .. "flow:"
--           .. FID) to check, as a walk
--           of the keyspace found them (maintenance/sweep.rs: one walk for
--           all the queues of a prefix, instead of a SCAN per queue)
--
-- Phase "jobs" SCANs job hashes: a job whose set lacks it is put back (an
-- active job with its deadline now, so the reaper returns it; pending at
-- its own score; delayed due now; finished at its finish time), and it is
-- removed from any other set. A hash without a payload is deleted; one
-- with an unknown state becomes pending; one without a valid score `sc`
-- gets a fresh one (priority 0, the next mint number, or now with aging, as lib/mint.lua
-- new_job computes it), since every later move back to pending ZADDs at `sc`. A
-- non-numeric finish time `ft` counts as now. A waiting job with an expiry
-- (`xa`) is put back on expiring if a torn write lost it there (claims
-- would still expire it; the reaper's pass would not). Phase 1..7 ZSCANs that set:
-- members whose job key is missing, or is not a hash, are removed.
--
-- Lanes (lib/lanes.lua): in phase "jobs" a laned job is also put on
-- its lane when pending (and in `pending` at score LANED) and taken off it
-- otherwise, holds its lane's slot (a lanes:active member) exactly while
-- active, and its lane is settled in the ring. Phase "held" ZSCANs
-- lanes:active and gives back slots whose job is not an active job of that
-- lane; phase "ring" ZSCANs lanes:ring and puts each lane where its counts
-- say (lane_settle: ready, blocked, idle, or out when it has no jobs),
-- after putting back the lanes a rate limit or a handler's hold stopped
-- whose time has come (lanes:wait, lib/throttle.lua), and sets the meta
-- hash's `ln` if the ring exists without it. So a torn write cannot keep
-- a lane's slot, or its place in the ring, lost.
--
-- The sweep repairs or skips, and never raises on malformed data (a raise
-- would recur at the same cursor on every run and wedge the sweep there).
-- Skipped, never deleted (they may be someone's data), and counted: a key
-- under the job pattern that is not a hash; a job whose set key, or the
-- seq key, holds another type; in phase 1..7, a set key of another type.
--
-- In phase "jobs" a finished batch member not counted yet (an older
-- process finished it) is counted toward its batch (lib/batch.lua), which
-- may end the batch and enqueue its callbacks; a finished step of another
-- queue's flow whose end was not sent home (`fd`) has it sent now.
--
-- Phase "sequences" SCANs the sequence lines (lib/sequence.lua): a head
-- that ended or is gone without moving its line on (a process without
-- sequences settled it, or a torn write) is taken off it, and a head
-- left waiting at SEQ_WAIT is made pending, so no key waits for ever.
--
-- Phase "flows" SCANs the flows (lib/flow.lua): a step whose job ended
-- (or is gone) without its end reaching its flow — a process without
-- flows settled it — gets its end delivered now, so its parents are
-- released or failed as its edges say, and no parent waits for ever.
--
-- Phase "keys" checks each key given as phase "jobs", "markers",
-- "sequences" or "flows" checks what its SCAN finds; a key gone since the walk saw
-- it is passed over (neither checked nor skipped).
--
-- REPLY: {next_cursor:str, checked:int, repaired:int, skipped:int, phase:str}
-- `phase` is the phase the cursor belongs to (the one asked for, or with
-- "chain" the one reached).
local prefix, phase, cursor, count = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local seq_key, expiring_key = KEYS[8], KEYS[9]
local now = server_now()
-- A queue being obliterated is left to it.
if obliterating(prefix) then return {'0', 0, 0, 0, phase} end
local sets = {pending = 1, active = 2, delayed = 3, completed = 4, failed = 5, cancelled = 6, expired = 7}
local NSETS = 7
local checked, repaired, skipped = 0, 0, 0
local done_states = {completed = true, failed = true, cancelled = true, expired = true}

-- True for a key that is a sorted set or absent (a command on it cannot
-- raise WRONGTYPE).
local function zset_or_none(key)
  local t = rcall('TYPE', key)['ok']
  return t == 'zset' or t == 'none'
end

-- `s` as a finite number, or nil. Lua's tonumber also takes what ZADD
-- refuses (surrounding spaces, hex, "nan", "inf"), so only digits, sign,
-- point and exponent pass.
local function score_of(s)
  if not s or string.find(s, '[^%d%.eE%+%-]') then return nil end
  local n = tonumber(s)
  if n and n == n and n > -math.huge and n < math.huge then return n end
  return nil
end

-- Lane keys of another type are skipped, as other sets of another type are
-- (lane_settle reads the ring, the slots and the caps; the slot check reads
-- the active set).
local function hash_or_none(key)
  local t = rcall('TYPE', key)['ok']
  return t == 'hash' or t == 'none'
end
local lanes_usable = zset_or_none(prefix .. 'lanes:ring') and zset_or_none(prefix .. 'lanes:active')
  and hash_or_none(prefix .. 'lanes:cap') and hash_or_none(prefix .. 'lanes:turn') and zset_or_none(KEYS[2])

-- Checks laned job `id` (state `st`, score `sc`) against its lane: on the
-- lane's set exactly while pending, holding a slot exactly while active.
local function check_lane(id, st, sc, ln)
  local lk = lane_key(prefix, ln)
  if not lanes_usable or not zset_or_none(lk) then
    skipped = skipped + 1
    return
  end
  local changed = false
  if st == 'pending' then
    if tonumber(rcall('ZSCORE', lk, id)) ~= sc then
      rcall('ZADD', lk, sc, id)
      changed = true
    end
  elseif rcall('ZREM', lk, id) == 1 then
    changed = true
  end
  local member = held_member(ln, id)
  if st == 'active' then
    if not rcall('ZSCORE', prefix .. 'lanes:active', member) then
      rcall('ZADD', prefix .. 'lanes:active', 0, member)
      changed = true
    end
  elseif rcall('ZREM', prefix .. 'lanes:active', member) == 1 then
    changed = true
  end
  if changed then repaired = repaired + 1 end
  if lane_settle(prefix, ln) then repaired = repaired + 1 end
end

-- Checks one job hash against the sets (phase "jobs").
local function check_job(jk, usable)
  local t = rcall('TYPE', jk)['ok']
  -- gone since a walk saw it (phase "keys"; SCAN in one call never sees that)
  if t == 'none' then return end
  checked = checked + 1
  if t ~= 'hash' then
    skipped = skipped + 1
    return
  end
  local id = string.sub(jk, #prefix + 5)
  local f = rcall('HMGET', jk, 'p', 'st', 'sc', 'ft', 'ln', 'xa')
  if not f[1] then
    rcall('DEL', jk)
    for i = 1, NSETS do
      if usable[i] then rcall('ZREM', KEYS[i], id) end
    end
    repaired = repaired + 1
    return
  end
  local st = f[2]
  local want = sets[st or '']
  if not usable[want or 1] then
    skipped = skipped + 1
    return
  end
  if not want then
    st, want = 'pending', 1
    rcall('HSET', jk, 'st', st)
    repaired = repaired + 1
  end
  local sc = score_of(f[3])
  if not sc then
    -- redis.pcall: a seq key of another type answers an error, not a raise.
    local seq = redis.pcall('INCR', seq_key)
    if type(seq) ~= 'number' then
      skipped = skipped + 1
      return
    end
    sc = tonumber(pending_score(0, seq, queue_aging(prefix), now, 0))
    rcall('HSET', jk, 'sc', sc)
    repaired = repaired + 1
  end
  local ln = f[5]
  local held = tonumber(rcall('ZSCORE', KEYS[want], id))
  if st == 'pending' then
    -- a laned job sits in `pending` at LANED, an unlaned one at its score
    local score = sc
    if ln then score = LANED end
    if held ~= score then
      rcall('ZADD', KEYS[want], score, id)
      repaired = repaired + 1
    end
  elseif not held then
    local score = now
    if done_states[st] then score = score_of(f[4]) or now end
    rcall('ZADD', KEYS[want], score, id)
    repaired = repaired + 1
  end
  -- a batch member an older process finished without counting it
  if done_states[st] and batches_on(prefix) then
    local b = hfields(jk, 'bt', 'bf')
    if b and b[1] and not b[2] then
      batch_member_done(prefix, jk, st, now)
      repaired = repaired + 1
    end
  end
  -- a step of another queue's flow an older process ended without
  -- telling its home: told now (its home writes an end once)
  if done_states[st] and flows_on(prefix) then
    local s = hfields(jk, 'fh', 'fd', 'rs', 'err')
    if s and s[1] and not s[2] then
      flow_job_done(nil, prefix, KEEP_ALL, jk, id, st, st == 'completed' and s[3] or s[4], now)
      repaired = repaired + 1
    end
  end
  for i = 1, NSETS do
    if i ~= want and usable[i] and rcall('ZREM', KEYS[i], id) == 1 then repaired = repaired + 1 end
  end
  if ln then check_lane(id, st, sc, ln) end
  local xa = score_of(f[6])
  if xa and (st == 'pending' or st == 'delayed') and zset_or_none(expiring_key)
    and not rcall('ZSCORE', expiring_key, id) then
    rcall('ZADD', expiring_key, xa, id)
    repaired = repaired + 1
  end
end

local function usable_sets()
  local usable = {}
  for i = 1, NSETS do usable[i] = zset_or_none(KEYS[i]) end
  return usable
end

-- Checks one sequence line (phase "sequences", see there): a head that
-- ended (or is gone) without moving the line on is taken off it, and a
-- head still waiting at SEQ_WAIT is made pending.
local function check_sequence(lk)
  checked = checked + 1
  if rcall('TYPE', lk)['ok'] ~= 'list' then
    skipped = skipped + 1
    return
  end
  for _ = 1, 1000 do
    local head = rcall('LINDEX', lk, 0)
    if not head then return end
    local f = hfields(prefix .. 'job:' .. head, 'st', 'sc', 'ln')
    local st = f and f[1]
    if st == 'delayed' then
      if tonumber(rcall('ZSCORE', KEYS[3], head)) == SEQ_WAIT and f[2] then
        rcall('ZREM', KEYS[3], head)
        if f[3] then lane_push(prefix, KEYS[1], f[3], f[2], head) else rcall('ZADD', KEYS[1], f[2], head) end
        rcall('HSET', prefix .. 'job:' .. head, 'st', 'pending')
        wake(prefix .. 'wake', 1)
        repaired = repaired + 1
      end
      return
    end
    if st and not done_states[st] then return end
    rcall('LPOP', lk)
    repaired = repaired + 1
  end
end

-- Checks one flow (phase "flows", see there): the end of each step whose
-- job ended without its end reaching the flow is delivered now, as the
-- script that ended it would have (lib/flow.lua flow_node_done); a step
-- whose job is gone without an end counts as removed. A step on another
-- queue (`q:NAME`) is not looked at: its job is there, and its end comes
-- by message (lib/flow.lua), which the relay delivers until it is applied.
local function check_flow(fk)
  checked = checked + 1
  if rcall('TYPE', fk)['ok'] ~= 'hash' then
    skipped = skipped + 1
    return
  end
  local fid = string.sub(fk, #prefix + 6)
  local nodes = rcall('HGET', fk, 'nodes')
  if not nodes then return end
  local moves = new_moves()
  for _, name in ipairs(cut(nodes, '\31')) do
    local known = rcall('HMGET', fk, 'r:' .. name, 'w:' .. name, 'q:' .. name)
    if not known[1] and not known[2] and not known[3] then
      local f = hfields(prefix .. 'job:' .. fid .. ':' .. name, 'st', 'rs', 'err', 'fp', 'fl')
      local st = f and f[1]
      if not st or done_states[st] then
        local detail = f and (st == 'completed' and f[2] or f[3]) or nil
        -- a gone job's parents are not in its record: the flow's own edges say
        local parents = f and f[5] and (f[4] or '') or nil
        if not parents then
          parents = {}
          for _, other in ipairs(cut(nodes, '\31')) do
            for _, edge in ipairs(cut(rcall('HGET', fk, 'k:' .. other), '\30')) do
              local ce = cut(edge, '\31')
              if ce[1] == name then parents[#parents + 1] = other .. '\31' .. (ce[2] or 'f') end
            end
          end
          parents = table.concat(parents, '\30')
        end
        flow_node_done(moves, prefix, KEEP_ALL, fid, name, st or 'removed', detail, parents, now)
        repaired = repaired + 1
      end
    end
  end
  apply_moves(moves, {active = KEYS[2], completed = KEYS[4], failed = KEYS[5], cancelled = KEYS[6], expired = KEYS[7]},
    prefix, KEEP_ALL, KEEP_ALL, now)
end

-- Checks one dedup marker (phase "markers", see there).
local function check_marker(mk)
  local mine = prefix .. 'de:'
  local id = sget(mk)
  if not id then
    -- another type: someone's data under our pattern (or gone: passed over)
    if rcall('EXISTS', mk) == 1 then
      checked = checked + 1
      skipped = skipped + 1
    end
  else
    checked = checked + 1
    local holder, letters = marker_parts(id)
    local name = string.sub(mk, #mine + 1)
    if letters then
      -- by states: stale once its holder is gone, names another id, or
      -- has finished in a state that does not hold (only a hand retry
      -- brings it back, and that takes the marker again)
      local job = hfields(prefix .. 'job:' .. holder, 'st', 'dq')
      local st = job and job[1]
      if not (st and job[2] == name and (not done_states[st] or string.find(letters, STATE_LETTER[st], 1, true))) then
        rcall('DEL', mk)
        repaired = repaired + 1
      end
    elseif rcall('PTTL', mk) == -1 then
      local job = hfields(prefix .. 'job:' .. id, 'st', 'dd')
      if not (job and job[1] and not done_states[job[1]] and job[2] == name) then
        rcall('DEL', mk)
        repaired = repaired + 1
      end
    end
  end
end

-- The keys checked one at a time besides job hashes: by phase, the name
-- that follows the queue's prefix and the check.
local SCANNED = {markers = {'de:', check_marker}, sequences = {'sequence:', check_sequence},
  flows = {'flow:', check_flow}}

if phase == 'keys' then
  local usable = usable_sets()
  local jobs = prefix .. 'job:'
  for i = 10, #KEYS do
    local k = KEYS[i]
    if string.sub(k, 1, #jobs) == jobs then
      check_job(k, usable)
    else
      for _, sc in pairs(SCANNED) do
        local mine = prefix .. sc[1]
        if string.sub(k, 1, #mine) == mine then sc[2](k) end
      end
    end
  end
  return {'0', checked, repaired, skipped, phase}
end

if phase == 'jobs' then
  local usable = usable_sets()
  local mine = prefix .. 'job:'
  local r = rcall('SCAN', cursor, 'MATCH', match_prefix(mine), 'COUNT', count)
  for _, jk in ipairs(r[2]) do
    if string.sub(jk, 1, #mine) == mine then check_job(jk, usable) end
  end
  return {r[1], checked, repaired, skipped, phase}
end

-- The phases over the queue's own sets: each checks about `count` members
-- from `cur` and returns the cursor to go on from ('0': the phase is done).
local function phase_held(cur)
  local key = prefix .. 'lanes:active'
  if not lanes_usable then
    skipped = skipped + 1
    return '0'
  end
  local r = rcall('ZSCAN', key, cur, 'COUNT', count)
  local settle = {}
  for i = 1, #r[2], 2 do
    local member = r[2][i]
    checked = checked + 1
    local lane, id = string.match(member, '^([^%z]+)%z(.+)$')
    local ok = false
    if lane then
      local job = hfields(prefix .. 'job:' .. id, 'st', 'ln')
      ok = job and job[1] == 'active' and job[2] == lane and rcall('ZSCORE', KEYS[2], id)
    end
    if not ok then
      rcall('ZREM', key, member)
      repaired = repaired + 1
      if lane then settle[#settle + 1] = lane end
    end
  end
  for _, lane in ipairs(settle) do
    if lane_settle(prefix, lane) then repaired = repaired + 1 end
  end
  return r[1]
end

local function phase_ring(cur)
  if not lanes_usable then
    skipped = skipped + 1
    return '0'
  end
  -- Stopped lanes whose time has come rejoin the turn first (claims that
  -- take turns do it too, but none may run while no lane is ready).
  if cur == '0' and zset_or_none(prefix .. 'lanes:wait') then reopen_lanes(prefix, now, tonumber(count)) end
  -- A ring the meta hash does not know of (its `ln` lost to a torn write)
  -- would be passed over by every claim (lib/lanes.lua lanes_in_use).
  if cur == '0' and rcall('EXISTS', prefix .. 'lanes:ring') == 1 and not queue_meta(prefix)[8] then
    mark_lanes(prefix)
    if queue_meta(prefix)[8] then repaired = repaired + 1 end
  end
  local r = rcall('ZSCAN', prefix .. 'lanes:ring', cur, 'COUNT', count)
  for i = 1, #r[2], 2 do
    local lane = r[2][i]
    checked = checked + 1
    -- "" is the unlaned jobs' turn, which claims keep
    if lane ~= '' then
      if not zset_or_none(lane_key(prefix, lane)) then
        skipped = skipped + 1
      elseif lane_settle(prefix, lane) then
        repaired = repaired + 1
      end
    end
  end
  return r[1]
end

local function phase_set(i, cur)
  local set_key = KEYS[i]
  if not zset_or_none(set_key) then
    skipped = skipped + 1
    return '0'
  end
  local r = rcall('ZSCAN', set_key, cur, 'COUNT', count)
  for j = 1, #r[2], 2 do
    local id = r[2][j]
    checked = checked + 1
    -- A member whose key is not a hash would make claim's HMGET raise.
    if rcall('TYPE', prefix .. 'job:' .. id)['ok'] ~= 'hash' then
      rcall('ZREM', set_key, id)
      repaired = repaired + 1
    end
  end
  return r[1]
end

local function run_set_phase(name, cur)
  if name == 'held' then return phase_held(cur) end
  if name == 'ring' then return phase_ring(cur) end
  return phase_set(tonumber(name), cur)
end

local set_phases = {'1', '2', '3', '4', '5', '6', '7', 'held', 'ring'}
local at = nil
for i, name in ipairs(set_phases) do
  if name == phase then at = i end
end
if at then
  local cur = cursor
  while true do
    cur = run_set_phase(set_phases[at], cur)
    if ARGV[5] ~= 'chain' or cur ~= '0' or at == #set_phases or checked >= tonumber(count) then
      return {cur, checked, repaired, skipped, set_phases[at]}
    end
    at, cur = at + 1, '0'
  end
end

-- Phase "markers": a dedup marker without a TTL (`de:<dedup id>`, holding
-- a job id) stands until its job finishes, and only a job that names it
-- (`dd`) releases it then. One whose job is gone, finished or does not
-- name it (a torn write kept `SET de:X id` and lost the job, and the id
-- was minted again for another job) would answer "deduplicated" to every
-- later enqueue with that dedup id, forever: it is deleted. Markers with a
-- TTL expire by themselves and are left alone. A by-states marker
-- (EnqueueOptions::unique) never answers for a holder outside its states,
-- so a stale one misleads no enqueue; it is deleted, with a TTL or
-- without, once its holder is gone, does not name it (`dq`), or finished
-- in a state that does not hold.
-- (Phases "sequences" and "flows": see the header.)
local scanned = SCANNED[phase]
if scanned then
  local mine = prefix .. scanned[1]
  local r = rcall('SCAN', cursor, 'MATCH', match_prefix(mine), 'COUNT', count)
  for _, k in ipairs(r[2]) do
    if string.sub(k, 1, #mine) == mine then scanned[2](k) end
  end
  return {r[1], checked, repaired, skipped, phase}
end

return {'0', 0, 0, 0, phase}
