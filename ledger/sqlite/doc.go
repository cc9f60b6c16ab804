// Package sqlite is the SQLite ledger store: pure Go (modernc.org/sqlite,
// no cgo), one file, WAL mode. It is the embedded default.
//
// # Opening
//
// Import the package and open a DSN with ledger.Open, or call Open with a
// path and *Options:
//
//	sqlite:///var/lib/switchyard/ledger.db   absolute path (three slashes)
//	sqlite:data/ledger.db                    path relative to the working directory
//	sqlite::memory:                          a private in-memory database (tests)
//
// A form with a host (sqlite://x/…) is refused rather than guessed at.
// Query parameters, all optional; any other is an ErrInvalid error:
//
//	busy_timeout=5s     how long a write waits for another process's write lock
//	synchronous=full    full: every commit is fsynced (durable across power loss);
//	                    normal: durable across a process crash only
//	readers=4           size of the read-only connection pool
//	dedup_window=24h    how long a broker.DedupStore claim holds
//	create=true         false: a missing file is an error ("no such database")
//	                    instead of a new ledger; the operator commands use it
//	notify_interval=50ms how often a listening process reads new notes
//	                    (ledger.Notes: cancellations reach running handlers,
//	                    Client.Wait returns, within about this)
//
// The file is created if missing, 0600 whatever the umask (SQLite gives
// its -wal and -shm the same mode); an existing file others can read, or a
// directory they can write, is reported with a warning through
// Options.Logger and left as it is. A file that is not a SQLite database
// (bad header) or is corrupt fails at open with a permanent error matching
// broker.ErrInvalid; a missing directory with a permanent error. Payloads
// are stored as given: wrap the store with ledger.WithCodec to encrypt
// them (the root package's Client and Server do, with their broker's
// codec).
//
// # Schema and migrations
//
// The versioned migrations in migrations/NNNN_name.sql are embedded in the
// binary and applied on open, in one write transaction, recording each in
// the ledger_schema_version table; reopening applies nothing twice. A
// database whose version is newer than the program's is refused. Tables
// are prefixed ledger_ so the file can be shared with other data.
//
// # Transactional outbox
//
// The store implements ledger.Outbox: CreateTx writes tasks inside the
// caller's *sql.Tx on the same database file (in a SAVEPOINT, so a failure
// leaves the transaction as it was; a transaction on another file is
// ErrForeignTx, told by the random id in ledger_identity). Relays claim
// rows by lease through the writer and poll: SQLite has no notifications.
// An in-memory store's database cannot be shared, so it takes no caller's
// transaction.
//
// # Writes: one writer, group commit
//
// SQLite has one writer at a time. Every write therefore runs on one
// goroutine that owns the single writer connection (BEGIN IMMEDIATE).
// Writes that arrive while a transaction runs are taken together into the
// next transaction, each inside its own SAVEPOINT so a failing write rolls
// back alone, and one COMMIT (one fsync) makes the group durable before
// any caller is answered. Before its COMMIT a group also takes in the
// writes queued while its statements ran (never waiting for any), so that
// a write arriving just after a group started shares that group's commit
// instead of waiting for it and then for one of its own. Statements are
// prepared once per connection.
// Reads use a separate read-only pool and are never blocked by the writer
// (WAL). BenchmarkTask compares the patterns: with 16 concurrent callers
// and synchronous=full on this project's 2-core VM, group commit did
// about five times the tasks per second of one transaction per write over
// one connection, and more than that over four contending writer
// connections (which also ran past a 5 s busy timeout under load).
//
// Within a group, the hot writes of one kind (Create, BeginRun, EndRun
// with a transition) are completed together by a few multi-row
// statements (one SELECT of their tasks, then one INSERT or UPDATE … FROM
// (VALUES …) per table) instead of a savepoint and a few statements
// each; a write refused by its own guard still gets its own error, two
// writes of one task never share a statement, and an error of a grouped
// statement undoes it and runs its writes one by one (batch.go).
// CreateMany inserts its tasks in multi-row INSERTs too.
//
// Several processes may open the same file: the file lock and the busy
// timeout serialise their writers, and every guarded write (the
// idempotency claim, a transition, a step, an effect) is a read and a
// write inside one immediate transaction, so the exactly-one results hold
// across processes as well.
//
// # Semantics
//
// As ledger.Ledger describes. Idempotency keys are unique per tenant by a
// partial unique index (tasks without a key never collide). A transition
// reads the state and updates it in one transaction and appends its event
// there; event sequence numbers are per task and gapless. A run's two
// events (BeginRun's start, EndRun's move) are kept in the task row
// (migration 0015) until the next BeginRun or EndRun writes them as
// ledger_events rows; Events and ReadStream read both, in sequence order,
// and EndRun writes the move's state note itself. List pages by
// creation order (an AUTOINCREMENT column, never reused); a cursor whose
// task was pruned gives ErrNotFound. Prune deletes in batches of 500 (its
// foreign keys cascade to attempts, steps, effects and events) and also
// forgets dedup claims older than the window. Times are stored as Unix
// nanoseconds.
//
// # Errors
//
// Every error matches one of broker.ErrTransient, ErrPermanent or
// ErrUnknownOutcome. SQLite result codes are classified by a table
// (BUSY, LOCKED, IOERR, FULL → transient; CORRUPT, NOTADB, READONLY,
// CANTOPEN, CONSTRAINT, SQL errors → permanent; anything else transient);
// a foreign-key violation is ledger.ErrNotFound (the task does not
// exist); context errors stay recognisable and are transient, and a write
// whose context ended before it ran is never applied later. Calls after
// Close give broker.ErrClosed.
//
// # Testing
//
//	go test -race ./ledger/sqlite/
//	go test ./ledger/sqlite/ -run '^$' -bench . -benchtime 2000x
//
// The tests run the ledgertest conformance suite on a temp file and in
// memory, plus DSN, corrupt-file, migration, dedup-window and
// two-processes-on-one-file cases. Nothing outside the temp directory is
// touched.
package sqlite
