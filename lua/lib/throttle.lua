-- lib/throttle.lua: the queue's throttles (docs/throttles.md, "Global concurrency and
-- rate limits"): its global cap, its rate limit, its lanes' rate limits
-- and a handler's hold. Keys built from the queue's prefix (same slot):
--   meta          hash (layout 3; `limits`, a hash of its own, in layout 2):
--                 `max` the most active (leased) jobs of the queue
--                 across every consumer (compared with ZCARD active);
--                 `rate` the queue's rate limit "N:W" (N claims per W ms);
--                 `hold` server ms until which no job of the queue is
--                 claimed (a handler's rate_limited, for an unlaned job)
--   limits:log    zset: the queue's recent claims, member the fencing
--                 token, score the claim's server ms; expires a window
--                 after the last claim
--   lanes:rate    hash lane -> "N:W"; field "" the default of lanes
--                 without their own
--   lanes:wait    zset lane -> server ms when a lane that its rate limit
--                 or a handler's rate_limited stopped may give jobs again
--                 (it sits LANE_BLOCKED in the ring until a claim at or
--                 after that time puts it back in turn: lanes.lua
--                 reopen_lanes)
--   lanes:log:L   zset as limits:log, for lane L
-- A rate limit is a sliding window on the server clock: in every
-- half-open window [t, t + W) at most N claims (a lease ahead counts when
-- it is claimed). A claim at `now` counts the log's entries after now - W.
--
-- Needs: base (rcall, int_s), meta (queue_meta, call_cache, meta_v3), lanes (lane_settle).

-- A rate setting "N:W" as numbers; nil for none (or a value that does not parse).
local function parse_rate(s)
  if type(s) ~= 'string' then return nil end
  local n, w = string.match(s, '^(%d+):(%d+)$')
  n, w = tonumber(n), tonumber(w)
  if not n or n < 1 or w < 1 then return nil end
  return n, w
end

-- Claims still allowed now under a limit of `n` per `w` ms whose log is
-- `log_key`, after `extra` more claims at `now` not logged yet; when none
-- is, 0 and the server ms at which one more is.
local function rate_room(log_key, n, w, now, extra)
  rcall('ZREMRANGEBYSCORE', log_key, '-inf', now - w)
  local c = rcall('ZCARD', log_key)
  local room = n - c - extra
  if room > 0 then return room, 0 end
  -- the claim that must leave the window first: rank c + extra - n in
  -- time order (the unlogged ones are the newest, at `now`)
  local r = c + extra - n
  if r >= c then return 0, now + w end
  local e = rcall('ZRANGE', log_key, r, r, 'WITHSCORES')
  return 0, tonumber(e[2]) + w
end

-- Logs the claims `tokens` made at `now` in `log_key`, which expires when
-- they have all left the window.
local function rate_log(log_key, w, now, tokens)
  if #tokens == 0 then return end
  local args = {}
  for _, t in ipairs(tokens) do
    args[#args + 1] = now
    args[#args + 1] = t
  end
  rcall('ZADD', log_key, unpack(args))
  rcall('PEXPIRE', log_key, w)
end

-- The rate limit of `lane`, its own or the default: n, w; nil for none.
local function lane_rate(prefix, lane)
  local r = rcall('HMGET', prefix .. 'lanes:rate', lane, '')
  return parse_rate(r[1] or r[2])
end

local function lane_log(prefix, lane)
  return prefix .. 'lanes:log:' .. lane
end

-- The queue's limits, {max, rate, hold} (false when absent), read once
-- per call: from the meta hash with the queue's other settings (layout 3),
-- else from the `limits` hash (a hold this call starts is written
-- through, hold_starts).
local function queue_limits(prefix)
  local c = call_cache()
  local at = 'limits:' .. prefix
  local lim = c[at]
  if not lim then
    if meta_v3(prefix) then
      local m = queue_meta(prefix)
      lim = {m[5], m[6], m[7]}
    else
      lim = rcall('HMGET', prefix .. 'limits', 'max', 'rate', 'hold')
    end
    c[at] = lim
  end
  return lim
end

-- The hash that holds the queue's limits: its meta hash from layout 3 on.
local function limits_key(prefix)
  if meta_v3(prefix) then return prefix .. 'meta' end
  return prefix .. 'limits'
end

-- The queue's global cap; nil for none.
local function global_cap(prefix)
  return tonumber(queue_limits(prefix)[1])
end

-- What the queue's hold, global cap and rate limit let a claim of up to
-- `limit` jobs at `now` lease (`active_key`: the queue's active set):
-- the jobs it may lease and, when it may lease none, the server ms at
-- which that may change (nil: it may lease); then the queue's rate limit
-- n, w (nil for none), under which the claim logs its leases; and, when
-- the rate limit leaves room for fewer than `limit`, the server ms at
-- which the window's next slot frees (the oldest claim in it leaves), so
-- that a consumer that asked for more comes back then rather than at its
-- next poll.
local function queue_room(prefix, active_key, now, limit)
  local lim = queue_limits(prefix)
  local rn, rw = parse_rate(lim[2])
  local soon
  if lim[1] or rn or lim[3] then
    local stop
    local hold = tonumber(lim[3])
    if hold and hold > now then stop = hold end
    local max = tonumber(lim[1])
    if not stop and max then
      local free = max - rcall('ZCARD', active_key)
      if free <= 0 then stop = now end
      if free < limit then limit = free end
    end
    if not stop and rn then
      local room, at = rate_room(prefix .. 'limits:log', rn, rw, now, 0)
      if room <= 0 then stop = at end
      if room > 0 and room < limit then
        local oldest = rcall('ZRANGE', prefix .. 'limits:log', 0, 0, 'WITHSCORES')[2]
        if oldest then soon = tonumber(oldest) + rw else soon = now + rw end
      end
      if room < limit then limit = room end
    end
    if stop then return limit, stop end
  end
  return limit, nil, rn, rw, soon
end

-- Stops the claims a handler's rate_limited asks to stop until `until_ms`:
-- its lane's (`lane`), else the whole queue's. A later stop never shortens
-- an earlier one.
local function hold_starts(prefix, lane, until_ms)
  if lane then
    rcall('ZADD', prefix .. 'lanes:wait', 'GT', until_ms, lane)
    lane_settle(prefix, lane)
  else
    local lim = queue_limits(prefix)
    local cur = tonumber(lim[3]) or 0
    if until_ms > cur then
      lim[3] = int_s(until_ms)
      rcall('HSET', limits_key(prefix), 'hold', lim[3])
    end
  end
end
