-- batch_join: joins jobs of another queue to a batch of this queue
-- (lib/batch.lua): counts them in now, and for each pushes a message onto
-- this queue's outbox that makes it on its queue (deliver.lua there, once);
-- its end comes back the same way. The caller has checked the jobs.
--
-- KEYS[1] batch (hash PREFIX:{Q}:batch:BID)
-- KEYS[2] seq    mint counter (numbers the members: unique on the queue,
--                so a batch opened again with an old id mints new ids)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] id      the batch's id
-- ARGV[3] queue   the members' queue (same prefix, another queue)
-- ARGV[4] jobs    number of jobs N, then 8 fields per job: id ("" for
--                 BID:NUMBER@QUEUE, NUMBER the member's from this queue's
--                 mint counter, QUEUE this queue's name: unique whichever
--                 queue opened a batch of that id), payload (JSON), priority, delay (ms, or
--                 "@MS" due at server ms), limits (`lm`, "" for the
--                 defaults), lane, kind, traceparent ("" for none)
--
-- REPLY: {now:int, code:code, [ct:int, (id:str, number:int)*]}
-- OK joined: the batch's `ct`, then each job's id and number in order
-- (its record on its queue will hold them in `bh`); CLOSED the batch is
-- closed, NOT_FOUND no such batch: nothing more, nothing written.
local bk, seq_key = KEYS[1], KEYS[2]
local prefix, bid, queue = ARGV[1], ARGV[2], ARGV[3]
local n = tonumber(ARGV[4])
local now = server_now()
local b = hfields(bk, 'n', 'cl', 'ct')
if not (b and b[1]) then return {now, CODE.NOT_FOUND} end
if b[2] then return {now, CODE.CLOSED} end
local home, ct = own_queue(prefix), b[3] or ''
local out = {now, CODE.OK, ct}
local mint = minter(seq_key)
local tracked = {}
for j = 0, n - 1 do
  local a = 5 + j * 8
  local k = int_s(mint(n - j))
  local id = ARGV[a]
  if id == '' then id = bid .. ':' .. k .. '@' .. home end
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
  out[#out + 1] = k
end
if n > 0 then
  rcall('HSET', bk, unpack(tracked))
  rcall('HINCRBY', bk, 'n', n)
end
return out
