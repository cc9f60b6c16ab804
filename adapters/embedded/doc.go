// Package embedded is Switchyard's default broker: a queue in a SQLite
// database (modernc.org/sqlite, pure Go, WAL), durable in a file or kept in
// process memory. It needs no server and implements every capability of
// the contract natively.
//
// # URL form
//
//	embedded:///abs/path/queue.db?namespace=app   a file (created if missing)
//	embedded://relative/queue.db                  relative to the working directory
//	mem://name                                    in-process, shared by every driver of the process that names it
//
// Parameters: namespace (default "default"; lanes of different namespaces
// never meet), dedup_window (24h), max_message_size (1048576 bytes),
// default_max_attempts (25, for messages published with MaxAttempts 0),
// poll (25ms: how often a waiting receive looks for messages from other
// processes or becoming due; publishes in the same process wake it at
// once), sync_full (false), reduced (false; see below), create (true;
// false refuses to create a missing file: "no such database: PATH", as
// the operator commands open it). Unknown parameters
// are errors. A file path holding ?, #, % or NUL (after URL unescaping) is
// refused with ErrInvalid: SQLite's URI form would read it as another file.
//
// # Capabilities and semantics
//
// Leases are visibility deadlines stored with each message, extendable at
// will; a lease token guards every ack, nack, extend and dead-letter, so a
// consumer whose lease passed to another gets ErrLeaseLost and never
// removes the other's delivery. Attempts count every receive, so crashes
// count too; a message past its attempt limit is dead-lettered with
// ReasonMaxAttempts when it would next be received. Nack delays and run-at
// times of any horizon are native, as are deduplication by (lane, tenant,
// idempotency key) within the window, ordering by key (only the oldest live
// message of a key can be leased, and only when it is not leased already),
// a dead-letter queue per lane that keeps reason, error and attempt history
// and can be replayed, Release (back without spending an attempt), and
// stats with the age of the oldest ready message. Rows that do not decode
// (written by something else, or corrupt) are dead-lettered with
// ReasonUndecodable when received.
//
// # Durability and processes
//
// With the default synchronous=NORMAL in WAL mode a committed publish or ack
// survives the process being killed (SIGKILL included); a power failure may
// lose the last commits. sync_full=true makes every commit fsync.
//
// Several processes may open the same file at once: SQLite's file locks
// serialise their writes (busy timeout 10 s) and every operation is one
// transaction, so they share the queues safely; publishes from another
// process are seen within one poll interval. This is tested with a second
// process publishing and consuming beside the first. A file that is not a
// Switchyard SQLite database (not SQLite, or another application's SQLite
// database with tables of its own), or is corrupt, fails at open with
// ErrInvalid and is left unchanged; a missing or empty file becomes a new
// database. Paths are escaped for SQLite's file: URI ("#", "?" and "%" name
// themselves: embedded:///data/b%23c.db is the file b#c.db); a NUL or other
// control character in the path is ErrInvalid.
//
// The tables carry a schema version (sy_meta). Opening a file of an older
// version migrates it in place, in one transaction that other processes
// wait for (version 2 rebuilt sy_messages without AUTOINCREMENT; version 3
// names a message's namespace and lane by an integer from sy_lanes instead
// of their text; each keeps every message, lease and dead letter); a file
// of a newer version than the build knows fails at open with ErrInvalid,
// unchanged. Upgrade every process that shares a file together: a process
// of an older build that still has the file open when a newer one migrates
// it fails its operations from then on (version 3 removed columns its
// statements name) until it is restarted on the new build.
//
// A new database file is created 0600 (SQLite gives its -wal and -shm the
// same mode) and missing directories 0700, whatever the umask; an existing
// file others can read, or a directory they can write, is reported with a
// warning through Config.Logger and left as it is. Message bodies are
// stored as given: set broker.Options.Codec to encrypt them (see package
// codec and docs/SECURITY.md).
//
// # Errors
//
// Busy, locked and I/O errors are transient; corruption is permanent;
// after Close every call returns ErrClosed.
//
// # Testing
//
// conformance_test.go runs the broker-level and end-to-end suites on a file,
// on mem://, and on reduced=true — the same database with native ordering,
// deduplication, attempt limits and long delays switched off, so that every
// framework fallback in package broker is proven by the suite. TestChaos
// SIGKILLs worker processes at random over 1,000 tasks.
//
//	go test ./adapters/embedded/ -run Conformance -v
package embedded
