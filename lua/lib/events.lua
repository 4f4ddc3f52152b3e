-- lib/events.lua: lifecycle events. Every transition appends one entry
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
-- (events_flush, from call.lua end_call): consecutive events of one kind
-- go into one stream entry of up to EVENTS_PER_ENTRY jobs, `e` the event,
-- `n` how many, `j` a JSON array holding each job's fields as a flat
-- array ("id", ID, "a", ...); a run of one is written as a plain entry,
-- as above. A claim or settlement of 64 jobs is then one XADD instead of
-- 64, which was a third of the server's time per job (benches/README.md,
-- "Performance"); readers expand the entries (src/events/event.rs). Each XADD
-- trims the stream to about cap / n entries, so it holds about `cap`
-- events whatever the runs' lengths. A call that raises part-way writes
-- none of its events.
--
-- Needs: base (hfields, int_s), defaults (EVENTS_MAX, EVENT_TEXT_MAX).

local EVENTS_PER_ENTRY = 64
local ev_cap -- nil: not read yet in this call; false: events off; else the cap
local ev_runs -- this call's events not written yet: {prefix, event, jobs}, in order

-- Forgets the last call's events setting and runs (call.lua new_call):
-- a library's top-level locals live from one call to the next.
local function events_begin()
  ev_cap = nil
  ev_runs = {}
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
-- (events_flush). `cap`: the queue's events_on.
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

-- Writes this call's events (emit), one entry per run.
local function events_flush()
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
