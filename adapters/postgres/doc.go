// Package postgres is the Switchyard driver for PostgreSQL as the queue,
// on github.com/jackc/pgx/v5: no broker to run beside the database a team
// already backs up. Importing it registers the URL schemes "postgres" and
// "postgresql" with broker.Register.
//
// # URL
//
//	postgres://[user[:password]@]host[:5432]/database[?param=value…]
//
// The broker's registry (broker.Open) is not the ledger's (ledger.Open):
// the same scheme names a queue for one and a ledger for the other, so a
// program passes two URLs, usually to the same database and always to
// different schemas:
//
//	broker: postgres://app@db/app?namespace=orders      (tables in schema sy_orders)
//	ledger: postgres://app@db/app?schema=orders_ledger  (ledger/postgres)
//
// The driver's own parameters, each with its default:
//
//	schema=switchyard_broker  the schema of the broker's tables (1–63 of
//	                          [a-z0-9_], not pg_…); created with its tables
//	                          at open unless create=false
//	namespace=NAME            instead of schema: the schema SchemaFor(NAME)
//	                          ("sy_" + NAME, with a hash suffix when NAME had
//	                          to change); lanes of different namespaces never
//	                          meet. Giving both is an error.
//	create=true               false refuses a missing schema ("no such broker
//	                          schema", ErrInvalid), as operator tools open it
//	dedup_window=24h          how long an idempotency key is remembered
//	max_message_size=1048576  Capabilities.MaxMessageSize (at most 64 MiB)
//	max_batch=1000            Capabilities.MaxBatch (at most 10,000)
//	default_max_attempts=25   the attempt limit of messages published with 0
//	poll=1s                   the fallback poll of a waiting Receive
//	vacuum=10s                how often the driver checks its queue table's
//	                          dead tuples (0s: never; see Table and vacuum)
//
// pgx's connection parameters (sslmode, sslrootcert, connect_timeout,
// application_name, target_session_attrs, …) and pool parameters
// (pool_max_conns, default DefaultPoolMaxConns = 16 here, plus one
// listening connection per Driver; …) pass through. Any other parameter (search_path
// included: use schema) is an ErrInvalid error naming it. Passwords never
// appear in errors or logs.
//
// # Capabilities and semantics
//
// Everything is native (Capabilities: MaxDelay 0, LeaseExtension, Dedup,
// Ordering, DeadLetterReasons, MaxAttempts, OldestReadyAge); no framework
// fallback is used.
//
//   - Leasing: Receive is one statement: the lane's oldest visible rows,
//     ORDER BY visible_at, seq LIMIT max FOR UPDATE SKIP LOCKED, updated in
//     the same statement with a fresh lease token, an attempt and the
//     lease's end. Concurrent receivers skip each other's rows and never
//     wait. Visibility uses the server's clock (statement_timestamp()), so
//     processes whose clocks differ agree on leases; the lease expires on
//     the server, with nothing to run: an expired row is simply visible
//     again. LeaseDeadline is measured from before the request (it errs
//     early).
//   - Wake-ups: every publish notifies the schema's channel
//     (LISTEN/NOTIFY, payload the lane) at commit; each Driver holds one
//     listening connection outside its pool and wakes its waiting
//     receives at once, in every process (TestNotify_WakesIdleReceive). A
//     waiting receive with nothing ready asks the table when the lane's
//     next row becomes visible (a run-at, a nack delay, a lease's end) and
//     sleeps exactly until then; poll is only the net for notifications
//     lost while the listening connection was down (it is reopened with
//     backoff, and every waiting receive looks again when it is back).
//   - Settling: Ack is one DELETE for the batch; Nack, Release, Extend
//     and DeadLetter are guarded by the lease token, so a consumer whose
//     lease passed to another gets ErrLeaseLost and never touches the
//     other's delivery. NackWithError keeps the error in the row's
//     last_error column.
//   - Delays: run-at and nack delays of any length are the row's
//     visible_at (MaxDelay 0).
//   - Attempts count every lease, crashes included; a row past its limit
//     (MaxAttempts, else default_max_attempts) is moved to the dead-letter
//     table with ReasonMaxAttempts when next leased.
//   - Dead letters live in sy_dead with their record (reason, error,
//     attempt history); Replay moves them back as new rows, attempts from
//     1. Rows that do not decode (written by something else, or corrupt:
//     headers that are not a JSON object of strings, a bad ID, kind, key or
//     attempt limit) are moved there with ReasonUndecodable by the receive
//     that leased them, and never delivered.
//   - Dedup: a claim table keyed by (lane, tenant, key), written in the
//     publish's transaction, within dedup_window; a duplicate reports the
//     first message's ID.
//   - Ordering: a keyed row is leased only when no earlier row of its key
//     is still in the lane (ready, delayed or leased), checked in the
//     receive statement by an index on (lane, ord_key, seq). Publishers of
//     a key take a transaction-level advisory lock on it, in key order, so
//     that seq order is commit order within a key; acking (or
//     dead-lettering) a key's head notifies the lane.
//   - Publish: a batch without keys is one INSERT … SELECT FROM unnest(…)
//     (one commit); with keys, one transaction. Concurrent publishes are
//     gathered into one statement by Broker (PublishConcurrency: half the
//     pool).
//   - Browse (broker.Browser) is a plain SELECT; Lanes lists the lanes
//     with rows; Stats is one aggregate over the lane.
//
// # One transaction with the application's write
//
// PublishTx publishes inside the caller's pgx.Tx on the same database:
// the messages exist if and only if the transaction commits, and
// consumers are notified at commit. Client.EnqueueTx keeps its outbox path
// (the task and an outbox row in the caller's transaction, published by
// the relay within milliseconds of the commit, which PostgreSQL notifies),
// which also works here when the ledger shares the database; PublishTx is
// for code that wants the queue row itself in its transaction, without
// the relay.
//
// # Table and vacuum
//
// Each task is one INSERT, one UPDATE per lease and one DELETE, so the
// queue table (sy_queue) holds only the backlog and makes about two dead
// tuples per task. Its reloptions make autovacuum run on a fixed 10,000
// dead tuples (autovacuum_vacuum_scale_factor 0, threshold 10000, cost
// delay 0) instead of a fraction of a table whose size swings, and
// fillfactor 90. Autovacuum only looks every autovacuum_naptime (default
// 1 min: at 3,000 tasks/s, 360,000 dead tuples between looks), and may be
// off altogether, so the driver also checks the table's dead tuples every
// vacuum interval (10s) and, past VacuumThreshold, runs VACUUM on it
// itself, one process per schema at a time (a try-advisory-lock). VACUUM
// does not block publishes or receives. docs/BENCHMARKS.md has the dead
// tuples and table size measured after long runs with and without it.
// Servers that run autovacuum with a short naptime (10s) can set
// vacuum=0s.
//
// # Limits
//
//   - MaxMessageSize: max_message_size, 1 MiB by default, at most
//     MaxMessageSizeLimit (64 MiB); a larger message is refused at publish
//     with ErrTooLarge (broker.TooLargeError). Large inputs travel by
//     reference.
//   - MaxBatch: max_batch, 1,000 by default, at most MaxBatchLimit
//     (10,000); Broker splits larger batches.
//   - The portable limits (names, keys, headers, times, attempt limits)
//     are broker's; rows breaking them are dead-lettered as undecodable.
//
// # Errors
//
// Errors are broker.Error values classified by a table of SQLSTATEs
// (errors.go): connection exceptions, insufficient resources, deadlocks,
// serialization failures and shutdowns are transient; data and integrity
// errors are permanent ErrInvalid; syntax, access, authentication errors, a
// missing database or a dropped schema are permanent; anything else is
// transient. A server that cannot be reached is transient. A write that
// failed after its request may have reached the server (a connection
// dropped mid-statement) is ErrUnknownOutcome: retry it with the same
// idempotency key. Context errors stay recognisable. After Close every
// call returns ErrClosed.
//
// # Testing
//
// Tests use the server from conformance/testenv (SWITCHYARD_POSTGRES_DSN,
// else postgres://postgres@127.0.0.1:5432/test) with a fresh schema each,
// dropped afterwards; the Outage case reaches the server through a TCP
// proxy it cuts, never stopping the shared server. InjectRaw writes rows
// with plain SQL behind the driver's back.
//
//	SWITCHYARD_REQUIRE_BROKERS=1 go test -race ./adapters/postgres/
//	go test ./adapters/postgres/ -run '^$' -bench BenchmarkEndToEnd -benchtime 1x -count 1
//	SWITCHYARD_PG_CHURN_TASKS=1000000 go test ./adapters/postgres/ -run '^$' -bench BenchmarkChurn -benchtime 1x -timeout 1h -v
package postgres
