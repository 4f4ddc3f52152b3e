-- The floor of scripts/profile-cost (mode `floor`): the least a fenced
-- settle-and-claim of a batch can do on echomq's keyspace, so its cost per
-- job bounds what any script on this keyspace could reach. Per completed
-- job: the fence check (HMGET st tk), the record stamped (HSET st ft lo);
-- per call: the active set's ZREM, the completed set's ZADD; per leased
-- job: its fields (HMGET p p2 f a: the 100-byte payload is two parts), its lease (HSET a tk st hd); per call:
-- ZPOPMIN, the token counter, the active set's ZADD, and one event entry
-- when ARGV[2] is "1". No dedup, retention trim, lanes, throttles, pause,
-- expiry or split payloads: each of those is a feature this floor leaves out.
-- With ARGV[4] "1" (mode `floor_plist`) pending is a list instead (LPOP of
-- the call's jobs, no score), all else the same: what a pending list alone
-- would save, apart from floor_list.lua's lease per call.
-- KEYS: pending active completed token events; ARGV: prefix, events, max,
-- pending is a list, then id, token per job to complete.
local prefix, ev, max, plist = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3]), ARGV[4] == '1'
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local now_s = string.format('%d', now)
local out, gone, fin, evs = {}, {}, {}, {}
for i = 5, #ARGV, 2 do
  local id, tk = ARGV[i], ARGV[i + 1]
  local jk = prefix .. 'job:' .. id
  local cur = redis.call('HMGET', jk, 'st', 'tk')
  if cur[1] == 'active' and cur[2] == tk then
    redis.call('HSET', jk, 'st', 'completed', 'ft', now_s, 'lo', 'c:' .. tk)
    gone[#gone + 1] = id
    fin[#fin + 1] = now_s
    fin[#fin + 1] = id
    evs[#evs + 1] = id
  end
end
if #gone > 0 then
  redis.call('ZREM', KEYS[2], unpack(gone))
  redis.call('ZADD', KEYS[3], unpack(fin))
end
local popped, step
if plist then
  popped, step = redis.call('LPOP', KEYS[1], max) or {}, 1
else
  popped, step = redis.call('ZPOPMIN', KEYS[1], max), 2
end
local n = #popped / step
if n > 0 then
  local token = redis.call('INCRBY', KEYS[4], n) - n
  local dl = string.format('%d', now + 600000)
  local z = {}
  for i = 1, #popped, step do
    local id = popped[i]
    local jk = prefix .. 'job:' .. id
    token = token + 1
    local tk = string.format('%d', token)
    local job = redis.call('HMGET', jk, 'p', 'p2', 'f', 'a')
    local a = (tonumber(job[4]) or 0) + 1
    redis.call('HSET', jk, 'a', a, 'tk', tk, 'st', 'active', 'hd', 'w')
    z[#z + 1] = dl
    z[#z + 1] = id
    evs[#evs + 1] = id
    out[#out + 1] = id
    out[#out + 1] = tk
    out[#out + 1] = job[1] .. (job[2] or '')
  end
  redis.call('ZADD', KEYS[2], unpack(z))
end
if ev and #evs > 0 then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', '16', '*', 'e', 'claimed', 'n', #evs, 'z', table.concat(evs, '\0'))
end
return out
