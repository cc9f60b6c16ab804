package asynq

import "github.com/redis/go-redis/v9"

// The Lua scripts below operate on asynq's key layout (hibiken/asynq
// v0.26.0, internal/base and internal/rdb) and keep it intact, so asynq's
// Inspector, CLI and Web UI see Switchyard's tasks and a plain asynq client's
// tasks are received by Switchyard. For queue q (all keys share the hash tag
// {q}, so a script's keys live in one cluster slot):
//
//	asynq:{q}:t:<id>      hash: msg (protobuf TaskMessage), state, pending_since
//	asynq:{q}:pending     list of ids, LPUSH to enqueue, taken from the right
//	asynq:{q}:active      list of leased ids
//	asynq:{q}:lease       zset id -> lease deadline (Unix seconds)
//	asynq:{q}:scheduled   zset id -> process-at (Unix seconds)
//	asynq:{q}:retry       zset id -> retry-at (Unix seconds)
//	asynq:{q}:archived    zset id -> archived-at (Unix seconds)
//	asynq:{q}:paused      exists while the queue is paused
//	asynq:{q}:processed[:<date>], asynq:{q}:failed[:<date>]  counters
//
// Switchyard adds, without changing the meaning of any asynq key: hash
// fields sy_tok (a lease token counting the task's leases), sy_okey (the
// ordering key), sy_dl (the dead-letter record, JSON) and sy_handover (see
// publishScript); asynq:{q}:sy:olock (hash ordering key -> holding task id);
// asynq:{q}:sy:dlease (zset: leases on dead letters being read);
// asynq:{q}:sy:idem:<tenant-length>:<tenant>:<key> (dedup claims, with the
// dedup window as TTL); and the Pub/Sub channel asynq:{q}:sy:notify.
//
// Scores are written with millisecond fractions (asynq writes whole
// seconds); asynq reads them with ZRANGEBYSCORE and integer truncation,
// which both work on fractional scores.

// publishScript enqueues a batch for one queue.
//
// KEYS: 1 pending, 2 scheduled, 3 active, 4 lease, 5 notify channel
// ARGV: 1 task key prefix, 2 now (ns), 3 dedup TTL in ms ("0" = forever),
// then six per message: id, msg, score ("" = ready now), ordering key,
// dedup key ("" = none), hold flag ("1" when the message is the framework's
// re-publish of a held message). A dedup key already claimed by the same id
// is the same message published again (a held message's next hop, a retried
// publish) and does not count as a duplicate of itself.
//
// Returns code, id per message: 1 enqueued; 0 the task ID exists (asynq's
// TaskID semantics: a duplicate); 2 the dedup key was claimed, id is the
// first message's; 3 handover: the held message's own active task was
// replaced in place and sy_handover remembers the old lease token, so the
// framework's following Ack of the old delivery is a no-op success.
var publishScript = redis.NewScript(`
local prefix = ARGV[1]
local out = {}
local pushed = 0
for i = 4, #ARGV, 6 do
  local id, msg, score, okey, ikey, hold = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3], ARGV[i+4], ARGV[i+5]
  local key = prefix .. id
  local prev = false
  if ikey ~= "" then prev = redis.call("GET", ikey) end
  if prev and prev ~= id then
    out[#out+1] = 2
    out[#out+1] = prev
  else
    local code = 1
    local st = redis.call("HGET", key, "state")
    if st then
      if hold == "1" and st == "active" then
        local tok = redis.call("HGET", key, "sy_tok")
        redis.call("LREM", KEYS[3], -1, id)
        redis.call("ZREM", KEYS[4], id)
        redis.call("HSET", key, "sy_handover", tok or "0")
        code = 3
      else
        code = 0
      end
    end
    if code ~= 0 then
      if okey ~= "" then redis.call("HSET", key, "sy_okey", okey) end
      if score ~= "" then
        redis.call("HSET", key, "msg", msg, "state", "scheduled")
        redis.call("HDEL", key, "pending_since")
        redis.call("ZADD", KEYS[2], score, id)
      else
        redis.call("HSET", key, "msg", msg, "state", "pending", "pending_since", ARGV[2])
        redis.call("LPUSH", KEYS[1], id)
        pushed = pushed + 1
      end
      if ikey ~= "" then
        if ARGV[3] == "0" then
          redis.call("SET", ikey, id)
        else
          redis.call("SET", ikey, id, "PX", ARGV[3])
        end
      end
    end
    out[#out+1] = code
    out[#out+1] = id
  end
end
if pushed > 0 then redis.call("PUBLISH", KEYS[5], pushed) end
return out
`)

