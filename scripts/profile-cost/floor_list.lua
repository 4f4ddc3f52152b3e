-- The floor of another keyspace (mode `floor_list`): floor.lua's fenced
-- settle-and-claim with default-priority pending jobs in a list (LPOP, no
-- score) and one lease per claim call instead of one active-set entry
-- per job (a sorted set of lease groups, keyed by the call's first
-- token; a job's group is found from its token). The completed jobs go
-- onto a list. Per completed job: HMGET st tk, HSET st ft lo; per leased
-- job: HMGET p p2 f a, HSET a tk st hd; per call: LPOP, the token
-- counter, one ZADD of the group, one LPUSH of the completed, one event
-- entry when ARGV[2] is "1".
-- KEYS: pending (a list) leases completed token events; ARGV: prefix,
-- events, max, then id, token per job to complete.
local prefix, ev, max = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local now_s = string.format('%d', now)
local out, fin, evs = {}, {}, {}
for i = 4, #ARGV, 2 do
  local id, tk = ARGV[i], ARGV[i + 1]
  local jk = prefix .. 'job:' .. id
  local cur = redis.call('HMGET', jk, 'st', 'tk')
  if cur[1] == 'active' and cur[2] == tk then
    redis.call('HSET', jk, 'st', 'completed', 'ft', now_s, 'lo', 'c:' .. tk)
    fin[#fin + 1] = id
    evs[#evs + 1] = id
  end
end
if #fin > 0 then redis.call('LPUSH', KEYS[3], unpack(fin)) end
local popped = redis.call('LPOP', KEYS[1], max)
if popped then
  local n = #popped
  local token = redis.call('INCRBY', KEYS[4], n) - n
  redis.call('ZADD', KEYS[2], string.format('%d', now + 600000), string.format('%d', token + 1))
  for i = 1, n do
    local id = popped[i]
    local jk = prefix .. 'job:' .. id
    token = token + 1
    local tk = string.format('%d', token)
    local job = redis.call('HMGET', jk, 'p', 'p2', 'f', 'a')
    local a = (tonumber(job[4]) or 0) + 1
    redis.call('HSET', jk, 'a', a, 'tk', tk, 'st', 'active', 'hd', 'w')
    evs[#evs + 1] = id
    out[#out + 1] = id
    out[#out + 1] = tk
    out[#out + 1] = job[1] .. (job[2] or '')
  end
end
if ev and #evs > 0 then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', '16', '*', 'e', 'claimed', 'n', #evs, 'z', table.concat(evs, '\0'))
end
return out
