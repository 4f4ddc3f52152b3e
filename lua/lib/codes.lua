-- lib/codes.lua: the reply codes, one meaning each in every script
-- (src/scripts/codes.rs decodes them, lua/README.md lists them; tests
-- check that the three agree).
--
-- Needs: nothing.

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
  EXPIRED = 13,        -- the job ended expired: it can no longer start before its expiry
  CLOSED = 14,         -- the batch is closed: nothing written
  NOT_FOUND = -1,      -- no such job (the batch scripts: no such batch)
  LEASE_LOST = -2,     -- not active under this token: nothing changed
  REFUSED = -3,        -- a declared effect was refused: nothing changed
  HELD_BY_OTHER = -4,  -- another attempt holds the effect marker
  DONE_BY_OTHER = -5,  -- another attempt finished the effect
  FOREIGN = -6,        -- the marker holds a value echomq did not write
  STALE = -7,          -- schedule_fire: the schedule changed since it was read; nothing written
  UNKNOWN = -8,        -- deliver: a message this version does not know; nothing changed
}