// dequeueScript forwards due scheduled and retry tasks to pending, then
// leases up to max tasks in one round trip (asynq's dequeue takes one),
// honouring asynq's pause flag and Switchyard's ordering-key locks, and
// reports expired leases for the caller to recover.
//
// KEYS: 1 pending, 2 active, 3 lease, 4 paused, 5 scheduled, 6 retry, 7 olock
// ARGV: 1 task key prefix, 2 now (s), 3 now (ns), 4 lease deadline (s),
// 5 max, 6 scan window when ordering locks block the head of the queue
//
// Returns {next wake in ms or -1, {id, msg, token}..., {id, msg, token}...
// of expired leases}. A pending id without a task hash or msg field is
// leased with an empty msg: the driver dead-letters it as undecodable.
var dequeueScript = redis.NewScript(`
local prefix = ARGV[1]
local now = tonumber(ARGV[2])
for s = 5, 6 do
  local due = redis.call("ZRANGEBYSCORE", KEYS[s], "-inf", now, "LIMIT", 0, 1000)
  if #due > 0 then
    for _, id in ipairs(due) do
      local key = prefix .. id
      local okey = redis.call("HGET", key, "sy_okey")
      if okey and redis.call("HGET", KEYS[7], okey) == id then
        -- It holds its key's lock (a nack or a held message): to the head,
        -- or the tasks queued behind the lock could hide it for good.
        redis.call("RPUSH", KEYS[1], id)
      else
        redis.call("LPUSH", KEYS[1], id)
      end
      redis.call("HSET", key, "state", "pending", "pending_since", ARGV[3])
    end
    redis.call("ZREM", KEYS[s], unpack(due))
  end
end
local items = {}
local n = 0
local max = tonumber(ARGV[5])
local function blockedBy(okey, id)
  local holder = redis.call("HGET", KEYS[7], okey)
  if not holder or holder == id then return false end
  local st = redis.call("HGET", prefix .. holder, "state")
  if not st or st == "archived" or st == "completed" then
    redis.call("HDEL", KEYS[7], okey)
    return false
  end
  return true
end
local leased = {}
local function lease(id, key, msg, okey)
  local tok = redis.call("HINCRBY", key, "sy_tok", 1)
  redis.call("HSET", key, "state", "active")
  redis.call("HDEL", key, "pending_since")
  leased[#leased+1] = ARGV[4]
  leased[#leased+1] = id
  if okey then redis.call("HSET", KEYS[7], okey, id) end
  items[#items+1] = id
  items[#items+1] = msg
  items[#items+1] = tostring(tok)
  n = n + 1
end
if redis.call("EXISTS", KEYS[4]) == 0 then
  local blocked = false
  while n < max do
    local id = redis.call("RPOPLPUSH", KEYS[1], KEYS[2])
    if not id then break end
    local key = prefix .. id
    local f = redis.call("HMGET", key, "msg", "sy_okey")
    if not f[1] then
      -- No task hash, or no msg field (deleted or written behind the
      -- framework's back): leased with an empty msg, so that the driver
      -- dead-letters it with a reason instead of the id vanishing.
      lease(id, key, "", false)
    elseif f[2] and blockedBy(f[2], id) then
      redis.call("LREM", KEYS[2], 1, id)
      redis.call("RPUSH", KEYS[1], id)
      blocked = true
      break
    else
      lease(id, key, f[1], f[2])
    end
  end
  if blocked and n < max then
    local win = redis.call("LRANGE", KEYS[1], -tonumber(ARGV[6]), -1)
    local skip = {}
    for i = #win, 1, -1 do
      if n >= max then break end
      local id = win[i]
      local key = prefix .. id
      local f = redis.call("HMGET", key, "msg", "sy_okey")
      if f[1] then
        local ok = true
        if f[2] then
          if skip[f[2]] or blockedBy(f[2], id) then
            skip[f[2]] = true
            ok = false
          end
        end
        if ok then
          redis.call("LREM", KEYS[1], -1, id)
          redis.call("LPUSH", KEYS[2], id)
          lease(id, key, f[1], f[2])
        end
      end
    end
  end
end
for i = 1, #leased, 1000 do
  redis.call("ZADD", KEYS[3], unpack(leased, i, math.min(i + 999, #leased)))
end
local exp = {}
local ex = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", "(" .. ARGV[2], "LIMIT", 0, 100)
for _, id in ipairs(ex) do
  local f = redis.call("HMGET", prefix .. id, "msg", "sy_tok")
  exp[#exp+1] = id
  exp[#exp+1] = f[1] or ""
  exp[#exp+1] = f[2] or "0"
end
local nextms = -1
if n == 0 then
  for _, k in ipairs({KEYS[5], KEYS[6], KEYS[3]}) do
    local z = redis.call("ZRANGE", k, 0, 0, "WITHSCORES")
    if z[2] then
      local d = math.floor((tonumber(z[2]) - now) * 1000) + 1
      if d < 0 then d = 0 end
      if nextms < 0 or d < nextms then nextms = d end
    end
  end
end
return {nextms, items, exp}
`)

