-- lib/call.lua: one script call's start and end. The scripts run as
-- functions of one library (src/store/mod.rs library), whose top-level
-- locals live from one call to the next: each function runs
-- `new_call(KEYS, ARGV)` first and returns through `end_call`.
--
-- Needs: base (bind_server, call_did), meta (meta_begin), events (events_begin, events_flush).

-- The running call's ARGV. A plain script's helpers could read ARGV as a
-- global; a library function gets it as a parameter, so new_call keeps it
-- here (the fault suite's client-clock control reads the client's time
-- from it, src/faults.rs).
local call_argv

-- Starts a call: binds the server's commands, forgets the per-call
-- caches.
--
-- On a cluster every call declares the queue's resharding guard last (a key
-- that never exists, src/store/call.rs reshard_guard): it keeps the
-- call from running while the queue's slot is split between two nodes,
-- and is dropped here so that the script sees its own KEYS.
local function new_call(keys, argv)
  bind_server()
  meta_begin()
  events_begin()
  call_did.outbox = nil
  call_argv = argv
  local n = #keys
  if n > 0 and string.sub(keys[n], -14) == ':reshard-guard' then keys[n] = nil end
end

-- Ends a call: writes its events, and returns `result`, the call's reply.
local function end_call(result)
  events_flush()
  return result
end
