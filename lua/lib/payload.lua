-- lib/payload.lua: a job's payload in its record. A queue of layout 3
-- (echomq 0.3) keeps a payload of more than PAYLOAD_CHUNK bytes, up to
-- PAYLOAD_CHUNK * 4, in fields `p`, `p2`, `p3` and `p4` of at most
-- PAYLOAD_CHUNK bytes each, so that under the server's default
-- `hash-max-listpack-value` (64) the record stays a compact listpack
-- instead of becoming a hash table: a pending job with a 100-byte payload
-- then takes about 290 B on Valkey and 370 B on Redis 7.0, not 505 B and
-- 670 B (benches/README.md, "Memory per job"). A longer payload stays
-- whole in `p` (its record is a hash table either way). A queue of layout
-- 2 (made by echomq 0.2) keeps every payload whole in `p`, as 0.2
-- processes read it, until Queue::upgrade_layout moves it to 3; records
-- of both kinds are read alike, so an upgraded queue's older jobs need no
-- rewrite.
--
-- Needs: meta (meta_v3).

local PAYLOAD_CHUNK = 64

-- Whether the queue whose keys start with `prefix` splits payloads.
local function payload_split(prefix)
  return meta_v3(prefix)
end

-- Appends `payload`'s fields to the job fields `h` (a flat list), split
-- when `split` (payload_split) and its length calls for it.
local function put_payload(h, payload, split)
  local n = #h
  local len = #payload
  if not split or len <= PAYLOAD_CHUNK or len > 4 * PAYLOAD_CHUNK then
    h[n + 1], h[n + 2] = 'p', payload
    return
  end
  h[n + 1], h[n + 2] = 'p', string.sub(payload, 1, PAYLOAD_CHUNK)
  h[n + 3], h[n + 4] = 'p2', string.sub(payload, PAYLOAD_CHUNK + 1, 2 * PAYLOAD_CHUNK)
  n = n + 4
  if len > 2 * PAYLOAD_CHUNK then
    h[n + 1], h[n + 2] = 'p3', string.sub(payload, 2 * PAYLOAD_CHUNK + 1, 3 * PAYLOAD_CHUNK)
    n = n + 2
  end
  if len > 3 * PAYLOAD_CHUNK then
    h[n + 1], h[n + 2] = 'p4', string.sub(payload, 3 * PAYLOAD_CHUNK + 1)
  end
end

-- The payload from the values of fields p, p2, p3, p4 (nil for absent
-- ones): nil when `p` is absent.
local function joined_payload(p, p2, p3, p4)
  if not p2 then return p end
  return p .. p2 .. (p3 or '') .. (p4 or '')
end
