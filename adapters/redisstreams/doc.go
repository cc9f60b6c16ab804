// Package redisstreams is the Switchyard driver for plain Redis Streams
// with consumer groups, on github.com/redis/go-redis/v9. Importing it
// registers the URL scheme "redis-streams" with broker.Register:
//
//	import _ "github.com/switchyard-dev/switchyard/adapters/redisstreams"
//
//	b, err := broker.Open(ctx, "redis-streams://:password@127.0.0.1:6379/0?namespace=prod", nil)
//
// It is the Redis adapter for throughput: a batch of up to max_batch
// messages is one round trip to publish, one to lease and one to ack. The
// asynq adapter (redis://) keeps asynq's data layout and tools instead and
// moves one task per round trip.
//
// # URL
//
//	redis-streams://[user[:password]@]host[:port][/db][?param=value&...]
//
// One Redis server (standalone; Cluster and Sentinel URLs are not
// supported, although every key of a namespace shares one hash tag). host
// defaults to 127.0.0.1, port to 6379, db to 0. Parameters, each with its
// default (unknown ones are an ErrInvalid error naming them):
//
//	namespace=default        isolates one set of lanes: keys are <prefix>:{<namespace>}:…
//	prefix=sy                the first part of every key
//	consumer=switchyard      the consumer name in the consumer groups (see Leases)
//	dedup_window=24h         how long an idempotency key stays claimed; 0s = forever
//	max_message_size=1048576 largest Message.Size (ErrTooLarge above it); at most 536805376
//	max_batch=1000           largest Publish/Receive/Ack/Extend batch; at most 5000
//	max_len=0                when > 0, a publish to a lane already holding that many
//	                         unacknowledged or delayed messages is refused (transient)
//	poll=500ms               longest single blocking wait of an idle Receive (10ms–1m)
//	dial_timeout=2s, read_timeout=3s, write_timeout=3s   bound every Redis call
//	pool_size=0              connections (0: go-redis's default, 10 per CPU)
//	tls=false                TLS; tls_server_name, tls_insecure_skip_verify with it
//
// Passwords never appear in errors or logs; broker.Redact masks them in
// URLs.
//
// # Layout
//
// For lane L of namespace NS (prefix P), live queue keys start with
// P:{NS}:l:L: and dead-letter keys with P:{NS}:d:L:
//
//	…:s      the stream; consumer group "sy", created at ID 0 on first use
//	…:lease  sorted set: "<entry ID> <generation> <releases>" → lease end
//	         (ms, server clock); the generation counts reclaims and is the
//	         delivery's fencing token, releases count deliveries given back
//	         without spending an attempt
//	…:wait   sorted set: the same members → when a nacked entry is due again
//	…:delay  sorted set: token → run-at (ms); …:held hash: token → envelope
//
// plus P:{NS}:k:<sha256> (idempotency claims, with the dedup window as TTL)
// and P:{NS}:lanes (the set of lanes, for broker.LaneLister). Entries
// carry the broker envelope (broker.EncodeEnvelope) in field "e"; dead
// letters add "dl" (the JSON record), "i" (the ID) and "a" (the attempt).
//
// Every state change is one Lua script (scripts.go), atomic in Redis, timed by the server's clock (TIME): a lease, a move to the
// dead-letter stream, a promotion of a delayed message is never half done,
// whatever happens to the client.
//
// A batch without idempotency keys or run-at times (and with max_len 0)
// is published as pipelined XADDs, as a raw producer would; a receive is
// one script (promotions, reclaims, XREADGROUP COUNT n and the leases);
// an ack is one script (a ZREM per delivery as the fence, then one XACK
// for the batch).
//
// # Capabilities and semantics
//
//   - Leases are real leases: the lease set holds each delivered entry's
//     deadline. Receive reclaims entries whose deadline passed (XCLAIM,
//     which also raises the pending list's delivery count) for any
//     consumer, so pending entries of a consumer that crashed or restarted
//     under another name are never stranded in its pending list — the
//     "pending entries lost after a restart" trap of consumers that read
//     only ">" . Extend moves the deadline (MaxLease 0: any length).
//     Every reclaim raises the entry's generation, which is part of its
//     lease-set member; Ack, Nack, Extend and DeadLetter name the member
//     they were delivered with and do nothing (ErrLeaseLost) once another
//     consumer reclaimed the entry.
//     XAUTOCLAIM is not used: its idle threshold is one value per call,
//     while leases here differ per delivery and are extended one by one.
//   - Fairness of reclaims: a Receive takes at most half its batch from
//     expired leases and due nacks (nacks first) before it reads new
//     entries, then fills any room left with more reclaims. A backlog of
//     expired leases never starves new work, nor the other way round.
//   - Consumers share one consumer name (consumer=), since leases are kept
//     in the lease set and not by consumer: restarts do not pile up dead
//     consumers in the group.
//   - Attempts: 1 + reclaims − releases. Nacks and crashed consumers spend
//     attempts; Release (broker.Releaser) does not.
//   - Nack with delay: the entry stays in the stream and the pending list;
//     it moves from the lease set to the wait set until due.
//   - Delays: a message whose RunAt is ahead waits in the delay set (any
//     horizon: MaxDelay 0) and is added to the stream when due by the next
//     Receive on its lane (at most 1,000 per call). An idle Receive waits
//     no later than the earliest delay, nack or lease end.
//   - Waiting: an idle Receive blocks with XREAD BLOCK from the stream's
//     last ID, so a new entry wakes it at once, for at most poll.
//   - Trim policy: MAXLEN is never used (it drops entries by position,
//     unacknowledged ones included). Acked entries are XACKed only, and
//     each process trims a live stream's head once a second with an exact
//     XTRIM MINID at the oldest pending entry (or just after the last
//     delivered one when none is pending): everything before it is
//     acknowledged, so the trim never drops an unacknowledged or an
//     undelivered entry. Dead-letter streams delete acked and replayed
//     entries (XDEL), so their length is their count. max_len bounds a
//     lane by refusing publishes (transient) instead of dropping.
//   - Attempt limit: Broker enforces Message.MaxAttempts on receive
//     (Capabilities.MaxAttempts false), crash-caused attempts included.
//   - Dead letters keep reason, error and attempt history (records over
//     64 KiB are trimmed). Undecodable entries — no "e" field, not an
//     envelope, a bad ID — are moved by Receive with
//     broker.ReasonUndecodable and never returned. Replay adds the stored
//     envelope back to the live stream (attempts start at 1) and removes
//     the dead letter, in one script.
//   - Dedup: native within dedup_window (SET NX PX in the publish script,
//     so the claim and the entry are written together); a duplicate
//     reports the first message's ID.
//   - Ordering: not native (Capabilities.Ordering false); Broker's
//     sequencer — the ledger's, shared by every process — serialises
//     ordering keys.
//   - Browse (broker.Browser) reads with XRANGE after the group's
//     last-delivered ID: nothing is leased, no attempt or age changes.
//   - Stats: Ready = the consumer group's lag (entries not delivered yet;
//     counted with XRANGE, up to 100,000, when Redis cannot tell),
//     InFlight = the lease set (an expired lease counts until reclaimed),
//     Delayed = delay set + wait set, DeadLettered = the dead-letter
//     stream's length, OldestReady = the age of the first undelivered
//     entry.
//
// # Limits
//
//   - max_message_size (default 1 MiB, at most 536,805,376 bytes: Redis's
//     512 MiB bulk limit less the envelope) applies to Message.Size;
//     larger messages are refused at publish with broker.ErrTooLarge.
//   - max_batch (default 1,000, at most 5,000) messages per script call.
//   - Leases and delays are kept to the millisecond and capped at about
//     100 years.
//
// # Errors
//
// Errors are broker.Error values classified by a table of Redis reply
// prefixes (errors.go): LOADING, BUSY, READONLY, OOM, MISCONF, NOGROUP and
// connection failures are transient; NOAUTH, WRONGPASS, NOPERM, WRONGTYPE
// and other ERR replies permanent; anything unrecognised transient. A
// publish or move whose connection failed after it was sent matches
// broker.ErrUnknownOutcome (retry with the same idempotency key). go-redis
// retries are off (MaxRetries -1): the driver never runs a script twice on
// its own. A server that is down yields transient errors within the
// dial/read timeouts; the pool reconnects by itself. A stream or group
// deleted behind the driver (or lost in a restart without persistence) is
// recreated on the next NOGROUP reply.
//
// # Testing
//
// Tests use the Redis from conformance/testenv (SWITCHYARD_REDIS_ADDR, else
// 127.0.0.1:6379) with a fresh namespace each, whose keys they delete
// afterwards. The conformance Outage case starts a private redis-server on
// a free port; the shared one is never stopped.
//
//	SWITCHYARD_REQUIRE_BROKERS=1 go test -race ./adapters/redisstreams/
//	go test ./adapters/redisstreams/ -run '^$' -bench BenchmarkEndToEnd -benchtime 1x -count 1
package redisstreams
