-- batch_join: joins jobs of another queue to a batch of this queue
-- (lib/batch.lua): counts them in now, and for each pushes a message onto
-- this queue's outbox that makes it on its queue (deliver.lua there, once);
-- its end comes back the same way. The caller has checked the jobs.
--
-- KEYS[1] batch (hash PREFIX:{Q}:batch:BID)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] id      the batch's id
-- ARGV[3] queue   the members' queue (same prefix, another queue)
-- ARGV[4] jobs    number of jobs N, then 8 fields per job: id ("" for
--                 BID:NUMBER, its number among the batch's members of
--                 other queues), payload (JSON), priority, delay (ms, or
--                 "@MS" due at server ms), limits (`lm`, "" for the
--                 defaults), lane, kind, traceparent ("" for none)
--
-- REPLY: {now:int, code:code, (id:str)*}
-- OK joined, each job's id in order; CLOSED the batch is closed, NOT_FOUND
-- no such batch: no ids, nothing written.
local bk = KEYS[1]
local prefix, bid, queue = ARGV[1], ARGV[2], ARGV[3]
local n = tonumber(ARGV[4])
local now = server_now()
local b = hfields(bk, 'n', 'cl', 'ct', 'mn')
if not (b and b[1]) then return {now, CODE.NOT_FOUND} end
if b[2] then return {now, CODE.CLOSED} end
local home, ct = own_queue(prefix), b[3] or ''
local out = {now, CODE.OK}
local num = tonumber(b[4]) or 0
local tracked = {}
for j = 0, n - 1 do
  local a = 5 + j * 8
  num = num + 1
  local k = int_s(num)
  local id = ARGV[a]
  if id == '' then id = bid .. ':' .. k end
  local when, due = ARGV[a + 3], ''
  if string.sub(when, 1, 1) == '@' then
    due = string.sub(when, 2)
  elseif (tonumber(when) or 0) > 0 then
    due = int_s(now + tonumber(when))
  end
  outbox_push(prefix, queue, {'m', bid, ct, k, home, id, ARGV[a + 1], ARGV[a + 2], ARGV[a + 4], ARGV[a + 5],
    ARGV[a + 6], ARGV[a + 7], due})
  tracked[#tracked + 1] = 'm:' .. k
  tracked[#tracked + 1] = queue .. '\31' .. id
  out[#out + 1] = id
end
if n > 0 then
  rcall('HSET', bk, 'mn', int_s(num), unpack(tracked))
  rcall('HINCRBY', bk, 'n', n)
end
return out
