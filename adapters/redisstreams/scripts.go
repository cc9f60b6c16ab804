package redisstreams

import "github.com/redis/go-redis/v9"

// The Lua scripts. Each runs atomically in Redis, so a lease, a move to the
// dead-letter stream or a promotion of a delayed message is never half
// done, whatever happens to the client. Times come from the server's clock
// (TIME), so consumers on hosts whose clocks differ agree on leases.
//

const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local later = now + 1 -- TIME is floored to the ms: deadlines round up
`

// publishScript adds a batch of messages. KEYS: per message the lane's
// stream, delay set, held hash and dedup key. ARGV: dedup window (ms, 0 =
// forever), max_len (0 = none), then per message: ID, run-at (ms, 0 =
// now), envelope, has-key ("1"/"0"), delay token.
//
// Per message it returns "" (added), "d:<id>" (a duplicate of <id>),
// "o" (this very ID was published before: already there) or "f" (the lane
// is full: max_len).
var publishScript = redis.NewScript(luaNow + `
local win = tonumber(ARGV[1])
local maxlen = tonumber(ARGV[2])
local res = {}
local n = #KEYS / 4
for i = 0, n - 1 do
  local s, z, zh, k = KEYS[4*i+1], KEYS[4*i+2], KEYS[4*i+3], KEYS[4*i+4]
  local a = 3 + 5*i
  local id, due, p, hk, tok = ARGV[a], tonumber(ARGV[a+1]), ARGV[a+2], ARGV[a+3], ARGV[a+4]
  local r = ''
  if maxlen > 0 and redis.call('XLEN', s) + redis.call('ZCARD', z) >= maxlen then
    r = 'f'
  elseif hk == '1' then
    local ok
    if win > 0 then ok = redis.call('SET', k, id, 'NX', 'PX', win) else ok = redis.call('SET', k, id, 'NX') end
    if not ok then
      local ex = redis.call('GET', k) or ''
      if ex == id then r = 'o' else r = 'd:' .. ex end
    end
  end
  if r == '' then
    if due > now then
      redis.call('ZADD', z, due, tok)
      redis.call('HSET', zh, tok, p)
    else
      redis.call('XADD', s, '*', 'e', p)
    end
  end
  res[#res+1] = r
end
return res
`)

// Lease-set members are "<entry ID> <generation> <releases>": the
// generation counts reclaims (the fencing token of a delivery), releases
// count deliveries given back without spending an attempt. A delivery
// holds its lease while its exact member is in the lease set.

// receiveScript leases up to max entries of a queue. KEYS: stream, lease,
// wait, delay, held. ARGV: group, consumer, max, lease (ms), info ("1":
// when nothing is leased, also return what a blocking wait needs), trim
// ("1": trim the acknowledged head of the stream first).
//
// It first moves due delayed messages into the stream, then reclaims
// entries whose lease ended or whose nack delay passed (XCLAIM: the
// delivery count in the stream's pending list grows, and so does the
// member's generation), at most half the batch, then reads new entries
// (XREADGROUP >) for the rest, then fills any room left with more
// reclaims. Reclaims never take the whole batch while new work waits,
// and new work never starves reclaims.
//
// The trim removes entries before the oldest one still pending and not
// after the last delivered one (XTRIM MINID, exact): acknowledged entries
// only, never an unacknowledged or undelivered one.
//
// Returns {now, next due (ms, 0 = none), last stream ID ("" unless info),
// {member, fields, generation, releases}...}.
var receiveScript = redis.NewScript(luaNow + `
local s, l, w, z, zh = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local group, consumer = ARGV[1], ARGV[2]
local max = tonumber(ARGV[3])
local deadline = later + tonumber(ARGV[4])
if ARGV[6] == '1' then
  local ldi = nil
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', s)
  if ok then
    for _, g in ipairs(groups) do
      local name, last = nil, nil
      for i = 1, #g, 2 do
        if g[i] == 'name' then name = g[i+1] elseif g[i] == 'last-delivered-id' then last = g[i+1] end
      end
      if name == group then ldi = last end
    end
  end
  if ldi and ldi ~= '0-0' then
    local minid
    local p = redis.call('XPENDING', s, group)
    if p[1] > 0 then minid = p[2] else
      local ms, seq = string.match(ldi, '^(%d+)-(%d+)$')
      minid = ms .. '-' .. string.format('%.0f', tonumber(seq) + 1)
    end
    redis.call('XTRIM', s, 'MINID', minid)
  end
end
local due = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 1000)
for i = 1, #due do
  local p = redis.call('HGET', zh, due[i])
  if p then redis.call('XADD', s, '*', 'e', p) end
  redis.call('ZREM', z, due[i])
  redis.call('HDEL', zh, due[i])
