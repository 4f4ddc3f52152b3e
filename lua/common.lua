-- common.lua: helpers shared by every echomq script (src/scripts/mod.rs loads
-- them and every script as one function library), so each state move and
-- each reply code is written once.
--
-- Job hash fields (absent counters read as 0; short names keep small hashes
-- in listpack encoding):
--   p   payload (JSON)            st  state: pending|delayed|active|completed|failed|cancelled
--   a   attempts (claims so far)  tk  fencing token of the current claim
--   f   failures                  s   stalls
--   sc  pending score (priority, then mint order)      ct created (server ms)
--   ft  finished (server ms)      err last error      dd dedup id (released at finish)
--   lm  limits "MAX_ATTEMPTS:MAX_STALLS:BACKOFF[;jJITTER][;tTIMEOUT_MS]", absent
--       for the defaults below; BACKOFF is "fMS" (fixed) or "eBASE_MS:MAX_MS"
--       (exponential), JITTER the backoff's jitter in thousandths (1 to 1000;
--       absent: none); the timeout is the consumer's to enforce
--   pg  progress (JSON), as the handler last reported it
--   fs  first started: when the first claim leased it (server ms)
--   eh  the last ERRORS_KEEP errors, newest first (JSON [{"at": ms, "e": text}])
--   lo  the last LO_KEEP settlements, newest first: "OP:TOKEN OP:TOKEN ..."
--       (OP: c complete, r retry, f fail, l release, s snooze, x cancel,
--       h rate limited)
--   rs  result (JSON) a completing handler returned
--   hd  holder: the consumer that made the latest claim
--   cx  cancel requested (server ms): the job ends cancelled unless its
--       running attempt completes it (cancel.lua)
--   ln  lane (absent: none), fixed at enqueue (see "Lanes" below)
--   tp  the W3C traceparent of the span that enqueued it (absent: none),
--       handed to each claim of it
-- redis.call, set by new_call: a function library's top level runs at load,
-- where redis.call is not there yet.
local rcall
local WAKE_CAP = 64
local LO_KEEP = 8
local ERRORS_KEEP = 5

-- Reply codes: one meaning each, in every script (src/scripts/codes.rs
-- decodes them; a test checks that the two tables agree).
local CODE = {
  OK = 1,              -- done as asked
  ALREADY = 2,         -- this settlement already happened with this token
  FAILED = 3,          -- a retry (or a reap) failed the job for good
  MARKER_DONE = 4,     -- an earlier attempt finished the effect
  MARKER_ORPHANED = 5, -- an attempt claimed the effect and ended without finishing it
  EXISTS = 6,          -- enqueue: a job with that id exists; nothing written
  DEDUPED = 7,         -- enqueue: the dedup marker is held by another job
  BUSY = 8,            -- the job is active (leased): an operator call left it alone
  REPLACED = 9,        -- enqueue: the dedup marker's waiting holder took this payload
  REQUESTED = 10,      -- cancel: the job is active; the request is recorded for its holder
  CANCELLED = 11,      -- the job is cancelled (at once, or by a settlement or a reap after a request)
  FINISHED = 12,       -- cancel: the job had already finished; nothing changed
  NOT_FOUND = -1,      -- no such job
  LEASE_LOST = -2,     -- not active under this token: nothing changed
  REFUSED = -3,        -- a declared effect was refused: nothing changed
  HELD_BY_OTHER = -4,  -- another attempt holds the effect marker
  DONE_BY_OTHER = -5,  -- another attempt finished the effect
  FOREIGN = -6,        -- the marker holds a value echomq did not write
  STALE = -7,          -- schedule_fire: the schedule changed since it was read; nothing written
}

-- The limits of a job without an `lm` field (src/limits.rs has the same
-- defaults; a test checks they agree).
local DEFAULT_MAX_ATTEMPTS = 3
local DEFAULT_MAX_STALLS = 3
local DEFAULT_BACKOFF = 'e1000:600000'
-- The longest delay a backoff gives (src/limits.rs MAX_DELAY).
local MAX_DELAY_MS = 31536000000

