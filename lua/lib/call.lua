-- lib/call.lua: one script call's start and end. The scripts run as
-- functions of one library (src/store/mod.rs library), whose top-level
-- locals live from one call to the next: each function runs
-- `new_call(KEYS, ARGV)` first and returns through `end_call`.
--
-- Needs: base (rcall, bind_server, call_did), meta (meta_begin), events (events_begin, events_flush).

-- The running call's ARGV. A plain script's helpers could read ARGV as a
-- global; a library function gets it as a parameter, so new_call keeps it
-- here (the fault suite's client-clock control reads the client's time
-- from it, src/faults.rs).
local call_argv

-- The running call's confirmation mark, or nil (see new_call).
local call_mark

-- Starts a call: binds the server's commands, forgets the per-call
-- caches.
--
-- On a cluster every call declares the queue's resharding guard last (a key
-- that never exists, src/store/call.rs reshard_guard): it keeps the
-- call from running while the queue's slot is split between two nodes,
-- and is dropped here so that the script sees its own KEYS.
--
-- A call whose confirmation (WAIT, WAITAOF) follows it declares a mark
-- before the guard: its first key and "\0confirm" (src/store/call.rs
-- confirm_mark). It is dropped here too, and end_call writes and deletes
-- it: a call that found its work done and wrote nothing would have a
-- confirmation that passes at once, while what it found may still be on
-- this primary alone.
local function new_call(keys, argv)
  bind_server()
  meta_begin()
  events_begin()
  call_did.outbox = nil
  call_argv = argv
  call_mark = nil
  local n = #keys
  if n > 0 and string.sub(keys[n], -14) == ':reshard-guard' then
    keys[n] = nil
    n = n - 1
  end
  -- (the NUL first, so a call without a mark builds no string)
  if n > 1 and string.byte(keys[n], -8) == 0 and keys[n] == keys[1] .. '\0confirm' then
    call_mark = keys[n]
    keys[n] = nil
  end
end

-- Ends a call: writes its events (and sets and deletes its confirmation
-- mark), and returns `result`, the call's reply.
local function end_call(result)
  events_flush()
  if call_mark and rcall('SET', call_mark, '', 'NX') then rcall('DEL', call_mark) end
  return result
end
