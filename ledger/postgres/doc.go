// Package postgres is the PostgreSQL ledger store, on
// github.com/jackc/pgx/v5 (pgxpool).
//
// # Opening
//
// Import the package and open a DSN with ledger.Open (schemes postgres and
// postgresql), or call Open with a pgx connection string and *Options:
//
//	postgres://user:pass@db.internal:5432/app?sslmode=require&schema=switchyard
//
// The ledger's own query parameters, all optional:
//
//	schema=name        the schema holding the ledger's tables, created if missing
//	                   and set as every connection's search_path (1–63 of
//	                   [a-z0-9_]); default: the server's search_path (public)
//	dedup_window=24h   how long a broker.DedupStore claim holds
//	group_commit=true  false: every hot write is its own statement and commit
//	group_wait=1ms     the longest a write waits for a busy group writer while
//	                   another is free (0: none); see Options.GroupWait
//
// pgx's connection parameters (sslmode, sslrootcert, connect_timeout,
// application_name, target_session_attrs, …) and pool parameters
// (pool_max_conns, pool_min_conns, pool_max_conn_lifetime, …) pass through.
// Any other parameter (search_path included: use schema) is an ErrInvalid
// error, so a typo is never sent to the server as a setting. Passwords
// never appear in error text.
//
// With default_query_exec_mode=exec or simple_protocol (pgx encodes
// arguments without asking the server their types) the group writer sends
// each write as its own statement, not the writes of a kind as one array
// statement.
//
// # Schema and migrations
//
// The versioned migrations in migrations/NNNN_name.sql are embedded and
// applied on open in one transaction under a per-schema advisory lock, so
// processes opening the same schema at once apply each migration once;
// ledger_schema_version records them. A schema newer than the program is
// refused. Tables are prefixed ledger_. Tests use a fresh schema each.
//
// # Transactional outbox
//
// The store implements ledger.Outbox: CreateTx writes tasks in the
// caller's pgx.Tx or pgx-stdlib *sql.Tx (tables named with the schema,
// whatever the transaction's search_path; a transaction on another
// database or schema is ErrForeignTx, checked once per pgx connection by
// the random marker in ledger_outbox's comment). Relays claim rows with
// FOR UPDATE SKIP LOCKED and a lease, one claim at a time per schema; an
// insert trigger notifies channel OutboxChannel with the schema's name at
// commit, and ListenOutbox wakes every relay of the store from one
// connection of its own (outside the pool).
//
// # Semantics
//
// As ledger.Ledger describes, with each operation one statement (its own
// transaction) wherever possible:
//
//   - Create: INSERT … ON CONFLICT DO NOTHING; on conflict the existing
//     task is read by (tenant, key), else by ID. The "enqueued" event
//     (seq 1) is not a row: Events derives it from the task (schema 12).
//   - BeginRun: one statement locks the row, moves it to running with its
//     lease and keeps the attempt's start and its event in the task row;
//     EndRun makes the move and keeps the attempt's end there too (schema
//     14: the attempt's row and its start event's row are written when the
//     next attempt begins; the attempt's at once when it has a row or the
//     move is refused), and the event of its move (schema 15: its row is
//     written when the next EndRun replaces it; the statement sends the
//     move's note itself, schema 16: only for a task marked watched —
//     WatchTask or FollowTask, which Client.Wait and Client.Watch call — or a move to
//     cancelled, so that the listeners, every Server's among them, are
//     not woken at every task's end). A completed task is one row. A task's updates
//     touch no indexed column (fillfactor 30), so they are HOT.
//   - Transition: the row is locked only if its state is one of the legal
//     predecessors (SELECT … WHERE state = ANY($n) FOR UPDATE), updated,
//     and the event with the old state appended, all in one statement; a
//     refused move reads the current state for the ConflictError.
//   - PutStep, BeginEffect: INSERT … ON CONFLICT DO NOTHING RETURNING, else
//     read the stored row (first write wins).
//   - SetEffect: UPDATE … WHERE state <> 'confirmed'.
//   - Claim: a task row holding the key is the claim (an idempotent
//     Enqueue claims once); otherwise an upsert into ledger_dedup that
//     replaces only an expired claim.
//   - Prune: DELETE in batches of 500 chosen with FOR UPDATE SKIP LOCKED
//     among the tasks created before the horizon; foreign keys cascade to
//     attempts, steps and effects, and the same statement deletes the
//     events (which have no foreign key: every event insert updates its
//     task row); expired dedup claims go too.
//
// Event sequence numbers are per task and gapless (a counter on the task
// row, taken under its row lock). List pages by an identity column
// (creation order; under concurrent inserts a page boundary follows
// sequence, not commit, order). Times are timestamptz (microseconds).
//
// # Errors
//
// Every error matches one of broker.ErrTransient, ErrPermanent or
// ErrUnknownOutcome. SQLSTATEs are classified by a table: connection
// exceptions (08), insufficient resources (53), serialization failures,
// deadlocks, cancellations and shutdowns → transient; data and integrity
// errors (22, 23) → permanent ErrInvalid, except a foreign-key violation,
// which is ledger.ErrNotFound (the task does not exist); syntax, access
// and authentication errors (42, 28) and a missing database → permanent;
// anything else transient. A server that cannot be reached is transient.
// A write that failed after its request may have reached the server, for
// a reason other than a server error (a connection dropped mid-statement),
// is ErrUnknownOutcome. Context errors stay recognisable and are
// transient. Calls after Close give broker.ErrClosed.
//
// # Testing
//
//	go test -race ./ledger/postgres/
//	go test ./ledger/postgres/ -run '^$' -bench . -benchtime 2000x
//
// The server comes from testenv.Postgres (SWITCHYARD_POSTGRES_DSN, else
// postgres://postgres@127.0.0.1:5432/test); without one the tests skip
// with the reason, or fail under SWITCHYARD_REQUIRE_BROKERS=1. Each test
// opens a fresh schema and drops it at the end.
package postgres
