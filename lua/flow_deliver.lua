-- flow_deliver: applies one message another queue's call pushed onto its
-- outbox for this queue (lib/flow.lua): a flow node to make here ("n":
-- pending, or failed or cancelled without running; once, by its receipt
-- in `inbox`), the end of a node of a flow whose home is here ("d": its
-- parents learn of it as from a job of this queue; once, as every end),
-- or a node of this queue to cancel ("c": as flow_cancel.lua cancels its
-- own). The relay (src/relay.rs) calls it, then takes the message off the
-- outbox it came from: a message delivered twice is applied once, and one
-- of an older flow of the same id (another `ct`) changes nothing.
--
-- KEYS[1] pending  KEYS[2] delayed  KEYS[3] failed  KEYS[4] cancelled
-- ARGV[1] prefix       key prefix "emq:{Q}:"
-- ARGV[2] keep_failed  retention of failed and cancelled jobs, as settle's
-- ARGV[3] message      the message as lib/flow.lua outbox_push wrote it
--
-- REPLY: {now:int, code:code, outbox:int}
-- OK applied, or nothing to apply (outbox: messages now waiting on this
-- queue's own outbox, which this call may have added to); UNKNOWN a
-- message for another queue or of a kind this version does not know
-- (nothing changed).
--
-- Events (lib/events.lua, unless the queue turned them off): enqueued (a
-- node made pending), cancelled, cancel_requested, and what a parent's
-- end writes (as flow_node_done's).
local pending_key, delayed_key, failed_key, cancelled_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, keep, message = ARGV[1], retention(ARGV[2]), ARGV[3]
local now = server_now()
local outbox = prefix .. 'outbox'
local at = string.find(message, '\30', 1, true)
local m = at and string.sub(message, 1, at - 1) == own_queue(prefix) and message_fields(string.sub(message, at + 1))
if not m then return {now, CODE.UNKNOWN, rcall('LLEN', outbox)} end
local moves = new_moves()
if m[1] == 'c' and #m >= 5 then
  local fid, ct, name, home = m[2], m[3], m[4], m[5]
  local id = fid .. ':' .. name
  local jk = prefix .. 'job:' .. id
  local job = hfields(jk, 'st', 'dd', 'cx', 'ln', 'fh')
  -- only the node's own job, of this flow
  if job and job[5] == home .. '\31' .. ct then
    cancel_job(moves, prefix, pending_key, delayed_key, jk, id, job, keep, now)
  end
elseif not flow_deliver_node(moves, prefix, keep, m, now) then
  return {now, CODE.UNKNOWN, rcall('LLEN', outbox)}
end
apply_moves(moves, {failed = failed_key, cancelled = cancelled_key}, prefix, KEEP_ALL, keep, now)
return {now, CODE.OK, rcall('LLEN', outbox)}