end
local out = {}
local leased = {}
local function claim(key, limit)
  if limit <= 0 then return end
  local ms = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, limit)
  for i = 1, #ms do
    redis.call('ZREM', key, ms[i])
    local id, gen, rel = string.match(ms[i], '^(%S+) (%d+) (%d+)$')
    if id then
      local e = redis.call('XCLAIM', s, group, consumer, 0, id)
      if type(e[1]) == 'table' then
        gen = tonumber(gen) + 1
        local m = id .. ' ' .. gen .. ' ' .. rel
        leased[#leased+1] = deadline
        leased[#leased+1] = m
        out[#out+1] = {m, e[1][2], gen, tonumber(rel)}
      else
        redis.call('XACK', s, group, id)
      end
    end
  end
end
local half = math.ceil(max / 2)
claim(w, half)
claim(l, half - #out)
local want = max - #out
if want > 0 then
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', want, 'STREAMS', s, '>')
  if r then
    local entries = r[1][2]
    for i = 1, #entries do
      local m = entries[i][1] .. ' 0 0'
      leased[#leased+1] = deadline
      leased[#leased+1] = m
      out[#out+1] = {m, entries[i][2], 0, 0}
    end
  end
end
if #out < max then claim(w, max - #out) end
if #out < max then claim(l, max - #out) end
for i = 1, #leased, 1000 do
  redis.call('ZADD', l, unpack(leased, i, math.min(i + 999, #leased)))
end
local nxt, last = 0, ''
if #out == 0 and ARGV[5] == '1' then
  for _, key in ipairs({z, w, l}) do
    local f = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #f == 2 then
      local sc = tonumber(f[2])
      if nxt == 0 or sc < nxt then nxt = sc end
    end
  end
  local info = redis.call('XINFO', 'STREAM', s)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then last = info[i+1] end
  end
end
return {now, nxt, last, out}
`)

// ackScript acknowledges delivered entries. KEYS: stream, lease. ARGV:
// group, delete ("1": also XDEL, for dead-letter streams, whose length is
// their count), then (member, entry ID) pairs. An entry is acked only
// while this delivery holds its lease: its exact member is in the lease
// set (a reclaim by another consumer replaced it). Live entries are left
// to the trim (see receiveScript). Returns 1 (acked) or 0 (lease lost) per
// entry.
var ackScript = redis.NewScript(`
local s, l = KEYS[1], KEYS[2]
local res, ok = {}, {}
for i = 3, #ARGV, 2 do
  if redis.call('ZREM', l, ARGV[i]) == 1 then
    ok[#ok+1] = ARGV[i+1]
    res[#res+1] = 1
  else
    res[#res+1] = 0
  end
end
for i = 1, #ok, 1000 do
  local j = math.min(i + 999, #ok)
  redis.call('XACK', s, ARGV[1], unpack(ok, i, j))
  if ARGV[2] == '1' then redis.call('XDEL', s, unpack(ok, i, j)) end
end
return res
`)

// nackScript ends a lease and makes the entry due again after a delay.
// KEYS: lease, wait. ARGV: member, the member it becomes (releases raised
// for a release), delay (ms). Returns 1, or 0 when the lease is lost.
var nackScript = redis.NewScript(luaNow + `
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], later + tonumber(ARGV[3]), ARGV[2])
return 1
`)

// extendScript sets leases to end lease ms from now. KEYS: lease. ARGV:
// lease (ms), then members. Returns 1 or 0 (lost) per member.
var extendScript = redis.NewScript(luaNow + `
local deadline = later + tonumber(ARGV[1])
local res = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', deadline, ARGV[i])
    res[#res+1] = 1
  else
    res[#res+1] = 0
  end
end
return res
`)

// moveScript moves a leased entry to another stream and out of its queue,
// in one step: dead-lettering (live → dead stream, with the record) and
// replay (dead → live stream, the envelope only). KEYS: stream, lease,
// target stream. ARGV: group, member, entry ID, delete ("1": XDEL the
// source entry), then the target entry's field/value pairs. Returns the
// new entry's ID, or 0 when the lease is lost.
var moveScript = redis.NewScript(`
local s, l, to = KEYS[1], KEYS[2], KEYS[3]
if redis.call('ZREM', l, ARGV[2]) == 0 then return 0 end
local nid = redis.call('XADD', to, '*', unpack(ARGV, 5))
redis.call('XACK', s, ARGV[1], ARGV[3])
if ARGV[4] == '1' then redis.call('XDEL', s, ARGV[3]) end
return nid
`)

// statsScript reads a lane's depths in one step. KEYS: stream, lease,
// wait, delay, dead stream. ARGV: group. Ready is the group's lag (entries
// not delivered yet), counted by XRANGE when Redis cannot tell it.
// Returns {ready, in flight, delayed, dead, oldest ready entry ID ("" for
// none), now (ms)}.
var statsScript = redis.NewScript(luaNow + `
local s, l, w, z, ds = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ready, oldest = 0, ''
if redis.call('EXISTS', s) == 1 then
  local ldi, lag = '0-0', false
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', s)
  if ok then
    for _, g in ipairs(groups) do
      local name, last, lg = nil, nil, false
      for i = 1, #g, 2 do
        if g[i] == 'name' then name = g[i+1] elseif g[i] == 'last-delivered-id' then last = g[i+1] elseif g[i] == 'lag' then lg = g[i+1] end
      end
      if name == ARGV[1] then ldi = last; lag = lg end
    end
  end
  if lag then ready = lag else
    if ldi == '0-0' then ready = redis.call('XLEN', s) else
      ready = #redis.call('XRANGE', s, '(' .. ldi, '+', 'COUNT', 100000)
    end
  end
  local r = redis.call('XRANGE', s, '(' .. ldi, '+', 'COUNT', 1)
  if #r > 0 then oldest = r[1][1] end
end
return {ready, redis.call('ZCARD', l), redis.call('ZCARD', w) + redis.call('ZCARD', z), redis.call('XLEN', ds), oldest, now}
`)
