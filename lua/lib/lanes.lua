-- lib/lanes.lua: lanes (docs/lanes.md). A laned job waits in its lane's
-- zset PREFIX:{Q}:lane:LANE, scored by its own `sc` (so priority, then mint
-- order, hold within the lane), and also in `pending` at score LANED, above
-- every `sc`: so `pending` still counts and lists every pending job, while
-- the unlaned turns (which ZPOPMIN `pending`) never take a laned one. The
-- queue's lane keys are built from its prefix, as job keys are (same slot):
--   lanes:ring    zset, every lane with pending or active jobs: a ready
--                 lane (pending jobs and a free slot) is scored by its turn
--                 number (ZPOPMIN gives the next), one without a free slot
--                 LANE_BLOCKED, one with active jobs only LANE_IDLE. The
--                 member "" (never a lane name) stands for the unlaned jobs
--                 while lanes are in use (claim.lua claim_turns).
--   lanes:active  zset of "LANE\0ID" (all score 0), one per active laned job:
--                 a lane's active count is a ZLEXCOUNT, and giving its slot
--                 back is a ZREM that succeeds once (lane names and ids hold
--                 no control characters, so the ranges never overlap)
--   lanes:cap, lanes:weight  hashes lane -> cap / weight; field "" holds
--                 the queue-wide default (lane names are never empty)
--   lanes:turn    hash: `seq` the last turn number handed out; `lane` and
--                 `used` the lane whose turn a claim's limit cut short and
--                 the jobs it took in that turn
--   lanes:wait    zset lane -> server ms when a stopped lane may give jobs
--                 again (throttle.lua)
-- A queue that has never had a laned job has none of these keys, and
-- claim_jobs takes the unlaned path (lanes_in_use).
--
-- Needs: base (rcall, server_now), keyspace (wake), meta (queue_meta, meta_v3).

local LANED = 9007199254740992       -- 2^53: a laned job's score in `pending`
local LANE_BLOCKED = 1125899906842624 -- 2^50: ring score of a lane at its cap
local LANE_IDLE = 2251799813685248    -- 2^51: ring score of a lane with no pending jobs
-- Lanes a claim may look at beyond its limit (lanes found without a free
-- slot after a cap was lowered), so a claim's work stays bounded.
local LANE_SLACK = 16

local function lane_key(prefix, lane)
  return prefix .. 'lane:' .. lane
end

-- The member of lanes:active holding a slot of `lane` for job `id`.
local function held_member(lane, id)
  return lane .. '\0' .. id
end

-- Active jobs of `lane`.
local function lane_active(prefix, lane)
  return rcall('ZLEXCOUNT', prefix .. 'lanes:active', '[' .. lane .. '\0', '(' .. lane .. '\1')
end

-- The cap of `lane`, its own or the queue's default; nil for none.
local function lane_cap(prefix, lane)
  local c = rcall('HMGET', prefix .. 'lanes:cap', lane, '')
  return tonumber(c[1] or c[2])
end

-- The weight of `lane` (jobs per turn), its own or the queue's default
-- (1 unless set); "" is the unlaned jobs, which take the default.
local function lane_weight(prefix, lane)
  local w = rcall('HMGET', prefix .. 'lanes:weight', lane, '')
  return tonumber(w[1] or w[2]) or 1
end

-- When `lane` may give jobs again (server ms) if it is stopped now; nil
-- when it is not.
local function lane_shut(prefix, lane, now)
  local s = tonumber(rcall('ZSCORE', prefix .. 'lanes:wait', lane))
  if s and s > (now or server_now()) then return s end
  return nil
end

-- A new turn number: the back of the ring.
local function next_turn(prefix)
  return rcall('HINCRBY', prefix .. 'lanes:turn', 'seq', 1)
end

-- Whether lanes may be in use in the queue: whether lanes:ring exists.
-- From layout 3 on, the meta hash's `ln` says whether it may (the first
-- lane to enter the ring sets it, mark_lanes, and a claim that finds no
-- ring clears it), so a queue without lanes pays no command for them; a
-- queue of layout 2 asks with an EXISTS.
local function lanes_in_use(prefix)
  local v3 = meta_v3(prefix)
  if v3 and not queue_meta(prefix)[8] then return false end
  if rcall('EXISTS', prefix .. 'lanes:ring') == 1 then return true end
  if v3 then
    rcall('HDEL', prefix .. 'meta', 'ln')
    queue_meta(prefix)[8] = false
  end
  return false
end

-- Sets the meta hash's `ln` (lanes_in_use) before a lane enters the ring.
local function mark_lanes(prefix)
  if not meta_v3(prefix) then return end
  local m = queue_meta(prefix)
  if not m[8] then
    rcall('HSET', prefix .. 'meta', 'ln', '1')
    m[8] = '1'
  end
end

-- Puts `lane` where its counts say: out of the ring when it has neither
-- pending nor active jobs, LANE_IDLE with active jobs only, LANE_BLOCKED
-- with pending jobs and no free slot, else ready (a lane already ready
-- keeps its turn; one that becomes ready goes to the back and wakes a
-- consumer). The one place that decides a lane's place. Returns true when
-- it moved the lane.
local function lane_settle(prefix, lane)
  local ring = prefix .. 'lanes:ring'
  local score = rcall('ZSCORE', ring, lane)
  score = tonumber(score)
  local pending = rcall('ZCARD', lane_key(prefix, lane))
  local active = lane_active(prefix, lane)
  local want
  if pending == 0 then
    if active > 0 then want = LANE_IDLE end
  else
    local cap = lane_cap(prefix, lane)
    if cap and active >= cap then
      want = LANE_BLOCKED
    elseif lane_shut(prefix, lane) then
      -- its window reopens later: reopen_lanes readies it then
      want = LANE_BLOCKED
    elseif score and score < LANE_BLOCKED then
      return false
    else
      want = next_turn(prefix)
    end
  end
  if want == score then return false end
  if want then
    if not score then mark_lanes(prefix) end
    rcall('ZADD', ring, want, lane)
    if want < LANE_BLOCKED then wake(prefix .. 'wake', 1) end
  else
    rcall('ZREM', ring, lane)
  end
  return true
end

-- Puts laned job `id` (pending score `sc`) on its lane and on `pending`.
-- A lane that had no pending jobs takes its place in the ring.
local function lane_push(prefix, pending_key, lane, sc, id)
  rcall('ZADD', lane_key(prefix, lane), sc, id)
  rcall('ZADD', pending_key, LANED, id)
  local s = tonumber(rcall('ZSCORE', prefix .. 'lanes:ring', lane))
  if not s or s >= LANE_IDLE then lane_settle(prefix, lane) end
end

-- Puts the stopped lanes whose time has come (lanes:wait) back where
-- their counts say, at most `n` of them, so they take turns again.
local function reopen_lanes(prefix, now, n)
  local wait = prefix .. 'lanes:wait'
  local due = rcall('ZRANGEBYSCORE', wait, '-inf', now, 'LIMIT', 0, n)
  if #due == 0 then return end
  rcall('ZREM', wait, unpack(due))
  for _, lane in ipairs(due) do lane_settle(prefix, lane) end
end
