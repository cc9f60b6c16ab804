package redisstore

import "github.com/redis/go-redis/v9"

// The bucket arithmetic mirrors limits.MemoryStore: a hash per bucket with
// l (level) and t (microseconds: the time the level was computed at, or
// the end of a block when it lies ahead). Times are integers in
// microseconds, exact in a Lua double. ARGV[1] is the clock: "" means the
// server's TIME.

const clockLua = `
local now
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
else
  now = tonumber(ARGV[1])
end
local function load(key, cap, rate)
  local h = redis.call('HMGET', key, 'l', 't')
  local l, t
  if not h[1] then
    l = cap
    t = now
  else
    l = tonumber(h[1])
    t = tonumber(h[2])
  end
  if now > t then
    l = l + (now - t) * rate
    t = now
  end
  if l > cap then l = cap end
  return l, t
end
local function save(key, l, t, cap, rate)
  redis.call('HSET', key, 'l', string.format('%.17g', l), 't', string.format('%.0f', t))
  -- Past this the bucket is full again: the key can go.
  local full = (cap - l) / rate
  if t > now then full = full + (t - now) end
  redis.call('PEXPIRE', key, math.ceil(full / 1000) + 1000)
end
`

// takeScript: KEYS are buckets; ARGV[1] the clock, then per bucket
// capacity, rate (per second), n, floor. Returns the wait in microseconds
// ("0": taken).
var takeScript = redis.NewScript(clockLua + `
local n = #KEYS
local ls, ts = {}, {}
local wait = 0
for i = 1, n do
  local b = 1 + (i - 1) * 4
  local cap = tonumber(ARGV[b + 1])
  local rate = tonumber(ARGV[b + 2]) / 1000000
  local need = tonumber(ARGV[b + 3])
  local floor = tonumber(ARGV[b + 4])
  local l, t = load(KEYS[i], cap, rate)
  ls[i], ts[i] = l, t
  local w = 0
  if t > now then w = t - now end
  local short = need + floor - l
  if short > 1e-6 then w = w + short / rate end
  if w > wait then wait = w end
end
if wait > 0 then
  return string.format('%.0f', math.max(1, math.ceil(wait)))
end
for i = 1, n do
  local b = 1 + (i - 1) * 4
  save(KEYS[i], ls[i] - tonumber(ARGV[b + 3]), ts[i], tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]) / 1000000)
end
return '0'
`)

// bucketScript: KEYS[1] the bucket; ARGV: clock, capacity, rate, op
// ("put" delta | "block" microseconds | "level" 0). Returns the level.
var bucketScript = redis.NewScript(clockLua + `
local cap = tonumber(ARGV[2])
local rate = tonumber(ARGV[3]) / 1000000
local op = ARGV[4]
local x = tonumber(ARGV[5])
local l, t = load(KEYS[1], cap, rate)
if op == 'put' then
  l = math.min(l + x, cap)
  save(KEYS[1], l, t, cap, rate)
elseif op == 'block' then
  l = math.min(l, 0)
  t = math.max(t, now + x)
  save(KEYS[1], l, t, cap, rate)
end
return string.format('%.17g', l)
`)

// chargeScript: KEYS[1] the run's hash (mc, tc, tok, sp); ARGV: ttl ms,
// add (4), headroom (4), max (4). Adds add unless a positive max would be
// crossed by total+add+headroom. Returns the totals and the crossed field.
var chargeScript = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 'mc', 'tc', 'tok', 'sp')
local cur = {}
for i = 1, 4 do cur[i] = tonumber(h[i]) or 0 end
local names = {'max_model_calls', 'max_tool_calls', 'max_tokens', 'max_spend'}
local over = ''
for i = 1, 4 do
  local add = tonumber(ARGV[1 + i])
  local head = tonumber(ARGV[5 + i])
  local mx = tonumber(ARGV[9 + i])
  local eps = 0
  if i == 4 then eps = 1e-9 end
  if over == '' and mx > 0 and cur[i] + add + head > mx + eps then over = names[i] end
end
if over == '' then
  local f = {'mc', 'tc', 'tok'}
  for i = 1, 3 do
    local add = tonumber(ARGV[1 + i])
    if add ~= 0 then cur[i] = redis.call('HINCRBY', KEYS[1], f[i], add) end
  end
  local sp = tonumber(ARGV[5])
  if sp ~= 0 then cur[4] = tonumber(redis.call('HINCRBYFLOAT', KEYS[1], 'sp', ARGV[5])) end
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return {string.format('%d', cur[1]), string.format('%d', cur[2]), string.format('%d', cur[3]), string.format('%.17g', cur[4]), over}
`)
