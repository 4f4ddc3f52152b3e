-- batch_close: closes a batch (lib/batch.lua): no member joins it after
-- this call, and when every member has ended (at once, for an empty
-- batch or one whose members all ended already) its callbacks are
-- enqueued by the call that sees it.
--
-- KEYS[1] batch (hash PREFIX:{Q}:batch:BID)
-- ARGV[1] prefix  key prefix "emq:{Q}:"
-- ARGV[2] id      the batch's id
--
-- REPLY: {now:int, code:code}
-- OK closed; CLOSED it was closed already (nothing changed); NOT_FOUND
-- no such batch (never opened, or its hash expired after its end).
local bk = KEYS[1]
local prefix, id = ARGV[1], ARGV[2]
local now = server_now()
local b = batch_fields(bk)
if not (b and b[1]) then return {now, CODE.NOT_FOUND} end
if b[5] then return {now, CODE.CLOSED} end
b[5] = now_str(now)
rcall('HSET', bk, 'cl', b[5])
batch_end(prefix, bk, id, b, now)
return {now, CODE.OK}