// recoverScript returns tasks whose lease expired to the head of pending
// with the re-encoded message (retried + 1), unless their lease token
// changed meanwhile. An empty msg drops an orphan id whose hash is gone.
//
// KEYS: 1 active, 2 lease, 3 pending, 4 notify channel
// ARGV: 1 task key prefix, 2 now (s), 3 now (ns), then id, token, msg
var recoverScript = redis.NewScript(`
local prefix = ARGV[1]
local now = tonumber(ARGV[2])
local moved = 0
for i = 4, #ARGV, 3 do
  local id, tok, msg = ARGV[i], ARGV[i+1], ARGV[i+2]
  local key = prefix .. id
  if msg == "" then
    if redis.call("EXISTS", key) == 0 then
      redis.call("LREM", KEYS[1], -1, id)
      redis.call("ZREM", KEYS[2], id)
    end
  else
    local f = redis.call("HMGET", key, "state", "sy_tok")
    local s = redis.call("ZSCORE", KEYS[2], id)
    if f[1] == "active" and f[2] == tok and s and tonumber(s) < now then
      redis.call("LREM", KEYS[1], -1, id)
      redis.call("ZREM", KEYS[2], id)
      redis.call("HSET", key, "msg", msg, "state", "pending", "pending_since", ARGV[3])
      redis.call("RPUSH", KEYS[3], id)
      moved = moved + 1
    end
  end
end
if moved > 0 then redis.call("PUBLISH", KEYS[4], moved) end
return moved
`)

// ackScript deletes acknowledged tasks whose lease token still matches and
// counts them as processed, as asynq's done script does.
//
// KEYS: 1 active, 2 lease, 3 olock, 4 processed:<date>, 5 processed
// ARGV: 1 task key prefix, 2 stats expiry (Unix s), then id, token
// Returns the ids whose lease was lost.
var ackScript = redis.NewScript(`
local prefix = ARGV[1]
local lost = {}
local ids, keys = {}, {}
for i = 3, #ARGV, 2 do
  local id, tok = ARGV[i], ARGV[i+1]
  local key = prefix .. id
  local f = redis.call("HMGET", key, "state", "sy_tok", "sy_handover", "sy_okey")
  if f[1] == "active" and f[2] == tok then
    redis.call("LREM", KEYS[1], -1, id)
    if f[4] and redis.call("HGET", KEYS[3], f[4]) == id then redis.call("HDEL", KEYS[3], f[4]) end
    ids[#ids+1] = id
    keys[#keys+1] = key
  elseif f[3] and f[3] == tok then
    redis.call("HDEL", key, "sy_handover")
  else
    lost[#lost+1] = id
  end
end
local done = #ids
for i = 1, done, 1000 do
  local j = math.min(i + 999, done)
  redis.call("ZREM", KEYS[2], unpack(ids, i, j))
  redis.call("DEL", unpack(keys, i, j))
end
if done > 0 then
  local n = redis.call("INCRBY", KEYS[4], done)
  if n == done then redis.call("EXPIREAT", KEYS[4], ARGV[2]) end
  redis.call("INCRBY", KEYS[5], done)
end
return lost
`)

// extendScript moves lease deadlines of tasks whose token still matches.
//
// KEYS: 1 lease
// ARGV: 1 task key prefix, 2 new deadline (s), then id, token
// Returns the ids whose lease was lost.
var extendScript = redis.NewScript(`
local prefix = ARGV[1]
local lost = {}
for i = 3, #ARGV, 2 do
  local id, tok = ARGV[i], ARGV[i+1]
  local f = redis.call("HMGET", prefix .. id, "state", "sy_tok")
  if f[1] == "active" and f[2] == tok then
    redis.call("ZADD", KEYS[1], ARGV[2], id)
  else
    lost[#lost+1] = id
  end
end
return lost
`)