-- The server's wall clock in milliseconds. The only clock echomq trusts.
local function server_now()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- HMGET that answers nil for a key of another type (a foreign key in
-- echomq's key space) instead of raising part-way through a script.
local function hfields(key, ...)
  local r = redis.pcall('HMGET', key, ...)
  if r.err then return nil end
  return r
end

-- GET that answers nil for a key of another type, as hfields.
local function sget(key)
  local r = redis.pcall('GET', key)
  if type(r) == 'table' then return nil end
  return r
end

-- True while obliterate.lua deletes the queue: its first step marks the
-- meta hash (deleted last), and the scripts that could make a key the
-- deletion has already passed (promotion, a retry or promotion by hand,
-- the sweep, a schedule's tick) write nothing meanwhile.
local function obliterating(prefix)
  local r = redis.pcall('HEXISTS', prefix .. 'meta', 'ob')
  return r == 1
end

-- A whole number as a decimal string (tostring would give "1.8e+15").
-- string.format costs about 3,000 machine instructions a call, which
-- showed in the server's profile, so small numbers (attempts) come from
-- SMALL and a call's time is formatted once (now_str). SMALL is filled by
-- new_call at the library's first call: the top level, run at load, has
-- no `string`.
local SMALL
local function int_s(n)
  return SMALL[n] or string.format('%d', n)
end

-- `now` (the call's server time, ms) as int_s gives it, formatted once.
local now_n, now_text
local function now_str(now)
  if now ~= now_n then
    now_n, now_text = now, int_s(now)
  end
  return now_text
end

-- Leaves up to `n` wake tokens for consumers blocked on the wake list
-- (capped so a busy queue does not grow it without bound).
local function wake(wake_key, n)
  local room = WAKE_CAP - rcall('LLEN', wake_key)
  if n > room then n = room end
  for _ = 1, n do rcall('LPUSH', wake_key, '1') end
end

-- Lifecycle events (README "Events"): every transition appends one entry
-- to the queue's capped stream PREFIX:{Q}:events in the script that makes
-- it, so the events never disagree with the state. The stream id is the
-- server's time. Fields: `e` the event, `id` the job (absent for queue
-- events), then as the event has them: `a` attempt, `tk` fencing token,
-- `ln` lane, `kd` kind, `err` error text (truncated to EVENT_TEXT_MAX
-- bytes), `due` server ms a delayed job is due, `pg` progress. The queue's
-- meta hash holds the setting every process honours: `evoff` (events off)
-- and `evmax` (the stream's approximate cap, else EVENTS_MAX). It is read
-- once per script call (ev_cap caches it for the call).
--
-- A call's events are kept in order and written when the call ends
-- (end_call): consecutive events of one kind go into one stream entry of
-- up to EVENTS_PER_ENTRY jobs, `e` the event, `n` how many, `j` a JSON array
-- holding each job's fields as a flat array ("id", ID, "a", ...); a run
-- of one is written as a plain entry, as above. A claim or settlement of
-- 64 jobs is then one XADD instead of 64, which was a third of the
-- server's time per job (README "Performance"); readers expand the
-- entries (src/events.rs). Each XADD trims the stream to about cap / n
-- entries, so it holds about `cap` events whatever the runs' lengths.
-- A call that raises part-way writes none of its events.
local EVENTS_MAX = 10000
local EVENT_TEXT_MAX = 512
local EVENTS_PER_ENTRY = 64
local ev_cap -- nil: not read yet in this call; false: events off; else the cap
local ev_runs -- this call's events not written yet: {prefix, event, jobs}, in order

-- The running call's ARGV. A plain script's helpers could read ARGV as a
-- global; a library function gets it as a parameter, so new_call keeps it
-- here (the fault suite's client-clock control reads the client's time
-- from it, src/faults.rs).
local call_argv

-- Starts a call: forgets the per-call caches. The scripts run as
-- functions of one library (src/scripts/mod.rs), whose top-level locals
-- live from one call to the next: every function calls this first.
--
-- On a cluster every call declares the queue's resharding guard last (a key
-- that never exists, src/scripts/mod.rs reshard_guard): it keeps the
-- call from running while the queue's slot is split between two nodes,
-- and is dropped here so that the script sees its own KEYS.
local function new_call(keys, argv)
  rcall = redis.call
  if not SMALL then
    SMALL = {}
    for i = 0, 255 do SMALL[i] = string.format('%d', i) end
  end
  ev_cap = nil
  ev_runs = {}
  call_argv = argv
  local n = #keys
  if n > 0 and string.sub(keys[n], -14) == ':reshard-guard' then keys[n] = nil end
end

-- Whether the queue whose keys start with `prefix` records events.
local function events_on(prefix)
  if ev_cap == nil then
    local c = hfields(prefix .. 'meta', 'evoff', 'evmax')
    if c and c[1] then
      ev_cap = false
    else
      ev_cap = tonumber(c and c[2]) or EVENTS_MAX
    end
  end
  return ev_cap
end

-- Text cut to EVENT_TEXT_MAX bytes.
local function ev_text(s)
  if s and #s > EVENT_TEXT_MAX then return string.sub(s, 1, EVENT_TEXT_MAX) end
  return s
end

-- Appends field `k` with value `v` to event fields `f`, unless `v` is
-- nil, false (a missing hash field) or "".
local function put(f, k, v)
  if v and v ~= '' then
    f[#f + 1] = k
    f[#f + 1] = v
  end
end

-- Adds an event's fields `f` (flat, "id" first for a job's event, else a
-- queue event) to this call's runs, to be written when the call ends
-- (end_call). `cap`: the queue's events_on.
local function record(prefix, event, f, cap)
  local run = ev_runs[#ev_runs]
  if f[1] ~= 'id' or not run or run.event ~= event or run.prefix ~= prefix or #run.jobs >= EVENTS_PER_ENTRY then
    run = {prefix = prefix, event = event, cap = cap, jobs = {}}
    ev_runs[#ev_runs + 1] = run
  end
  run.jobs[#run.jobs + 1] = f
end

-- Records event `event` of job `id` ("" for a queue event) with the
-- fields `extra` (a flat list, nil values skipped in pairs).
local function emit(prefix, event, id, extra)
  local cap = events_on(prefix)
  if not cap then return end
  local f = {}
  if id ~= '' then
    f[1] = 'id'
    f[2] = id
  end
  if extra then
    for i = 1, #extra, 2 do put(f, extra[i], extra[i + 1]) end
  end
  record(prefix, event, f, cap)
end

-- Ends a call: writes its events (emit), one entry per run, and returns
-- `result`, the call's reply.
local function end_call(result)
  local runs = ev_runs
  ev_runs = {}
  for _, run in ipairs(runs) do
    -- a refused XADD (below) stops the rest of the call's events
    if ev_cap == false then break end
    local n = #run.jobs
    local args = {run.prefix .. 'events', 'MAXLEN', '~', int_s(math.ceil(run.cap / n)), '*', 'e', run.event}
    if n == 1 then
      for _, v in ipairs(run.jobs[1]) do args[#args + 1] = v end
    else
      args[8] = 'n'
      args[9] = int_s(n)
      args[10] = 'j'
      args[11] = cjson.encode(run.jobs)
    end
    -- pcall: a script raising part-way keeps its earlier writes (there is
    -- no rollback), so an XADD refused (a user whose ACL lacks +xadd, a
    -- foreign key of another type at the stream's name) must not raise
    -- after the call's transitions: the events are lost instead.
    local r = redis.pcall('XADD', unpack(args))
    if type(r) == 'table' and r.err then ev_cap = false end
  end
  return result
end

-- emit for job `id` (record `jk`), with its attempt, token, lane and kind
-- (`known`: a table of them, a, tk, ln, kd, when the caller holds them;
-- else read from the record), then `extra`.
local function emit_job(prefix, event, id, jk, extra, known)
  local cap = events_on(prefix)
  if not cap then return end
  local a, tk, ln, kd
  if known then
    a, tk, ln, kd = known.a, known.tk, known.ln, known.kd
  else
    local r = hfields(jk, 'a', 'tk', 'ln', 'kd')
    if r then a, tk, ln, kd = r[1], r[2], r[3], r[4] end
  end
  local f = {'id', id}
  put(f, 'a', a)
  put(f, 'tk', tk)
  put(f, 'ln', ln)
  put(f, 'kd', kd)
  if extra then
    for i = 1, #extra, 2 do put(f, extra[i], extra[i + 1]) end
  end
  record(prefix, event, f, cap)
end

-- The queue prefix and job id of job key `jk` (PREFIX:{Q}:job:ID: the
-- first '}' closes the hash tag, as neither prefix nor queue holds one).
local function job_parts(jk)
  return string.match(jk, '^(.-}:)job:(.*)$')
end

-- Pending scores: (127 - priority) * 2^45 + mint number, so ZPOPMIN takes
-- the highest priority first, then the oldest; an exact integer in a double.
local PRIO_STEP = 35184372088832

-- The job's limits from its `lm` field: max_attempts, max_stalls, backoff,
-- and the backoff's jitter in thousandths (0: none).
local function limits(lm)
  if lm then
    local ma, ms, bo = string.match(lm, '^(%d+):(%d+):([^;]+)')
    if ma then
      local jitter = tonumber(string.match(lm, ';j(%d+)')) or 0
      if jitter > 1000 then jitter = 1000 end
      return tonumber(ma), tonumber(ms), bo, jitter
    end
  end
  return DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_STALLS, DEFAULT_BACKOFF, 0
end

-- Jitter's randomness. The script's own PRNG is no use: the server may
-- seed it the same before every call. So the draw is a hash of the retry's
-- fencing token (unique per claim in the queue) and failure count, computed
-- exactly: every intermediate stays below 2^53, and `bit` (LuaBitOp) works
-- on 32 bits. src/limits.rs jitter_hash is the same, bit for bit (a unit
-- test checks values computed here).
local TWO32 = 4294967296

-- (a * b) mod 2^32 for a, b in [0, 2^32).
local function mul32(a, b)
  local bl = b % 65536
  local bh = (b - bl) / 65536
  return ((a * bh) % 65536 * 65536 + a * bl) % TWO32
end

-- murmur3's 32-bit finalizer (bit.* answer signed 32-bit numbers: % TWO32
-- makes them unsigned again).
local function mix32(h)
  h = bit.bxor(h, bit.rshift(h, 16)) % TWO32
  h = mul32(h, 2246822507) -- 0x85ebca6b
  h = bit.bxor(h, bit.rshift(h, 13)) % TWO32
  h = mul32(h, 3266489909) -- 0xc2b2ae35
  return bit.bxor(h, bit.rshift(h, 16)) % TWO32
end

-- A number in [0, 2^32) from token `tk` (below 2^53) and `failures`.
local function jitter_hash(tk, failures)
  local lo = tk % TWO32
  local hi = (tk - lo) / TWO32
  local h = mix32(failures % TWO32)
  h = mix32((h + hi) % TWO32)
  return mix32((h + lo) % TWO32)
end

-- floor(h * n / 2^32), exactly, for h in [0, 2^32) and n below 2^36.
local function scale32(h, n)
  local nl = n % 65536
  local a = h * ((n - nl) / 65536)
  local ar = a % 65536
  return (a - ar) / 65536 + math.floor((ar * 65536 + h * nl) / TWO32)
end

-- The delay (ms) after the `failures`-th failure under backoff `bo`,
-- saturating at MAX_DELAY_MS; with `jitter` (thousandths) drawn uniformly
-- from [d - floor(d * jitter / 1000), d] by the hash of token `tk` and
-- `failures` (src/limits.rs Backoff::delay_for is the same).
local function backoff_ms(bo, failures, jitter, tk)
  local d
  local fixed = string.match(bo, '^f(%d+)$')
  if fixed then
    d = tonumber(fixed)
  else
    local base, max = string.match(bo, '^e(%d+):(%d+)$')
    base, max = tonumber(base) or 1000, tonumber(max) or 600000
    local shift = failures - 1
    if shift < 0 then shift = 0 end
    if shift > 62 then shift = 62 end
    d = base * 2 ^ shift
    if d > max then d = max end
  end
  if d > MAX_DELAY_MS then d = MAX_DELAY_MS end
  if jitter > 0 then
    local span = math.floor(d * jitter / 1000)
    if span > 0 then d = d - span + scale32(jitter_hash(tk, failures), span + 1) end
  end
  return d
end

-- Lanes (README "Lanes"). A laned job waits in its lane's zset
-- PREFIX:{Q}:lane:LANE, scored by its own `sc` (so priority, then mint
-- order, hold within the lane), and also in `pending` at score LANED, above
-- every `sc`: so `pending` still counts and lists every pending job, while
-- the unlaned turns (which ZPOPMIN `pending`) never take a laned one. The
-- queue's lane keys are built from its prefix, as job keys are (same slot):
--   lanes:ring    zset, every lane with pending or active jobs: a ready
--                 lane (pending jobs and a free slot) is scored by its turn
--                 number (ZPOPMIN gives the next), one without a free slot
--                 LANE_BLOCKED, one with active jobs only LANE_IDLE. The
--                 member "" (never a lane name) stands for the unlaned jobs
--                 while lanes are in use (claim_turns).
--   lanes:active  zset of "LANE\0ID" (all score 0), one per active laned job:
--                 a lane's active count is a ZLEXCOUNT, and giving its slot
--                 back is a ZREM that succeeds once (lane names and ids hold
--                 no control characters, so the ranges never overlap)
--   lanes:cap, lanes:weight  hashes lane -> cap / weight; field "" holds
--                 the queue-wide default (lane names are never empty)
--   lanes:turn    hash: `seq` the last turn number handed out; `lane` and
--                 `used` the lane whose turn a claim's limit cut short and
--                 the jobs it took in that turn
-- A queue that has never had a laned job has none of these keys, and
-- claim_jobs takes the unlaned path after one EXISTS.
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

-- Limits (README "Global concurrency and rate limits"). Keys built from the
-- queue's prefix (same slot):
--   limits        hash: `max` the most active (leased) jobs of the queue
--                 across every consumer (compared with ZCARD active);
--                 `rate` the queue's rate limit "N:W" (N claims per W ms);
--                 `hold` server ms until which no job of the queue is
--                 claimed (a handler's rate_limited, for an unlaned job)
--   limits:log    zset: the queue's recent claims, member the fencing
--                 token, score the claim's server ms; expires a window
--                 after the last claim
--   lanes:rate    hash lane -> "N:W"; field "" the default of lanes
--                 without their own
--   lanes:wait    zset lane -> server ms when a lane that its rate limit
--                 or a handler's rate_limited stopped may give jobs again
--                 (it sits LANE_BLOCKED in the ring until a claim at or
--                 after that time puts it back in turn: reopen_lanes)
--   lanes:log:L   zset as limits:log, for lane L
-- A rate limit is a sliding window on the server clock: in every
-- half-open window [t, t + W) at most N claims (a lease ahead counts when
-- it is claimed). A claim at `now` counts the log's entries after now - W.

-- A rate setting "N:W" as numbers; nil for none (or a value that does not parse).
local function parse_rate(s)
  if type(s) ~= 'string' then return nil end
  local n, w = string.match(s, '^(%d+):(%d+)$')
  n, w = tonumber(n), tonumber(w)
  if not n or n < 1 or w < 1 then return nil end
  return n, w
end

-- Claims still allowed now under a limit of `n` per `w` ms whose log is
-- `log_key`, after `extra` more claims at `now` not logged yet; when none
-- is, 0 and the server ms at which one more is.
local function rate_room(log_key, n, w, now, extra)
  rcall('ZREMRANGEBYSCORE', log_key, '-inf', now - w)
  local c = rcall('ZCARD', log_key)
  local room = n - c - extra
  if room > 0 then return room, 0 end
  -- the claim that must leave the window first: rank c + extra - n in
  -- time order (the unlogged ones are the newest, at `now`)
  local r = c + extra - n
  if r >= c then return 0, now + w end
  local e = rcall('ZRANGE', log_key, r, r, 'WITHSCORES')
  return 0, tonumber(e[2]) + w
end

-- Logs the claims `tokens` made at `now` in `log_key`, which expires when
-- they have all left the window.
local function rate_log(log_key, w, now, tokens)
  if #tokens == 0 then return end
  local args = {}
  for _, t in ipairs(tokens) do
    args[#args + 1] = now
    args[#args + 1] = t
  end
  rcall('ZADD', log_key, unpack(args))
  rcall('PEXPIRE', log_key, w)
end

-- The rate limit of `lane`, its own or the default: n, w; nil for none.
local function lane_rate(prefix, lane)
  local r = rcall('HMGET', prefix .. 'lanes:rate', lane, '')
  return parse_rate(r[1] or r[2])
end

local function lane_log(prefix, lane)
  return prefix .. 'lanes:log:' .. lane
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

-- Stops the claims a handler's rate_limited asks to stop until `until_ms`:
-- its lane's (`lane`), else the whole queue's. A later stop never shortens
-- an earlier one.
local function hold_starts(prefix, lane, until_ms)
  if lane then
    rcall('ZADD', prefix .. 'lanes:wait', 'GT', until_ms, lane)
    lane_settle(prefix, lane)
  else
    local cur = tonumber(rcall('HGET', prefix .. 'limits', 'hold')) or 0
    if until_ms > cur then rcall('HSET', prefix .. 'limits', 'hold', int_s(until_ms)) end
  end
end

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
-- ("" or nil for none).
local function new_job(seq, id, payload, priority, lm, lane, due, now, kind, tp)
  if id == '' then id = int_s(seq) end
  -- as decimal strings: a number argument is formatted with %.17g, which costs more
  local score = int_s((127 - priority) * PRIO_STEP + seq)
  local h = {'p', payload, 'sc', score, 'ct', now_str(now), 'st', 'pending'}
  if due then h[8] = 'delayed' end
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

-- Mints `n` fencing tokens from the queue-wide counter and returns the
-- last one: tokens never repeat for a queue, even when a job's record is
-- deleted and its id enqueued again. A new counter starts at the server
-- clock times 1000, so a queue whose keys were deleted does not mint its
-- old tokens again either.
local function mint_tokens(token_key, now, n)
  local last = rcall('INCRBY', token_key, n)
  if last == n then
    last = now * 1000 + n
    rcall('SET', token_key, int_s(last))
  end
  return last
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
      if shut then
        rcall('ZADD', prefix .. 'lanes:wait', 'GT', shut, lane)
        if rcall('ZCARD', lk) > 0 then place = LANE_BLOCKED elseif active > 0 then place = LANE_IDLE end
        used = 0
      elseif want <= 0 then
        -- no free slot (its cap or the default was lowered): blocked
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
          local job = hfields(prefix .. 'job:' .. id, 'p', 'f', 'a', 'lm', 'kd', 'ct', 'st', 'ln', 'tp')
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

-- Leases job `id` (its record's fields `job`: p, f, a, lm, kd, ct, st, ln, tp) with fencing
-- token `token` until `deadline_s`: attempts += 1, state active, holder.
-- Appends its reply fields to `out` (lane "" for none) and its deadline
-- and id to `zargs` (the active set's ZADD). A pending id without a record
-- (evicted, a torn write, a foreign key) is dropped.
local function lease_job(jk, id, job, token, now, deadline_s, holder, lane, zargs, out)
  if not job or not job[1] then return end
  local attempt = int_s((tonumber(job[3]) or 0) + 1)
  local token_s = int_s(token)
  -- one write for the attempt, the token and the state (the script is atomic)
  if attempt == '1' then
    rcall('HSET', jk, 'a', attempt, 'tk', token_s, 'st', 'active', 'hd', holder, 'fs', now_str(now))
  else
    rcall('HSET', jk, 'a', attempt, 'tk', token_s, 'st', 'active', 'hd', holder)
  end
  zargs[#zargs + 1] = deadline_s
  zargs[#zargs + 1] = id
  local prefix = string.sub(jk, 1, #jk - #id - 4)
  local cap = events_on(prefix)
  if cap then
    local f = {'id', id, 'a', attempt, 'tk', token_s}
    put(f, 'ln', lane)
    put(f, 'kd', job[5])
    record(prefix, 'claimed', f, cap)
  end
  out[#out + 1] = id
  out[#out + 1] = token_s
  out[#out + 1] = attempt
  out[#out + 1] = job[2] or '0'
  out[#out + 1] = job[4] or ''
  out[#out + 1] = job[1]
  out[#out + 1] = lane
  out[#out + 1] = job[5] or ''
  out[#out + 1] = job[6] or '0'
  out[#out + 1] = job[9] or ''
end

-- Leases up to `limit` pending jobs until now + lease, after promoting up
-- to `limit` due delayed jobs when `promote` is set (a plain claim does;
-- the settle path, hot under load, leaves promotion to the reaper and to
-- plain claims). Leases nothing while the queue is paused (pause.lua).
-- Without lanes in use it pops `pending` in order, as it did before lanes
-- existed (one EXISTS more); with lanes, lanes take turns (claim_turns).
-- The queue's global cap, its rate limit and a handler's hold (see
-- "Limits" above) lease fewer jobs, or none: then the wake list is
-- cleared (a consumer that finds nothing waits for a slot to free, which
-- wakes it, or for the time `wait` says) and `wait` is the ms until the
-- queue's window reopens (0: no time to wait for; a freed slot wakes).
-- `k` holds pending, active, delayed, wake, token, meta; `holder` names
-- the claiming consumer (stored as `hd`).
-- Appends {deadline, wait, id_1, token_1, attempt_1, failures_1, limits_1,
-- payload_1, lane_1, kind_1, created_1, traceparent_1, ...} to `out` (lane,
-- kind and traceparent "" for none; created: the record's `ct`, server ms,
-- "0" if it has none);
-- `wait` also says when the first stopped lane reopens, when the claim
-- leased fewer than `limit` jobs.
local function claim_jobs(k, prefix, now, lease, limit, promote, holder, out)
  local deadline = now + lease
  out[#out + 1] = deadline
  out[#out + 1] = 0
  local wait_at = #out
  if limit <= 0 then return end
  if rcall('HEXISTS', k.meta, 'paused') == 1 then
    -- Idle consumers sleep until resume wakes them.
    rcall('DEL', k.wake)
    return
  end
  if promote then promote_due(k.delayed, k.pending, k.wake, prefix, now, limit) end
  local lim = rcall('HMGET', prefix .. 'limits', 'max', 'rate', 'hold')
  local rn, rw = parse_rate(lim[2])
  if lim[1] or rn or lim[3] then
    local stop
    local hold = tonumber(lim[3])
    if hold and hold > now then stop = hold end
    local max = tonumber(lim[1])
    if not stop and max then
      local free = max - rcall('ZCARD', k.active)
      if free <= 0 then stop = now end
      if free < limit then limit = free end
    end
    if not stop and rn then
      local room, at = rate_room(prefix .. 'limits:log', rn, rw, now, 0)
      if room <= 0 then stop = at end
      if room < limit then limit = room end
    end
    if stop then
      rcall('DEL', k.wake)
      out[wait_at] = stop - now
      return
    end
  end
  -- the tokens of the jobs leased, when a rate limit logs them
  local logged = {}
  local deadline_s = int_s(deadline)
  local zargs = {}
  if rcall('EXISTS', prefix .. 'lanes:ring') == 0 then
    local popped = rcall('ZPOPMIN', k.pending, limit)
    -- Nothing left to hand out: clear stale wake tokens so idle consumers sleep.
    if #popped / 2 < limit then rcall('DEL', k.wake) end
    if #popped > 0 and tonumber(popped[#popped]) >= LANED then
      -- Laned jobs while no lane is in the ring (a torn write): they wait
      -- for their lane, which the sweep puts back. (Scores come in order,
      -- so one look at the last tells.)
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
      local job = hfields(jk, 'p', 'f', 'a', 'lm', 'kd', 'ct', 'st', 'ln', 'tp')
      -- Only a job whose record says pending: a torn write (a restart that
      -- replayed part of a script) can leave a finished or running job's id
      -- on pending too, and leasing it would run it again. Its id just
      -- leaves pending; the sweep puts the job where its state says.
      if job and job[7] and job[7] ~= 'pending' then job = nil end
      lease_job(jk, id, job, token, now, deadline_s, holder, '', zargs, out)
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
      lease_job(jk, pick.id, pick.job or hfields(jk, 'p', 'f', 'a', 'lm', 'kd', 'ct', 'st', 'ln', 'tp'), token, now,
        deadline_s, holder,
        pick.lane or '', zargs, out)
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
end

-- Checks that the caller still owns job `jk` with `token` (a string, as
-- sent). Returns nil and the job's owner fields {dd, lo, cx, ln} when it does, or
-- the reply to send: {ALREADY, now} when settlement `op` already happened
-- with this token (its reply was lost; remembered for the job's last
-- LO_KEEP settlements), {NOT_FOUND, now} for a missing job, {LEASE_LOST,
-- now} for a lost lease.
local function check_owner(jk, token, op, now)
  local cur = hfields(jk, 'st', 'tk', 'lo', 'dd', 'cx', 'ln', 'a', 'kd')
  if not cur or not cur[1] then return {CODE.NOT_FOUND, now} end
  if cur[1] == 'active' and cur[2] == token then
    -- a, tk and kd too: the settlement's event needs them (emit_job)
    return nil, {dd = cur[4], lo = cur[3], cx = cur[5], ln = cur[6], a = cur[7], tk = token, kd = cur[8]}
  end
  if op and cur[3] and string.find(' ' .. cur[3] .. ' ', ' ' .. op .. ':' .. token .. ' ', 1, true) then
    return {CODE.ALREADY, now}
  end
  return {CODE.LEASE_LOST, now}
end

-- check_owner's reply for a job whose record this call settles and
-- deletes (finish, with moves.gone): `lo` is the record's settlements as
-- finish left them.
local function settled_in_call(lo, token, op, now)
  if string.find(' ' .. lo .. ' ', ' ' .. op .. ':' .. token .. ' ', 1, true) then return {CODE.ALREADY, now} end
  return {CODE.LEASE_LOST, now}
end

-- The `lo` field after settlement `op` with `token`: newest first, at most
-- LO_KEEP entries.
local function remember(owner, op, token)
  local entries = {op .. ':' .. token}
  if owner.lo then
    for e in string.gmatch(owner.lo, '%S+') do
      if #entries >= LO_KEEP then break end
      entries[#entries + 1] = e
    end
  end
  return table.concat(entries, ' ')
end

-- Set moves collected while settling and applied by apply_moves with one
-- variadic command per set, so a batch of N settlements costs about two
-- commands per job instead of eight. Hash writes are not deferred, so a
-- later check in the same call sees every earlier settlement.
local function new_moves()
  return {unlease = {}, held = {}, lanes = {}, completed = {}, failed = {}, cancelled = {}, delete = {}}
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

-- Terminal move into state `state` (completed, failed or cancelled) at `now`: releases
-- the job's dedup marker `dd` if it still holds it; with retention `keep`
-- of 0 records the record is deleted, otherwise it is stamped with `fields`.
-- Its event is named after the state (`owner`: check_owner's fields, when
-- a settlement holds them, so the event reads nothing more).
local function finish(moves, prefix, jk, id, state, now, keep, dd, fields, owner)
  if dd then
    local mk = prefix .. 'de:' .. dd
    if sget(mk) == id then rcall('DEL', mk) end
  end
  local now_text = now_str(now)
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
    rcall('HSET', jk, 'st', state, 'ft', now_text, unpack(fields))
  end
  if events_on(prefix) then
    local err
    for i = 1, #fields, 2 do
      if fields[i] == 'err' then err = {'err', ev_text(fields[i + 1])} end
    end
    emit_job(prefix, state, id, jk, err, owner)
  end
  if keep.n == 0 then
    moves.delete[#moves.delete + 1] = jk
    return
  end
  local into = moves[state]
  into[#into + 1] = now_text
  into[#into + 1] = id
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
  local max = tonumber(rcall('HGET', prefix .. 'limits', 'max'))
  if max then
    local free = max - rcall('ZCARD', prefix .. 'active')
    if free < n then n = free end
  end
  if n > 0 and rcall('ZCARD', prefix .. 'pending') > 0 then wake(prefix .. 'wake', n) end
end

-- `k` holds active and the finished sets moves may go to (completed,
-- failed, cancelled); cancelled jobs are kept as failed ones are.
local function apply_moves(moves, k, prefix, keep_completed, keep_failed, now)
  if #moves.unlease > 0 then
    -- Slots freed under a global cap wake consumers that found none
    -- (wake_freed; settle.lua leaves it until after its own claim).
    local max = tonumber(rcall('HGET', prefix .. 'limits', 'max'))
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
  for _, m in ipairs({{'completed', keep_completed}, {'failed', keep_failed}, {'cancelled', keep_failed}}) do
    local into = moves[m[1]]
    if #into > 0 then
      -- A finish is never scored below the newest of its set: after the
      -- server's clock went back, finishes keep the order they happened
      -- in, and retention still trims the oldest records first.
      local newest = rcall('ZRANGE', k[m[1]], -1, -1, 'WITHSCORES')[2]
      if newest and tonumber(newest) > now then
        for i = 1, #into, 2 do into[i] = newest end
      end
      rcall('ZADD', k[m[1]], unpack(into))
      trim(k[m[1]], prefix, m[2], now)
    end
  end
  if #moves.delete > 0 then rcall('DEL', unpack(moves.delete)) end
end

-- The settlements, shared by settle.lua and complete.lua. Each assumes
-- check_owner has passed (`owner` is what it returned) and records its set
-- moves in `moves`. `k` holds the queue's keys: active, pending, delayed,
-- completed, failed, wake. Each returns {code, due}.

-- `result`: the handler's result (JSON) to keep, or nil / "" for none.
local function settle_complete(moves, prefix, jk, id, token, now, keep, owner, result)
  unlease(moves, id, owner.ln)
  local fields = {'lo', remember(owner, 'c', token)}
  if result and result ~= '' then
    fields[3] = 'rs'
    fields[4] = result
  end
  finish(moves, prefix, jk, id, 'completed', now, keep, owner.dd, fields, owner)
  return {CODE.OK, 0}
end

-- Back to pending at once (`delay` 0) or delayed until now + delay.
local function requeue(k, jk, id, now, delay)
  if delay > 0 then
    rcall('HSET', jk, 'st', 'delayed')
    rcall('ZADD', k.delayed, now + delay, id)
    return now + delay
  end
  to_pending(k.pending, jk, id)
  wake(k.wake, 1)
  return 0
end

-- The `eh` field with error `err` at `now` added: the last ERRORS_KEEP.
local function errors_with(jk, now, err)
  local list = {}
  local old = rcall('HGET', jk, 'eh')
  if old then
    local ok, decoded = pcall(cjson.decode, old)
    if ok and type(decoded) == 'table' then list = decoded end
  end
  local out = {{at = now, e = err}}
  for i = 1, ERRORS_KEEP - 1 do
    if list[i] then out[#out + 1] = list[i] end
  end
  return cjson.encode(out)
end

-- failures += 1; at the job's max_attempts the job fails for good (code
-- FAILED); else it is due again after `delay` ms, or after the job's
-- backoff (its jitter drawn for this token) when `delay` is negative.
local function settle_retry(moves, k, prefix, jk, id, token, now, delay, err, keep, owner)
  unlease(moves, id, owner.ln)
  local failures = rcall('HINCRBY', jk, 'f', '1')
  local max, _, bo, jitter = limits(rcall('HGET', jk, 'lm'))
  local lo = remember(owner, 'r', token)
  local eh = errors_with(jk, now, err)
  if failures >= max then
    finish(moves, prefix, jk, id, 'failed', now, keep, owner.dd, {'err', err, 'eh', eh, 'lo', lo}, owner)
    return {CODE.FAILED, 0}
  end
  rcall('HSET', jk, 'err', err, 'eh', eh, 'lo', lo)
  if delay < 0 then delay = backoff_ms(bo, failures, jitter, tonumber(token)) end
  local due = requeue(k, jk, id, now, delay)
  emit_job(prefix, 'retried', id, jk, {'err', ev_text(err), 'due', due > 0 and int_s(due)}, owner)
  return {CODE.OK, due}
end

-- A handler's failure too, so failures += 1, but whatever attempts remain.
local function settle_fail(moves, prefix, jk, id, token, now, reason, keep, owner)
  unlease(moves, id, owner.ln)
  rcall('HINCRBY', jk, 'f', '1')
  local eh = errors_with(jk, now, reason)
  finish(moves, prefix, jk, id, 'failed', now, keep, owner.dd,
    {'err', reason, 'eh', eh, 'lo', remember(owner, 'f', token)}, owner)
  return {CODE.OK, 0}
end

-- Ends the job cancelled (op x, or any settlement but complete of a job
-- whose cancel was requested: it must not run again). `text` is the
-- reason (op x; "cancelled" when empty) or the error a retry or fail
-- carried, kept in the error history.
local function settle_cancel(moves, prefix, jk, id, token, now, op, text, keep, owner)
  unlease(moves, id, owner.ln)
  local fields = {'err', 'cancelled', 'lo', remember(owner, op, token)}
  if text and text ~= '' then
    if op == 'x' then fields[2] = text end
    fields[5] = 'eh'
    fields[6] = errors_with(jk, now, text)
  end
  finish(moves, prefix, jk, id, 'cancelled', now, keep, owner.dd, fields, owner)
  return {CODE.CANCELLED, 0}
end

-- Release (op l, graceful shutdown) and snooze (op s, run later): back to
-- pending or delayed, counting neither a failure nor a stall.
local REQUEUE_EVENT = {l = 'released', s = 'snoozed', h = 'rate_limited'}
local function settle_requeue(moves, k, jk, id, token, now, op, delay, owner)
  unlease(moves, id, owner.ln)
  rcall('HSET', jk, 'lo', remember(owner, op, token))
  local due = requeue(k, jk, id, now, delay)
  emit_job(string.sub(jk, 1, #jk - #id - 4), REQUEUE_EVENT[op] or 'released', id, jk,
    {'due', due > 0 and int_s(due)}, owner)
  return {CODE.OK, due}
end
