-- lib/outbox.lua: messages to other queues. A flow or batch whose jobs
-- are on several queues spans several hash slots (on a Cluster, several
-- masters), which no script may touch at once: a call that must change
-- another queue pushes a message onto its own queue's `outbox` in the
-- same atomic call as the change that caused it, and the relay
-- (src/relay.rs) carries it to deliver.lua on its target, at least once.
-- The target applies it once: by a receipt in its `inbox` (the messages
-- that make a job), or because what it writes is written once (an end).
--
-- Needs: base (rcall, int_s, call_did).

-- The name of the queue whose prefix is `prefix` ("emq:{Q}:"; a prefix
-- holds no brace, src/keys.rs).
local function own_queue(prefix)
  return string.match(prefix, '{(.*)}:$')
end

-- Pushes a message for queue `target` onto the outbox of the queue of
-- `prefix`: the target's name and "\30", then each of `fields` (strings)
-- as its length, ":" and its bytes, so any bytes pass.
local function outbox_push(prefix, target, fields)
  local out = {target, '\30'}
  for _, f in ipairs(fields) do
    out[#out + 1] = #f .. ':'
    out[#out + 1] = f
  end
  rcall('RPUSH', prefix .. 'outbox', table.concat(out))
  call_did.outbox = true
end

-- The fields of a message's body (after its target's "\30"), as
-- outbox_push wrote them; nil for bytes it did not write.
local function message_fields(s)
  local fields, at = {}, 1
  while at <= #s do
    local colon = string.find(s, ':', at, true)
    local len = colon and tonumber(string.sub(s, at, colon - 1))
    if not len or colon + len > #s then return nil end
    fields[#fields + 1] = string.sub(s, colon + 1, colon + len)
    at = colon + len + 1
  end
  return fields
end

-- Receipts of applied messages that make a job stay this long in `inbox` (ms): a
-- message the relay delivers again within it is applied once. A second
-- delivery comes from a relay that stopped between applying a message
-- and taking it off its outbox, at its next run (seconds, unless no
-- process relays that outbox for a day); a receipt costs about 100 bytes.
local RECEIPT_KEEP = 86400000

-- Whether message `receipt` (its sender, ids and the group's `ct`,
-- joined by "\31") is new here: it is then written into the queue's
-- inbox, and false once it is there. The first one of a call trims the
-- receipts past their keep time.
local function receipt_new(moves, prefix, receipt, now)
  local inbox = prefix .. 'inbox'
  if rcall('ZSCORE', inbox, receipt) then return false end
  if not moves.inbox_trimmed then
    moves.inbox_trimmed = true
    rcall('ZREMRANGEBYSCORE', inbox, '-inf', '(' .. int_s(now - RECEIPT_KEEP))
  end
  rcall('ZADD', inbox, int_s(now), receipt)
  return true
end
