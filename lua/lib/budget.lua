-- lib/budget.lua: a job's retry budget, its `lm` field, and the backoff
-- between attempts, with jitter (src/limits.rs is the same on the Rust
-- side; unit tests there check values computed here).
--
-- `lm` is "MAX_ATTEMPTS:MAX_STALLS:BACKOFF[;jJITTER][;tTIMEOUT_MS]",
-- absent for the defaults (defaults.lua); BACKOFF is "fMS" (fixed) or
-- "eBASE_MS:MAX_MS" (exponential), JITTER the backoff's jitter in
-- thousandths (1 to 1000; absent: none); the timeout is the consumer's to
-- enforce.
--
-- Needs: defaults (DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_STALLS, DEFAULT_BACKOFF, MAX_DELAY_MS).

-- The job's budget from its `lm` field: max_attempts, max_stalls, backoff,
-- and the backoff's jitter in thousandths (0: none).
local function budget(lm)
  if lm then
    local ma, ms, bo = string.match(lm, '^(%d+):(%d+):([^;]+)')
    if ma then
      local jitter = tonumber(string.match(lm, ';j(%d+)')) or 0
      if jitter > 1000 then jitter = 1000 end
      return tonumber(ma), tonumber(ms), bo, jitter
    end
  end
  return DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_STALLS, DEFAULT_BACKOFF, 0
end

-- Jitter's randomness. The script's own PRNG is no use: the server may
-- seed it the same before every call. So the draw is a hash of the retry's
-- fencing token (unique per claim in the queue) and failure count, computed
-- exactly: every intermediate stays below 2^53, and `bit` (LuaBitOp) works
-- on 32 bits. src/limits.rs jitter_hash is the same, bit for bit (a unit
-- test checks values computed here).
local TWO32 = 4294967296

-- (a * b) mod 2^32 for a, b in [0, 2^32).
local function mul32(a, b)
  local bl = b % 65536
  local bh = (b - bl) / 65536
  return ((a * bh) % 65536 * 65536 + a * bl) % TWO32
end

-- murmur3's 32-bit finalizer (bit.* answer signed 32-bit numbers: % TWO32
-- makes them unsigned again).
local function mix32(h)
  h = bit.bxor(h, bit.rshift(h, 16)) % TWO32
  h = mul32(h, 2246822507) -- 0x85ebca6b
  h = bit.bxor(h, bit.rshift(h, 13)) % TWO32
  h = mul32(h, 3266489909) -- 0xc2b2ae35
  return bit.bxor(h, bit.rshift(h, 16)) % TWO32
end

-- A number in [0, 2^32) from token `tk` (below 2^53) and `failures`.
local function jitter_hash(tk, failures)
  local lo = tk % TWO32
  local hi = (tk - lo) / TWO32
  local h = mix32(failures % TWO32)
  h = mix32((h + hi) % TWO32)
  return mix32((h + lo) % TWO32)
end

-- floor(h * n / 2^32), exactly, for h in [0, 2^32) and n below 2^36.
local function scale32(h, n)
  local nl = n % 65536
  local a = h * ((n - nl) / 65536)
  local ar = a % 65536
  return (a - ar) / 65536 + math.floor((ar * 65536 + h * nl) / TWO32)
end

-- The delay (ms) after the `failures`-th failure under backoff `bo`,
-- saturating at MAX_DELAY_MS; with `jitter` (thousandths) drawn uniformly
-- from [d - floor(d * jitter / 1000), d] by the hash of token `tk` and
-- `failures` (src/limits.rs Backoff::delay_for is the same).
local function backoff_ms(bo, failures, jitter, tk)
  local d
  local fixed = string.match(bo, '^f(%d+)$')
  if fixed then
    d = tonumber(fixed)
  else
    local base, max = string.match(bo, '^e(%d+):(%d+)$')
    base, max = tonumber(base) or 1000, tonumber(max) or 600000
    local shift = failures - 1
    if shift < 0 then shift = 0 end
    if shift > 62 then shift = 62 end
    d = base * 2 ^ shift
    if d > max then d = max end
  end
  if d > MAX_DELAY_MS then d = MAX_DELAY_MS end
  if jitter > 0 then
    local span = math.floor(d * jitter / 1000)
    if span > 0 then d = d - span + scale32(jitter_hash(tk, failures), span + 1) end
  end
  return d
end
