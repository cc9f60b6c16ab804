// Package asynq is the Switchyard driver for Redis in the data layout of
// hibiken/asynq (v0.26.0): teams that already run asynq keep their Redis,
// their asynq clients and their asynq tools (Inspector, CLI, Web UI), and
// get Switchyard's full contract on top.
//
// Import it for its side effect; it registers the redis and rediss schemes:
//
//	import _ "github.com/switchyard-dev/switchyard/adapters/asynq"
//
//	b, err := broker.Open(ctx, "redis://:password@127.0.0.1:6379/0?namespace=prod", nil)
//
// # URL
//
//	redis://[user[:password]@]host[:port][/db][?param=value&...]
//	rediss://...   the same over TLS (certificates verified against host)
//
// The driver talks to one Redis server (Redis Cluster and Sentinel URLs are
// not supported). host defaults to 127.0.0.1, port to 6379, db to 0.
// Parameters (unknown
// ones are an ErrInvalid error naming them):
//
//	namespace                 queue prefix: lane L is asynq queue "<ns>:L"; none by default, so
//	                          lane "default" is asynq's queue "default"
//	dedup_window=24h          how long an idempotency key stays claimed; 0s = forever
//	max_message_size=1048576  largest Message.Size accepted (ErrTooLarge above it)
//	max_batch=500             largest Publish/Receive/Ack/Extend batch
//	poll=50ms                 longest idle wait between looks when no notification arrives
//	dial_timeout=2s, read_timeout=3s, write_timeout=3s   bound every Redis call
//	pool_size                 connections (go-redis default: 10 per CPU)
//	archive_max_size=0        dead letters kept per queue; 0 = all (see Dead letters)
//	archive_max_age=0s        dead letters kept for; 0 = forever
//	tls_server_name, tls_insecure_skip_verify   rediss:// only
//
// Passwords never appear in errors or logs; broker.Redact masks them in URLs.
//
// # Capabilities
//
// Native: delays of any horizon (MaxDelay 0), lease extension, dedup by
// (lane, tenant, idempotency key) within dedup_window, ordering keys,
// dead letters with reason, error and attempt history, OldestReady in Stats.
// Not native: MaxAttempts, which Broker enforces on receive; attempts
// spent by crashed consumers count all the same, through asynq's retried
// counter. MaxMessageSize and MaxBatch are as configured.
//
// # The asynq mapping
//
// Each (namespace, lane) is one asynq queue, and every Switchyard message is
// an asynq task stored exactly as asynq stores it (see scripts.go for the
// keys): a hash asynq:{q}:t:<id> whose "msg" field is asynq's protobuf
// TaskMessage, listed in asynq:{q}:pending, :active (with its lease in
// :lease), :scheduled, :retry or :archived. The fields map as follows:
//
//	Message.ID           task ID (asynq.TaskID; Inspector.GetTaskInfo(queue, id) finds it)
//	Message.Kind         task type
//	Message.Body         task payload
//	Message.Headers      task headers
//	Message.MaxAttempts  MaxRetry + 1
//	Delivery.Attempt     Retried + 1
//	Tenant, IdempotencyKey, OrderingKey, RunAt, EnqueuedAt
//	                     task headers switchyard-msg-tenant, -idempotency-key,
//	                     -ordering-key, -run-at and -enqueued-at (RFC 3339);
//	                     stripped on receive (the prefix is reserved)
//	DeadLetter           archived task; Error is also asynq's LastErr, the full
//	                     record (reason, attempts) is JSON in the hash field sy_dl
//
// A task enqueued by a plain asynq client into queue q (asynq.Queue(q)) is
// received from lane L when q is QueueName(namespace, L), with the mapping
// above; headers it lacks give zero values (no tenant, no EnqueuedAt).
// asynq's Timeout, Deadline, Retention, Unique and Group options are not
// interpreted: a completed task is deleted (as with Retention 0), and
// grouped tasks are not aggregated. Switchyard honours asynq's queue pause
// (Inspector.PauseQueue). Switchyard's tasks in every state are counted and
// listed by asynq's Inspector, and an asynq Server can process them.
//
// A retry keeps the failed attempt's error (broker.NackErrorer, which the
// scheduler uses for every retry) as the task's ErrorMsg, as asynq's own
// retries do: Inspector and asynqmon show it as LastErr.
//
// A running Switchyard scheduler writes asynq's own server record
// (broker.ServerAnnouncer: asynq:servers and asynq:servers:{host:pid:id},
// the protobuf ServerInfo asynq's heartbeat writes) every heartbeat, with
// a TTL of three heartbeats, and deletes it when it stops: asynq's
// Inspector.Servers and asynqmon's Servers tab list it with its host, pid,
// concurrency (slots), status "active", start time and queues (every queue
// at priority 1: the lane policy has no asynq equivalent). It also writes
// the per-task worker records (asynq:workers and the hash
// asynq:workers:{host:pid:id}, one protobuf WorkerInfo per running task,
// replaced as a whole every heartbeat with the same TTL), so asynqmon
// shows the tasks it runs as active workers: task ID, type, queue, start
// time and the task's deadline (none when it has none); never the
// payload. A task shows up, and goes, within one heartbeat.
//
// Switchyard's own keys (asynq:{q}:sy:*: ordering locks, dedup claims,
// dead-letter read leases) are not known to asynq: Inspector.DeleteQueue
// leaves them, and the dedup claims expire with dedup_window.
//
// Scores in the zsets carry milliseconds (asynq writes whole seconds and
// reads either). Lease deadlines are computed from the client clock, as
// asynq does: keep consumer clocks synchronised (NTP).
//
// # Delivery semantics
//
// At least once. Receive runs one Lua script that moves due scheduled and
// retry tasks to pending, leases up to Max tasks (asynq takes one per round
// trip) and reports expired leases, which the driver returns to the head of
// the queue with Retried + 1 (the work of asynq's recoverer, done by every
// receiving consumer, without asynq's 30-second grace). Each lease carries a
// token (hash field sy_tok), so an Ack, Nack or Extend from a consumer whose
// lease passed on gets ErrLeaseLost and changes nothing. An empty Receive
// waits on a Pub/Sub notification sent by publishes, nacks and recoveries,
// or for the next due task or expiring lease, or at most poll (tasks from
// plain asynq clients send no notification). Nack moves the task to asynq's
// retry zset (straight back to pending with zero delay); Release
// (broker.Releaser) does the same without spending an attempt. Ordering keys are
// locks in asynq:{q}:sy:olock, held from lease to ack or dead-letter,
// nacks and expired leases included, so tasks with one key start in publish
// order and never run at once.
//
// Deduplication: an idempotency key is claimed in
// asynq:{q}:sy:idem:<tenant length>:<tenant>:<key> for dedup_window, in the
// same script that enqueues; a second publish within the window reports
// Duplicate with the first ID. Publishing an ID that already exists is a
// duplicate too (asynq's TaskID semantics).
//
// # Dead letters
//
// A dead letter is an asynq archived task, with its record in sy_dl.
// Undecodable tasks (bytes that are not a TaskMessage, an empty type, an ID
// that does not match the key, or an ID that is empty, over 256 bytes or
// has control characters) are archived by Receive itself with
// ReasonUndecodable and the stored bytes kept. A pending ID whose task hash
// or msg field is missing is archived the same way, with a placeholder
// message of kind switchyard.missing-task-message naming the ID, and a
// warning is logged; an expired lease whose hash is gone altogether cannot
// be archived and is removed with a warning. A plain asynq client's
// MaxRetry above broker.MaxAttemptsLimit-1 is read as MaxAttemptsLimit. Receive with DeadLetters
// leases archived tasks (asynq:{q}:sy:dlease); Ack deletes one, Replay
// puts it back live with Retried 0. Tasks archived by asynq itself get
// ReasonMaxAttempts (retries exhausted) or ReasonPermanent and asynq's
// LastErr.
//
// asynq caps its archive (10,000 tasks and 90 days per queue, fixed in
// asynq's code) each time asynq archives a task. This driver does not: by
// default it keeps every dead letter. archive_max_size and archive_max_age
// make caps explicit; the dead letters they delete are logged as a warning
// with their IDs, never dropped silently. Note that an asynq Server
// archiving into the same queue still applies asynq's own caps to the whole
// archive, Switchyard's dead letters included.
//
// # Persistence: what needs AOF
//
// Leases, crash recovery, retries and dead letters survive any consumer
// crash with any Redis configuration. Surviving a restart of Redis itself
// needs persistence: with appendonly yes and appendfsync everysec (Redis's
// default) a graceful restart loses nothing and a crash or power loss can
// lose the last second of writes (publishes, acks, dead letters); with
// appendfsync always nothing acknowledged is lost. Without persistence (as
// on the machine's shared Redis) a restart empties every queue. RDB
// snapshots alone lose everything since the last snapshot.
//
// # Errors
//
// Redis replies are classified by prefix: LOADING, BUSY, TRYAGAIN,
// CLUSTERDOWN, MASTERDOWN, READONLY, NOREPLICAS, MISCONF, OOM and
// "ERR max number of clients" are transient; NOAUTH, WRONGPASS, NOPERM,
// WRONGTYPE, EXECABORT and other ERR replies are permanent; anything else is
// transient. Connection errors are transient, except a publish whose
// connection failed after sending, which is ErrUnknownOutcome (re-publishing
// the same message is safe: its ID makes it a duplicate). Every call is
// bounded by the timeouts above and by its context; go-redis never retries
// on its own. A Redis restart or outage gives transient errors and the next
// call reconnects.
//
// # Testing
//
//	go test ./adapters/asynq/
//
// The conformance suite, interoperability tests (real asynq Client,
// Inspector and Server) and benchmarks use the Redis from
// SWITCHYARD_REDIS_ADDR or 127.0.0.1:6379 (skipped when absent, failed with
// SWITCHYARD_REQUIRE_BROKERS=1), each test in a namespace of its own. The
// outage, restart and credential tests start a private redis-server (on a
// free port, in a temporary directory, with AOF) that they may stop,
// kill, freeze (SIGSTOP) and restart, and need redis-server on PATH. The benchmark against asynq's own Server:
//
//	go test ./adapters/asynq/ -run '^$' -bench BenchmarkVsAsynq -benchtime 1x
package asynq
