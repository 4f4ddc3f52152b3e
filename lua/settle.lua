-- settle: settles a batch of leased jobs in one call and, optionally,
-- leases the next jobs in the same call (the Consumer's settler sends
-- whatever finished while its previous call was in flight, and claims for
-- the slots those jobs free). Each item is fenced by its own token exactly
-- as the one-job scripts are.
--
-- KEYS[1] active  KEYS[2] pending  KEYS[3] delayed  KEYS[4] completed
-- KEYS[5] failed  KEYS[6] wake
-- ARGV[1] key prefix "emq:{Q}:" (job keys are built from it, same slot)
-- ARGV[2] retention of completed jobs  ARGV[3] retention of failed jobs
-- ARGV[4] default max_attempts
-- ARGV[5] number of items N, then 5 fields per item:
--   op     c complete | r retry | f fail | l release
--   id     job id        token  fencing token
--   delay  retry delay, milliseconds ("0" otherwise)
--   text   retry error text or fail reason ("" otherwise)
-- then (optional) lease length in milliseconds and M, the most jobs to
-- lease after settling (as claim.lua, but without promoting due delayed
-- jobs: that costs a command per call on the hot path, and the reaper and
-- plain claims do it).
--
-- Returns {now, code_1, due_1, ..., code_N, due_N} with codes as the
-- one-job scripts (1 done, 3 failed terminally (retry), 2 already settled
-- this way with this token, -1 no such job, -2 lease lost: nothing
-- changed), followed when M was sent by claim.lua's {deadline, id, token,
-- failures, payload, ...}.
local k = {active = KEYS[1], pending = KEYS[2], delayed = KEYS[3], completed = KEYS[4], failed = KEYS[5],
  wake = KEYS[6]}
local prefix = ARGV[1]
local keep_completed, keep_failed = tonumber(ARGV[2]), tonumber(ARGV[3])
local default_max, n = tonumber(ARGV[4]), tonumber(ARGV[5])
local now = server_now()
local out = {now}
local moves = new_moves()
for i = 0, n - 1 do
  local b = 6 + i * 5
  local op, id, token = ARGV[b], ARGV[b + 1], ARGV[b + 2]
  local jk = prefix .. 'job:' .. id
  local r, dd = check_owner(jk, token, op, now)
  if not r then
    if op == 'c' then r = settle_complete(moves, prefix, jk, id, token, now, keep_completed, dd)
    elseif op == 'r' then
      r = settle_retry(moves, k, prefix, jk, id, token, now, tonumber(ARGV[b + 3]), ARGV[b + 4], default_max,
        keep_failed, dd)
    elseif op == 'f' then r = settle_fail(moves, prefix, jk, id, token, now, ARGV[b + 4], keep_failed, dd)
    else r = settle_release(moves, k, jk, id, token, now) end
  end
  out[#out + 1] = r[1]
  out[#out + 1] = r[3] or 0
end
apply_moves(moves, k, prefix, keep_completed, keep_failed)
local c = 6 + n * 5
if ARGV[c + 1] then
  claim_jobs(k, prefix, now, tonumber(ARGV[c]), tonumber(ARGV[c + 1]), false, out)
end
return out