// nackScript moves a leased task to retry (or straight to pending when it
// is due now) with its re-encoded message (retried + 1 for a nack, as it was
// for a release), keeping its ordering lock so that later tasks with the
// same key wait for it. A nack counts as processed and failed in asynq's
// statistics, as asynq's retry does.
//
// KEYS: 1 active, 2 lease, 3 retry, 4 pending, 5 notify channel,
// 6 processed:<date>, 7 failed:<date>, 8 processed, 9 failed, 10 olock
// ARGV: 1 task key prefix, 2 id, 3 token, 4 msg, 5 retry-at (s, "" = now),
// 6 now (ns), 7 stats expiry (Unix s), 8 "1" to count a failure
// Returns 1, or 0 when the lease was lost.
var nackScript = redis.NewScript(`
local key = ARGV[1] .. ARGV[2]
local id = ARGV[2]
local f = redis.call("HMGET", key, "state", "sy_tok")
if f[1] ~= "active" or f[2] ~= ARGV[3] then return 0 end
redis.call("LREM", KEYS[1], -1, id)
redis.call("ZREM", KEYS[2], id)
if ARGV[5] == "" then
  redis.call("HSET", key, "msg", ARGV[4], "state", "pending", "pending_since", ARGV[6])
  local okey = redis.call("HGET", key, "sy_okey")
  if okey and redis.call("HGET", KEYS[10], okey) == id then
    redis.call("RPUSH", KEYS[4], id) -- it holds its key's lock: to the head
  else
    redis.call("LPUSH", KEYS[4], id)
  end
  redis.call("PUBLISH", KEYS[5], 1)
else
  redis.call("HSET", key, "msg", ARGV[4], "state", "retry")
  redis.call("ZADD", KEYS[3], ARGV[5], id)
end
if ARGV[8] == "1" then
  for k = 6, 7 do
    if redis.call("INCR", KEYS[k]) == 1 then redis.call("EXPIREAT", KEYS[k], ARGV[7]) end
  end
  redis.call("INCR", KEYS[8])
  redis.call("INCR", KEYS[9])
end
return 1
`)

// deadLetterScript archives a leased task with its dead-letter record, as
// asynq's archive script does, and applies the configured archive caps.
// asynq's own caps (10,000 tasks, 90 days) are not applied: trimming happens
// only when the driver is configured to, and the trimmed ids are returned
// so the driver can log them.
//
// KEYS: 1 active, 2 lease, 3 archived, 4 olock, 5 processed:<date>,
// 6 failed:<date>, 7 processed, 8 failed
// ARGV: 1 task key prefix, 2 id, 3 token, 4 msg ("" keeps the stored one),
// 5 dead-letter record, 6 now (s), 7 stats expiry (Unix s), 8 max archive
// size (0 = no cap), 9 oldest archived-at kept (s, "" = no cap)
// Returns {1 or 0 (lease lost), trimmed ids...}.
var deadLetterScript = redis.NewScript(`
local prefix = ARGV[1]
local id = ARGV[2]
local key = prefix .. id
local f = redis.call("HMGET", key, "state", "sy_tok", "sy_okey")
if f[1] ~= "active" or f[2] ~= ARGV[3] then return {0} end
redis.call("LREM", KEYS[1], -1, id)
redis.call("ZREM", KEYS[2], id)
redis.call("ZADD", KEYS[3], ARGV[6], id)
if ARGV[4] ~= "" then redis.call("HSET", key, "msg", ARGV[4]) end
redis.call("HSET", key, "state", "archived", "sy_dl", ARGV[5])
redis.call("HDEL", key, "sy_handover", "pending_since")
if f[3] and redis.call("HGET", KEYS[4], f[3]) == id then redis.call("HDEL", KEYS[4], f[3]) end
for k = 5, 6 do
  if redis.call("INCR", KEYS[k]) == 1 then redis.call("EXPIREAT", KEYS[k], ARGV[7]) end
end
redis.call("INCR", KEYS[7])
redis.call("INCR", KEYS[8])
local out = {1}
if ARGV[9] ~= "" then
  local old = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", "(" .. ARGV[9], "LIMIT", 0, 1000)
  for _, oid in ipairs(old) do
    if oid ~= id then
      redis.call("DEL", prefix .. oid)
      redis.call("ZREM", KEYS[3], oid)
      out[#out+1] = oid
    end
  end
end
local max = tonumber(ARGV[8])
if max > 0 then
  local over = redis.call("ZCARD", KEYS[3]) - max
  if over > 0 then
    local extra = redis.call("ZRANGE", KEYS[3], 0, over - 1)
    for _, oid in ipairs(extra) do
      redis.call("DEL", prefix .. oid)
      redis.call("ZREM", KEYS[3], oid)
      out[#out+1] = oid
    end
  end
end
return out
`)

