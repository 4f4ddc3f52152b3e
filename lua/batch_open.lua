-- batch_open: opens a batch of the queue (lib/batch.lua): its hash, with
-- no members yet, and the callbacks its end enqueues. Members join
-- through enqueue.lua (its `batch`) until batch_close.lua closes it.
--
-- KEYS[1] seq  mint counter (a minted batch id is its next number)
-- KEYS[2] meta (hash: `bt` marks the queue as one that has batches)
-- ARGV[1] prefix    key prefix "emq:{Q}:"
-- ARGV[2] id        "" to mint one
-- ARGV[3] keep      ms the hash stays after the batch ended (0: until
--                   deleted with the queue)
-- ARGV[4] success   the success callback's payload (JSON), "" for none:
--                   enqueued when every member completed
-- ARGV[5] success_kind   its kind, "" for none
-- ARGV[6] complete  the complete callback's payload, "" for none:
--                   enqueued when every member ended
-- ARGV[7] complete_kind  its kind, "" for none
-- ARGV[8] death     the death callback's payload, "" for none: enqueued
--                   when the first member failed for good
-- ARGV[9] death_kind     its kind, "" for none
--
-- REPLY: {now:int, code:code, id:str}
-- OK opened; EXISTS a batch with that id exists (nothing written).
local seq_key, meta_key = KEYS[1], KEYS[2]
local prefix, id, keep = ARGV[1], ARGV[2], ARGV[3]
local now = server_now()
if id == '' then id = int_s(rcall('INCR', seq_key)) end
local bk = prefix .. 'batch:' .. id
if rcall('EXISTS', bk) == 1 then return {now, CODE.EXISTS, id} end
local h = {'n', '0', 'c', '0', 'f', '0', 'x', '0', 'ct', now_str(now), 'kp', keep}
for i, f in ipairs({'sp', 'sk', 'cp', 'ck', 'dp', 'dk'}) do
  local v = ARGV[3 + i]
  if v ~= '' then h[#h + 1] = f; h[#h + 1] = v end
end
rcall('HSET', bk, unpack(h))
rcall('HSET', meta_key, 'bt', '1')
return {now, CODE.OK, id}
