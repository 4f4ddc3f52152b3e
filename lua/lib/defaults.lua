-- lib/defaults.lua: the values the Rust side also knows. Each has a twin
-- in Rust, named beside it, and a unit test checks that the two agree.
--
-- Needs: nothing.

-- The retry budget of a job without an `lm` field (src/limits.rs
-- DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_STALLS, DEFAULT_BACKOFF).
local DEFAULT_MAX_ATTEMPTS = 3
local DEFAULT_MAX_STALLS = 3
local DEFAULT_BACKOFF = 'e1000:600000'
-- The longest delay a backoff gives (src/limits.rs MAX_DELAY).
local MAX_DELAY_MS = 31536000000
-- Errors a job's `eh` field keeps (src/job.rs ERRORS_KEPT).
local ERRORS_KEEP = 5
-- A queue's event stream holds about this many events unless its meta
-- hash says otherwise (src/events/mod.rs DEFAULT_EVENTS_MAX_LEN).
local EVENTS_MAX = 10000
-- An event's error or progress text is cut to this many bytes
-- (src/events/mod.rs EVENT_TEXT_MAX_BYTES).
local EVENT_TEXT_MAX = 512
