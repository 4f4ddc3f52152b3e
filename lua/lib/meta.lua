-- lib/meta.lua: the queue's settings in its meta hash PREFIX:{Q}:meta that
-- the scripts honour, read with one HMGET per queue per call: `evoff` and
-- `evmax` (lib/events.lua), `v`, the layout version the queue was made
-- with or upgraded to (lib/payload.lua; src/queue/mod.rs LAYOUT_VERSION),
-- `paused` (lib/claim.lua), and from layout 3 on the queue's limits `max`,
-- `rate` and `hold` (lib/throttle.lua; a key of their own, `limits`, in
-- layout 2) and `ln`, set while lanes may be in use (lib/lanes.lua), so a
-- queue that uses neither pays no command for them; `ag`, the priority
-- aging (lib/keyspace.lua pending_score); `bt`, set once a batch was
-- opened on the queue (lib/batch.lua); `fl`, set once a flow was added
-- (lib/flow.lua); `sq`, set once a job with a sequence was enqueued
-- (lib/sequence.lua); and a table for other reads a call makes once
-- (call_cache).
--
-- Needs: base (hfields).

-- This call's reads: the last queue's, and every queue's by prefix (a
-- library's top-level locals live from one call to the next, so
-- meta_begin forgets them at each call's start).
local meta_prefix, meta_last, meta_seen, meta_cache

local function meta_begin()
  meta_prefix, meta_last, meta_seen, meta_cache = nil, nil, {}, {}
end

-- A table that lives for the running call: what a helper read once.
local function call_cache()
  return meta_cache
end

-- {evoff, evmax, v, paused, max, rate, hold, ln, ag, bt, fl, sq} of the queue whose keys
-- start with `prefix` (each false when absent, as HMGET answers; all nil
-- for a key of another type). A script that changes one of them later in
-- its call must not read it here, or must write its cached value too
-- (lib/throttle.lua hold_starts, lib/lanes.lua lanes_in_use).
local function queue_meta(prefix)
  if prefix == meta_prefix then return meta_last end
  local m = meta_seen[prefix]
  if not m then
    m = hfields(prefix .. 'meta', 'evoff', 'evmax', 'v', 'paused', 'max', 'rate', 'hold', 'ln', 'ag', 'bt', 'fl', 'sq') or {}
    meta_seen[prefix] = m
  end
  meta_prefix, meta_last = prefix, m
  return m
end

-- Whether the queue keeps its limits and its lanes flag in the meta hash
-- (layout 3 on): a queue of layout 2, which echomq 0.2 processes may
-- share, or one whose meta hash is gone, is served as 0.2 wrote it.
local function meta_v3(prefix)
  local v = tonumber(queue_meta(prefix)[3])
  return v ~= nil and v >= 3
end

-- The queue's priority aging: ms of waiting worth one priority level
-- (aging.lua sets it), or nil for none.
local function queue_aging(prefix)
  local ag = tonumber(queue_meta(prefix)[9])
  if ag and ag > 0 then return ag end
  return nil
end