// deadReceiveScript leases up to max archived tasks that nobody else is
// reading, oldest first.
//
// KEYS: 1 archived, 2 dlease
// ARGV: 1 task key prefix, 2 now (s), 3 lease deadline (s), 4 max, 5 scan
// Returns {id, msg, dead-letter record, token}...
var deadReceiveScript = redis.NewScript(`
local prefix = ARGV[1]
redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", ARGV[2])
local ids = redis.call("ZRANGE", KEYS[1], 0, tonumber(ARGV[5]) - 1)
local out = {}
local n = 0
local max = tonumber(ARGV[4])
for _, id in ipairs(ids) do
  if n >= max then break end
  if not redis.call("ZSCORE", KEYS[2], id) then
    local key = prefix .. id
    local f = redis.call("HMGET", key, "msg", "sy_dl")
    if f[1] then
      redis.call("ZADD", KEYS[2], ARGV[3], id)
      local tok = redis.call("HINCRBY", key, "sy_tok", 1)
      out[#out+1] = id
      out[#out+1] = f[1]
      out[#out+1] = f[2] or ""
      out[#out+1] = tostring(tok)
      n = n + 1
    end
  end
end
return out
`)

// deadOpScript acts on a dead letter read from the archive, if its token
// still matches: "ack" deletes it, "replay" moves it back to pending with
// msg (or the stored one), "release" ends the read lease, "extend" moves the
// read lease to ARGV[5], "update" replaces its dead-letter record with
// ARGV[5].
//
// KEYS: 1 archived, 2 dlease, 3 pending, 4 notify channel
// ARGV: 1 task key prefix, 2 op, 3 now (ns), 4 msg, 5 op argument, then
// id, token
// Returns the ids whose lease was lost.
var deadOpScript = redis.NewScript(`
local prefix = ARGV[1]
local op = ARGV[2]
local lost = {}
local pushed = 0
for i = 6, #ARGV, 2 do
  local id, tok = ARGV[i], ARGV[i+1]
  local key = prefix .. id
  local f = redis.call("HMGET", key, "state", "sy_tok")
  if f[1] ~= "archived" or f[2] ~= tok then
    lost[#lost+1] = id
  elseif op == "ack" then
    redis.call("ZREM", KEYS[1], id)
    redis.call("ZREM", KEYS[2], id)
    redis.call("DEL", key)
  elseif op == "replay" then
    redis.call("ZREM", KEYS[1], id)
    redis.call("ZREM", KEYS[2], id)
    if ARGV[4] ~= "" then redis.call("HSET", key, "msg", ARGV[4]) end
    redis.call("HSET", key, "state", "pending", "pending_since", ARGV[3])
    redis.call("HDEL", key, "sy_dl", "sy_handover")
    redis.call("LPUSH", KEYS[3], id)
    pushed = pushed + 1
  elseif op == "release" then
    redis.call("ZREM", KEYS[2], id)
  elseif op == "extend" then
    redis.call("ZADD", KEYS[2], ARGV[5], id)
  elseif op == "update" then
    redis.call("HSET", key, "sy_dl", ARGV[5])
    redis.call("ZREM", KEYS[2], id)
  end
end
if pushed > 0 then redis.call("PUBLISH", KEYS[4], pushed) end
return lost
`)

// statsScript reads a queue's depths. Scheduled and retry tasks that are
// due count as ready (the next receive forwards them).
//
// KEYS: 1 pending, 2 active, 3 scheduled, 4 retry, 5 archived
// ARGV: 1 task key prefix, 2 now (s)
// Returns {ready, in flight, delayed, dead, oldest pending_since (ns)}.
var statsScript = redis.NewScript(`
local p = redis.call("LLEN", KEYS[1])
local dueS = redis.call("ZCOUNT", KEYS[3], "-inf", ARGV[2])
local dueR = redis.call("ZCOUNT", KEYS[4], "-inf", ARGV[2])
local delayed = redis.call("ZCARD", KEYS[3]) + redis.call("ZCARD", KEYS[4]) - dueS - dueR
local oldest = "0"
if p > 0 then
  local id = redis.call("LINDEX", KEYS[1], -1)
  oldest = redis.call("HGET", ARGV[1] .. id, "pending_since") or "0"
end
return {p + dueS + dueR, redis.call("LLEN", KEYS[2]), delayed, redis.call("ZCARD", KEYS[5]), oldest}
`)
