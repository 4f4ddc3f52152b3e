-- settle: settles a batch of leased jobs in one call (one job is a batch
-- of one) and, optionally, leases the next jobs in the same call (the
-- Consumer's settler sends whatever finished while its previous call was
-- in flight, and claims for the slots those jobs free). Each item is
-- fenced by its own token.
--
-- KEYS[1] active  KEYS[2] pending  KEYS[3] delayed  KEYS[4] completed
-- KEYS[5] failed  KEYS[6] wake  KEYS[7] token  KEYS[8] meta  KEYS[9] cancelled
-- KEYS[10] expired
-- ARGV[1] prefix     key prefix "emq:{Q}:" (job keys are built from it, same slot)
-- ARGV[2] keep_completed  retention of completed jobs: "N" (-1 all, 0 delete the record, n newest n)
--                         or "N/AGE_MS" (and none finished more than AGE_MS ago)
-- ARGV[3] keep_failed     retention of failed jobs, as keep_completed
-- ARGV[4] items      number of items N, then 5 fields per item:
--   op     c complete | r retry | f fail | l release | s snooze | x cancel
--          | h rate limited (a snooze that also stops the claims of the
--          job's lane, or of the whole queue for a job without a lane,
--          until the delay has passed: lib/throttle.lua hold_starts)
--   id     job id        token  fencing token
--   delay  milliseconds: retry "" for the job's backoff; snooze and rate
--          limited the delay; "0" otherwise
--   text   complete: the result (JSON) to keep, "" for none; retry: error
--          text; fail, cancel: reason ("" otherwise)
-- then (optional) lease length in milliseconds, M, the most jobs to lease
-- after settling, and the holder's name (as claim.lua, but without
-- promoting due delayed jobs: that costs a command per call on the hot
-- path, and the reaper and plain claims do it).
--
-- A retry counts a failure and fails the job for good at its own
-- max_attempts; a snooze and a release count neither a failure nor a stall.
-- A job whose cancel was requested ends cancelled on any settlement but a
-- complete. A retry, release or snooze that would make a job wait until
-- its expiry or later ends it expired instead (lib/expiry.lua).
--
-- REPLY: {now:int, outcomes:str, [deadline:int, wait:int,
--   (head:str, payload:str)*]}
-- outcomes is "" when every item got (OK, 0), the common case; else
-- `code,due` per item, in order, all joined by commas (one reply element
-- rather than two an item: lua/README.md, settle). Codes: OK, FAILED (a
-- retry failed the job for good), CANCELLED (the job ended cancelled),
-- EXPIRED (the job ended expired), ALREADY (this settlement already
-- happened with this token), NOT_FOUND, LEASE_LOST (nothing changed);
-- due is the delayed job's due time (server ms), 0 otherwise. Either
-- way it then ends with ";o" when the call pushed a message onto the
-- queue's outbox (a step's end for its flow's home on another queue, a
-- parent released there, a batch member's end for its batch's queue), so the caller's maintenance relays it within
-- RELAY_HOT_INTERVAL. When M was sent,
-- claim.lua's reply after its `now` follows.
-- Every item that ends a lease gives its lane's slot back
-- (lib/sets.lua apply_moves) before the claim; slots freed under the queue's
-- global cap that this call's claim leaves free wake other consumers.
--
-- Events (lib/events.lua, unless the queue turned them off): completed,
-- retried, failed, released, snoozed, rate_limited, cancelled, expired (one
-- per item applied), claimed (each job leased after; expired, each job a
-- claim found past its expiry).
local k = {active = KEYS[1], pending = KEYS[2], delayed = KEYS[3], completed = KEYS[4], failed = KEYS[5],
  wake = KEYS[6], token = KEYS[7], meta = KEYS[8], cancelled = KEYS[9], expired = KEYS[10]}
local prefix = ARGV[1]
local keep_completed, keep_failed = retention(ARGV[2]), retention(ARGV[3])
local n = tonumber(ARGV[4])

-- Item i's fields (1-based): op, id, token, delay, text.
local function item(i)
  local b = 5 * i
  return ARGV[b], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
end
-- After the items: the claim's lease (ms), its most jobs (nil: no claim)
-- and the holder.
local c = 5 * (n + 1)
local claim_lease, claim_max, claim_holder = ARGV[c], ARGV[c + 1], ARGV[c + 2]

local now = server_now()
local out = {now, ''}
-- each item's code and due, sent only when one is not (OK, 0)
local res, plain = {}, true
local moves = new_moves()
moves.defer = claim_max ~= nil
-- records this call deletes are not stamped first (lib/sets.lua finish)
moves.gone = {}
for i = 1, n do
  local op, id, token, delay, text = item(i)
  local jk = prefix .. 'job:' .. id
  if op == 'c' and not moves.gone[jk] then
    -- the most common settlement, with its own owner check
    local code = settle_complete(moves, prefix, jk, id, token, now, keep_completed, text)
    res[#res + 1] = code
    res[#res + 1] = 0
    if code ~= CODE.OK then plain = false end
  else
    local r, owner
    if moves.gone[jk] then
      r = settled_in_call(moves.gone[jk], token, op, now)
    else
      r, owner = check_owner(jk, token, op, now)
    end
    if not r then
      if op == 'x' or owner.cx then
        r = settle_cancel(moves, prefix, jk, id, token, now, op, text, keep_failed, owner)
      elseif op == 'r' then
        r = settle_retry(moves, k, prefix, jk, id, token, now, tonumber(delay) or -1, text, keep_failed, owner)
      elseif op == 'f' then r = settle_fail(moves, prefix, jk, id, token, now, text, keep_failed, owner)
      else
        r = settle_requeue(moves, k, prefix, jk, id, token, now, op, tonumber(delay) or 0, keep_failed, owner)
        if op == 'h' then hold_starts(prefix, owner.ln, now + (tonumber(delay) or 0)) end
      end
    end
    res[#res + 1] = r[1]
    res[#res + 1] = r[2] or 0
    if r[1] ~= CODE.OK or (r[2] or 0) ~= 0 then plain = false end
  end
end
if not plain then
  for i = 1, #res do res[i] = int_s(res[i]) end
  out[2] = table.concat(res, ',')
end
apply_moves(moves, k, prefix, keep_completed, keep_failed, now)
if claim_max then
  claim_jobs(k, prefix, now, tonumber(claim_lease), tonumber(claim_max), false, claim_holder, out, keep_failed)
  wake_freed(prefix, moves)
end
-- after the claim too: a step it found past its expiry ended there
if call_did.outbox then out[2] = out[2] .. ';o' end
return out
