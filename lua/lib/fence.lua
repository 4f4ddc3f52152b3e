-- lib/fence.lua: fencing: the tokens claims mint, and the check that a
-- settlement, a renewal or a progress report comes from the attempt that
-- holds the job (its state active under the caller's token), remembering
-- the job's last LO_KEEP settlements so a resent one answers ALREADY.
--
-- Needs: base (rcall, hfields, int_s), codes (CODE).

-- Settlements a job's `lo` field remembers.
local LO_KEEP = 8

-- Mints `n` fencing tokens from the queue-wide counter and returns the
-- last one: tokens never repeat for a queue, even when a job's record is
-- deleted and its id enqueued again. A new counter starts at the server
-- clock times 1000, so a queue whose keys were deleted does not mint its
-- old tokens again either.
local function mint_tokens(token_key, now, n)
  local last = rcall('INCRBY', token_key, n)
  if last == n then
    last = now * 1000 + n
    rcall('SET', token_key, int_s(last))
  end
  return last
end

-- True when the settlements `lo` (a job's `lo` field) hold settlement `op`
-- with `token`.
local function settled_before(lo, op, token)
  return string.find(' ' .. lo .. ' ', ' ' .. op .. ':' .. token .. ' ', 1, true) ~= nil
end

-- The reply to a caller that does not hold job `jk` with `token`, from
-- the record's `st`, `tk` and `lo` as read (`st` nil: no record): nil when
-- it does (state active under `token`); {ALREADY, now} when settlement
-- `op` already happened with this token (its reply was lost; remembered
-- for the job's last LO_KEEP settlements); {NOT_FOUND, now} for a missing
-- job; {LEASE_LOST, now} for a lost lease.
local function not_owner(st, tk, lo, token, op, now)
  if not st then return {CODE.NOT_FOUND, now} end
  if st == 'active' and tk == token then return nil end
  if op and lo and settled_before(lo, op, token) then return {CODE.ALREADY, now} end
  return {CODE.LEASE_LOST, now}
end

-- Checks that the caller still owns job `jk` with `token` (a string, as
-- sent). Returns nil and the job's owner fields {dd, lo, cx, ln, a, tk,
-- kd, xa} when it does, or the reply to send (not_owner).
local function check_owner(jk, token, op, now)
  local cur = hfields(jk, 'st', 'tk', 'lo', 'dd', 'cx', 'ln', 'a', 'kd', 'xa')
  local refused = not_owner(cur and cur[1], cur and cur[2], cur and cur[3], token, op, now)
  if refused then return refused end
  -- a, tk and kd too: the settlement's event needs them (emit_job); xa:
  -- a settlement that makes the job wait checks its expiry
  return nil, {dd = cur[4], lo = cur[3], cx = cur[5], ln = cur[6], a = cur[7], tk = token, kd = cur[8], xa = cur[9]}
end

-- check_owner's reply for a job whose record this call settles and
-- deletes (sets.lua finish, with moves.gone): `lo` is the record's
-- settlements as finish left them.
local function settled_in_call(lo, token, op, now)
  if settled_before(lo, op, token) then return {CODE.ALREADY, now} end
  return {CODE.LEASE_LOST, now}
end

-- The `lo` field after settlement `op` with `token`, `lo` the field as it
-- was (nil for none): newest first, at most LO_KEEP entries.
local function remember(lo, op, token)
  if not lo then return op .. ':' .. token end
  local entries = {op .. ':' .. token}
  for e in string.gmatch(lo, '%S+') do
    if #entries >= LO_KEEP then break end
    entries[#entries + 1] = e
  end
  return table.concat(entries, ' ')
end
