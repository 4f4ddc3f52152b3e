-- deliver: applies, in order, messages other queues' calls pushed onto
-- their outboxes for this queue (lib/outbox.lua), each one. Of flows
-- (lib/flow.lua): a node to make here ("n": pending, or failed or
-- cancelled without running; once, by its receipt in `inbox`), the end
-- of a node of a flow whose home is here ("d": its parents learn of it as
-- from a job of this queue; once, as every end), a node of this queue to
-- cancel ("c": as flow_cancel.lua cancels its own), or to remove if it has
-- not started ("x": as flow_remove.lua). Of batches (lib/batch.lua): a
-- member to make here ("m": once, by its receipt), the end of a member of
-- a batch whose home is here ("e": counted once), or a member that did
-- not join because its id was taken ("u"). The relay (src/relay.rs) calls
-- it with the messages of one outbox for this queue, then takes them off
-- that outbox: a message delivered twice is applied once, and one of an
-- older flow or batch of the same id (another `ct`) changes nothing.
--
-- KEYS[1] pending  KEYS[2] delayed  KEYS[3] failed  KEYS[4] cancelled
-- ARGV[1] prefix       key prefix "emq:{Q}:"
-- ARGV[2] keep_failed  retention of failed and cancelled jobs, as settle's
-- ARGV[3..] messages   as lib/outbox.lua outbox_push wrote them, oldest first
--
-- REPLY: {now:int, code:code, applied:int, outbox:int}
-- OK every message applied (or found with nothing to apply); UNKNOWN
-- message number applied + 1 is for another queue or of a kind this
-- version does not know: it and those after it are left as they were,
-- the ones before it applied. outbox: messages now waiting on this
-- queue's own outbox, which this call may have added to.
--
-- Events (lib/events.lua, unless the queue turned them off): enqueued (a
-- node or member made, a parent released, a batch callback), cancelled,
-- cancel_requested, and what a parent's end writes (as flow_node_done's).
local pending_key, delayed_key, failed_key, cancelled_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, keep = ARGV[1], retention(ARGV[2])
local now = server_now()
local me = own_queue(prefix)
local moves = new_moves()
local applied, code = 0, CODE.OK
for i = 3, #ARGV do
  local message = ARGV[i]
  local at = string.find(message, '\30', 1, true)
  local m = at and string.sub(message, 1, at - 1) == me and message_fields(string.sub(message, at + 1))
  local known = m and true
  if known and (m[1] == 'c' or m[1] == 'x') and #m >= 5 then
    local fid, ct, name, home = m[2], m[3], m[4], m[5]
    local id = fid .. ':' .. name
    local jk = prefix .. 'job:' .. id
    local job = hfields(jk, 'st', 'dd', 'cx', 'ln', 'fh')
    -- only the node's own job, of this flow
    if not job or job[5] ~= home .. '\31' .. ct then
      -- another job, or none: nothing to do
    elseif m[1] == 'c' then
      cancel_job(moves, prefix, pending_key, delayed_key, jk, id, job, keep, now)
    elseif job[1] == 'pending' or job[1] == 'delayed' then
      remove_job(moves, prefix, {pending = pending_key, delayed = delayed_key}, jk, id, job[1], job[2], job[4], now)
    end
  elseif known and (m[1] == 'm' or m[1] == 'e' or m[1] == 'u') then
    moves.left = #ARGV - i + 1
    known = batch_deliver(moves, prefix, m, now)
  elseif known then
    moves.left = #ARGV - i + 1
    known = flow_deliver_node(moves, prefix, keep, m, now)
  end
  if not known then
    code = CODE.UNKNOWN
    break
  end
  applied = applied + 1
end
apply_moves(moves, {failed = failed_key, cancelled = cancelled_key}, prefix, KEEP_ALL, keep, now)
if (moves.woken or 0) > 0 then wake(prefix .. 'wake', moves.woken) end
return {now, code, applied, rcall('LLEN', prefix .. 'outbox')}
