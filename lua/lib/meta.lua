-- lib/meta.lua: the queue's settings in its meta hash PREFIX:{Q}:meta that
-- the scripts honour, read with one HMGET per queue per call: `evoff` and
-- `evmax` (lib/events.lua), and `v`, the layout version the queue was
-- made with or upgraded to (lib/payload.lua; src/queue/mod.rs
-- LAYOUT_VERSION).
--
-- Needs: base (hfields).

-- This call's reads: the last queue's, and every queue's by prefix (a
-- library's top-level locals live from one call to the next, so
-- meta_begin forgets them at each call's start).
local meta_prefix, meta_last, meta_seen

local function meta_begin()
  meta_prefix, meta_last, meta_seen = nil, nil, {}
end

-- {evoff, evmax, v} of the queue whose keys start with `prefix` (each
-- nil when absent; all nil for a key of another type).
local function queue_meta(prefix)
  if prefix == meta_prefix then return meta_last end
  local m = meta_seen[prefix]
  if not m then
    m = hfields(prefix .. 'meta', 'evoff', 'evmax', 'v') or {}
    meta_seen[prefix] = m
  end
  meta_prefix, meta_last = prefix, m
  return m
end
