-- lib/events.lua: lifecycle events. Every transition appends one entry
-- to the queue's capped stream PREFIX:{Q}:events in the script that makes
-- it, so the events never disagree with the state. The stream id is the
-- server's time. Fields: `e` the event, `id` the job (absent for queue
-- events), then as the event has them: `a` attempt, `tk` fencing token,
-- `ln` lane, `kd` kind, `err` error text (truncated to EVENT_TEXT_MAX
-- bytes), `due` server ms a delayed job is due, `pg` progress. The queue's
-- meta hash holds the setting every process honours: `evoff` (events off)
-- and `evmax` (the stream's approximate cap, else EVENTS_MAX), read once
-- per script call (lib/meta.lua).
--
-- A call's events are kept in order and written when the call ends
-- (events_flush, from call.lua end_call): consecutive job events of one
-- queue go into one stream entry of up to EVENTS_PER_ENTRY jobs: `e` the
-- first one's event, `n` how many, `z` holding, for each job in turn, its
-- id, the number m of its other fields, then those m fields as name,
-- value (`e` among them for an event of another kind than the entry's:
-- a settle-and-claim's completions and claims share one entry), all joined by
-- NUL bytes ("7\0" "2\0" "a\0" "1\0" "tk\0" "42\0" "8\0" ...): ids,
-- lanes and kinds hold no control characters (src/validate.rs), numbers
-- none either. A run with an error or progress text that holds a NUL is
-- written as `v` instead, a JSON array of the same strings. A run of one
-- is written as a plain entry, as above. A claim or settlement of 64
-- jobs is then one XADD instead of 64, which was a third of the server's
-- time per job (benches/README.md, "Performance"). The jobs' fields go
-- straight into the run's one array, with no table per job, and are
-- joined in C: 0.2's table per job and its JSON encoding cost about a
-- tenth of a job's server time. Readers expand the entries
-- (src/events/event.rs; they also read 0.2's `j`, a JSON array of each
-- job's flat field list). Each XADD trims the stream to about cap / n
-- entries (exactly, when that is under 16), so it holds about `cap`
-- events whatever the runs' lengths. A
-- call that raises part-way writes none of its events.
--
-- Needs: base (hfields, int_s), defaults (EVENTS_MAX, EVENT_TEXT_MAX), meta (queue_meta).

local EVENTS_PER_ENTRY = 64
local ev_cap -- nil: not read yet in this call; false: events off; else the cap
-- This call's events not written yet, in order: runs {prefix, event, cap,
-- n (jobs), v (their fields, as `v` above), len (#v)}, or for a queue
-- event {prefix, event, cap, fields}.
local ev_runs, ev_nruns

-- Forgets the last call's events setting and runs (call.lua new_call):
-- a library's top-level locals live from one call to the next.
local function events_begin()
  ev_cap = nil
  ev_runs, ev_nruns = {}, 0
end

-- Whether the queue whose keys start with `prefix` records events: false,
-- or its cap.
local function events_on(prefix)
  if ev_cap == nil then
    local m = queue_meta(prefix)
    if m[1] then
      ev_cap = false
    else
      ev_cap = tonumber(m[2]) or EVENTS_MAX
    end
  end
  return ev_cap
end

-- Text cut to EVENT_TEXT_MAX bytes.
local function ev_text(s)
  if s and #s > EVENT_TEXT_MAX then return string.sub(s, 1, EVENT_TEXT_MAX) end
  return s
end

-- Appends field `k` with value `x` at v[len + 1], unless `x` is nil,
-- false (a missing hash field) or "". Returns the new length.
local function add(v, len, k, x)
  if x and x ~= '' then
    v[len + 1] = k
    v[len + 2] = x
    return len + 2
  end
  return len
end

-- Records event `event` of job `id` with up to six fields (name, value;
-- a nil or empty value leaves its field out) in this call's runs (a job's
-- event of another kind than its run's also carries `e`).
-- `cap`: the queue's events_on.
local function record_job(prefix, event, cap, id, k1, x1, k2, x2, k3, x3, k4, x4, k5, x5, k6, x6)
  local run = ev_runs[ev_nruns]
  if not run or run.v == nil or run.prefix ~= prefix or run.n >= EVENTS_PER_ENTRY then
    run = {prefix = prefix, event = event, cap = cap, n = 0, v = {}, len = 0}
    ev_nruns = ev_nruns + 1
    ev_runs[ev_nruns] = run
  end
  local v, at = run.v, run.len + 2
  v[at - 1] = id
  -- unrolled: a function call per field cost more than the field
  local len = at
  -- an event of another kind than the entry's names its own
  if event ~= run.event then v[len + 1], v[len + 2], len = 'e', event, len + 2 end
  if x1 and x1 ~= '' then v[len + 1], v[len + 2], len = k1, x1, len + 2 end
  if x2 and x2 ~= '' then v[len + 1], v[len + 2], len = k2, x2, len + 2 end
  if x3 and x3 ~= '' then v[len + 1], v[len + 2], len = k3, x3, len + 2 end
  if x4 and x4 ~= '' then v[len + 1], v[len + 2], len = k4, x4, len + 2 end
  if x5 and x5 ~= '' then v[len + 1], v[len + 2], len = k5, x5, len + 2 end
  if x6 and x6 ~= '' then v[len + 1], v[len + 2], len = k6, x6, len + 2 end
  -- a string: cjson formats numbers with sprintf
  v[at] = int_s((len - at) / 2)
  run.len = len
  run.n = run.n + 1
end

-- Records event `event` of job `id` ("" for a queue event) with the
-- fields `extra` (a flat list of at most three pairs, nil values skipped
-- in pairs).
local function emit(prefix, event, id, extra)
  local cap = events_on(prefix)
  if not cap then return end
  if id == '' then
    local f = {}
    if extra then
      for i = 1, #extra, 2 do add(f, #f, extra[i], extra[i + 1]) end
    end
    ev_nruns = ev_nruns + 1
    ev_runs[ev_nruns] = {prefix = prefix, event = event, cap = cap, fields = f}
    return
  end
  extra = extra or {}
  record_job(prefix, event, cap, id, extra[1], extra[2], extra[3], extra[4], extra[5], extra[6])
end

-- Writes this call's events (emit), one entry per run.
local function events_flush()
  local runs, nruns = ev_runs, ev_nruns
  ev_runs, ev_nruns = {}, 0
  for i = 1, nruns do
    local run = runs[i]
    -- a refused XADD (below) stops the rest of the call's events
    if ev_cap == false then break end
    local n = run.n or 1
    -- `~` trims whole stream nodes (4 KB by default: a dozen short
    -- batched entries), so a small cap trims exactly
    local keep = math.ceil(run.cap / n)
    local args = {run.prefix .. 'events', 'MAXLEN', keep < 16 and '=' or '~', int_s(keep), '*', 'e', run.event}
    if run.fields then
      for _, x in ipairs(run.fields) do args[#args + 1] = x end
    elseif n == 1 then
      -- a plain entry: id, then the fields (v[2] is their count)
      local v = run.v
      args[8] = 'id'
      args[9] = v[1]
      for j = 3, run.len do args[j + 7] = v[j] end
    elseif run.json then
      args[8] = 'n'
      args[9] = int_s(n)
      args[10] = 'v'
      args[11] = cjson.encode(run.v)
    else
      args[8] = 'n'
      args[9] = int_s(n)
      args[10] = 'z'
      args[11] = table.concat(run.v, '\0')
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
-- else read from the record), then `extra` (at most two pairs).
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
  if extra then
    record_job(prefix, event, cap, id, 'a', a, 'tk', tk, 'ln', ln, 'kd', kd, extra[1], extra[2], extra[3], extra[4])
    -- error and progress texts may hold a NUL: their run is written as JSON
    for i = 2, 4, 2 do
      local x = extra[i]
      if x and string.find(x, '\0', 1, true) then ev_runs[ev_nruns].json = true end
    end
  else
    record_job(prefix, event, cap, id, 'a', a, 'tk', tk, 'ln', ln, 'kd', kd)
  end
end
