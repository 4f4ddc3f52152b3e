-- lib/base.lua: how every script talks to the server: the command call,
-- the server's clock, reads that answer nil instead of raising on a key of
-- another type, whole numbers as decimal strings, and strings cut at a
-- byte.
--
-- The shared library is these lib/ files in the order src/store/mod.rs
-- LIB lists, then each script as a function (lua/README.md). Each file
-- uses only what the files before it define, and names those in its
-- `Needs:` line (a test checks it).
--
-- Needs: nothing.

-- redis.call, set by bind_server at every call: a function library's top
-- level runs at load, where redis.call is not there yet.
local rcall

-- What the running call did that its reply may report, cleared by
-- new_call (lib/call.lua): `outbox`, it pushed a message for another
-- queue (lib/outbox.lua outbox_push), so settle.lua's reply says so and
-- the worker relays it at once rather than at its next look.
local call_did = {}

-- A whole number as a decimal string (tostring would give "1.8e+15").
-- string.format costs about 3,000 machine instructions a call, which
-- showed in the server's profile, so small numbers (attempts) come from
-- SMALL and a call's time is formatted once (now_str). SMALL is filled by
-- bind_server at the library's first call: the top level, run at load,
-- has no `string`.
local SMALL
local function int_s(n)
  return SMALL[n] or string.format('%d', n)
end

-- `now` (the call's server time, ms) as int_s gives it, formatted once.
local now_n, now_text
local function now_str(now)
  if now ~= now_n then
    now_n, now_text = now, int_s(now)
  end
  return now_text
end

-- Binds what the top level could not have at load (call.lua new_call,
-- at the start of every call).
local function bind_server()
  rcall = redis.call
  if not SMALL then
    SMALL = {}
    for i = 0, 255 do SMALL[i] = string.format('%d', i) end
  end
end

-- The server's wall clock in milliseconds. The only clock echomq trusts.
local function server_now()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- HMGET that answers nil for a key of another type (a foreign key in
-- echomq's key space) instead of raising part-way through a script.
local function hfields(key, ...)
  local r = redis.pcall('HMGET', key, ...)
  if r.err then return nil end
  return r
end

-- GET that answers nil for a key of another type, as hfields.
local function sget(key)
  local r = redis.pcall('GET', key)
  if type(r) == 'table' then return nil end
  return r
end

-- `s` cut at each byte `sep` (a one-byte string): "" gives no parts.
local function cut(s, sep)
  local out = {}
  if not s or s == '' then return out end
  local from = 1
  while true do
    local at = string.find(s, sep, from, true)
    if not at then
      out[#out + 1] = string.sub(s, from)
      return out
    end
    out[#out + 1] = string.sub(s, from, at - 1)
    from = at + 1
  end
end
