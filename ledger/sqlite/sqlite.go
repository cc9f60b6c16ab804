package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/fileperm"
	"github.com/switchyard-dev/switchyard/internal/sqliteopen"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/front"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Memory is the path that opens a private in-memory database.
const Memory = ":memory:"

func init() {
	ledger.Register("sqlite", openURL)
}

// Options configures a Store. A nil *Options means the defaults.
type Options struct {
	// BusyTimeout is how long a write waits for another process holding the
	// database's write lock. Defaults to 5s.
	BusyTimeout time.Duration
	// Synchronous is SQLite's synchronous setting: "full" (every commit is
	// fsynced: durable across power loss) or "normal" (durable across a
	// process crash; a power loss may lose the last commits). Defaults to
	// "full".
	Synchronous string
	// Readers is the size of the read-only connection pool. Defaults to 4.
	// Writes always go through one connection.
	Readers int
	// DedupWindow is how long a dedup claim (broker.DedupStore) holds.
	// Defaults to 24h.
	DedupWindow time.Duration
	// OrderingStall is how long an ordering key waits for a number that
	// was assigned but never offered to a consumer before later numbers
	// may start without it (see Sequencer). Defaults to 30s.
	OrderingStall time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger receives warnings (a database file others can read). Defaults
	// to slog.Default().
	Logger *slog.Logger
	// MustExist refuses to create the database: a path with no file is an
	// error saying "no such database" (operator tools open existing
	// ledgers only). DSN parameter create=false. Defaults to false
	// (created when missing).
	MustExist bool
	// NotifyInterval is how often a listening store reads new notes
	// (ledger.Notes; see notes.go): the control channel's delay. Defaults
	// to DefaultNotifyInterval (50ms); DSN parameter notify_interval.
	NotifyInterval time.Duration
}

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = 5 * time.Second
	}
	if c.BusyTimeout < 0 {
		return c, store.Invalid("sqlite: open", "busy timeout %v is negative", c.BusyTimeout)
	}
	switch strings.ToLower(c.Synchronous) {
	case "":
		c.Synchronous = "full"
	case "full", "normal":
		c.Synchronous = strings.ToLower(c.Synchronous)
	default:
		return c, store.Invalid("sqlite: open", "synchronous %q is neither full nor normal", c.Synchronous)
	}
	if c.Readers == 0 {
		c.Readers = 4
	}
	if c.Readers < 0 {
		return c, store.Invalid("sqlite: open", "readers %d is negative", c.Readers)
	}
	if err := store.Defaults("sqlite: open", &c.DedupWindow, &c.OrderingStall, &c.Now); err != nil {
		return c, err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.NotifyInterval == 0 {
		c.NotifyInterval = DefaultNotifyInterval
	}
	if c.NotifyInterval < 0 {
		return c, store.Invalid("sqlite: open", "notify interval %v is negative", c.NotifyInterval)
	}
	return c, nil
}

// Store is the SQLite ledger. Its methods are those of the interfaces it
// implements, documented there, and are shared with the PostgreSQL store
// through one validating layer (arguments and a closed store are refused
// there, with the same errors on both, before any SQL runs):
//
//   - ledger.Ledger: Create, CreateMany, Get, GetByKey, Transition, List,
//     BeginRun, EndRun, RenewLeases, StartAttempt, FinishAttempt,
//     Attempts, Events, AppendEvent, GetStep, PutStep, BeginEffect,
//     SetEffect, Effects, Prune, Close;
//   - broker.DedupStore: Claim, Release; broker.SequencerSource:
//     Sequencer;
//   - ledger.LaneControls: SetLanePaused, LaneEvents, PausedLanes;
//   - ledger.Servers: RegisterServer, RemoveServer, PruneServers,
//     ListServers; ledger.History: RecordHistory, ListHistory,
//     PruneHistory; ledger.Notes: Notify, Listen; ledger.Watcher:
//     WatchTask, FollowTask;
//   - ledger.StreamStore: AppendStream, ReadStream, LatestProgress,
//     PruneStreams, PutWait, GetWait, SignalWait, ExpireWait, FindWait;
//   - ledger.Outbox: CreateTx, CreateOutbox, ClaimOutbox, DoneOutbox,
//     ReleaseOutbox, OutboxStats;
//   - SchemaVersion, the schema version the database is at.
type Store struct {
	// ledgerFront holds the public methods: it validates their arguments
	// and calls backend, this store's SQL.
	ledgerFront
	path   string
	opts   Options
	w      *sql.DB // one connection: every write transaction
	r      *sql.DB // read-only pool (the same as w in memory)
	closed atomic.Bool

	reqs    chan *writeReq // to the writer goroutine
	stop    chan struct{}  // closed by Close
	stopped chan struct{}  // closed when the writer goroutine has returned
	wr      *writer
	direct  bool // benchmark only: writes run on the caller's goroutine
	txns    atomic.Int64
	writes  atomic.Int64
	// batches counts the grouped statements (batch.go) that completed,
	// batchWrites their writes, splits those undone by an error.
	batches, batchWrites, splits atomic.Int64
	// lateJoins counts the writes a group took in before its commit
	// (writer.go, runGroup).
	lateJoins atomic.Int64
	rs        readStmts

	hubOnce sync.Once
	hub     *store.Hub // ledger.Notes listeners (notes.go)
	ident   identity   // the database's marker (outbox.go)
}

// ledgerFront is the embedded front: an alias, so that the field is
// unexported and only the methods are promoted.
type ledgerFront = front.Front

// backend is the Store's SQL, called by its front with validated
// arguments (front.Backend). Its methods are not the Store's.
type backend struct{ *Store }

var (
	_ ledger.Ledger = (*Store)(nil)
	_ front.Backend = backend{}
)

// openURL is the registered opener; see the package documentation for the
// DSN forms.
func openURL(ctx context.Context, u *url.URL) (ledger.Ledger, error) {
	path, err := pathOf(u)
	if err != nil {
		return nil, err
	}
	q := broker.NewQuery(u)
	o := Options{
		BusyTimeout:    q.Duration("busy_timeout", 5*time.Second),
		Synchronous:    q.String("synchronous", "full"),
		Readers:        q.Int("readers", 4),
		DedupWindow:    q.Duration("dedup_window", store.DefaultDedupWindow),
		MustExist:      !q.Bool("create", true),
		NotifyInterval: q.Duration("notify_interval", DefaultNotifyInterval),
	}
	if err := q.Finish(); err != nil {
		return nil, broker.Invalidf("ledger DSN: %s", strings.TrimPrefix(err.Error(), "broker URL: "))
	}
	if o.Readers <= 0 {
		return nil, broker.Invalidf("ledger DSN: readers must be at least 1")
	}
	if o.DedupWindow <= 0 {
		return nil, broker.Invalidf("ledger DSN: dedup_window must be positive")
	}
	return Open(ctx, path, &o)
}

func pathOf(u *url.URL) (string, error) {
	switch {
	case u.Opaque != "":
		// sqlite:relative/path.db or sqlite::memory:
		p, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", broker.Invalidf("ledger DSN: path does not unescape")
		}
		return p, nil
	case u.Host != "" || u.User != nil:
		return "", broker.Invalidf("ledger DSN %q: use sqlite:///absolute/path.db, sqlite:relative/path.db or sqlite::memory: (no host)", broker.Redact(u))
	case u.Path == "":
		return "", broker.Invalidf("ledger DSN %q has no path", broker.Redact(u))
	}
	return u.Path, nil
}

// Open opens (creating if needed) the ledger database at path, or a
// private in-memory database when path is Memory, and applies the schema
// migrations. opts may be nil.
func Open(ctx context.Context, path string, opts *Options) (*Store, error) {
	const op = "sqlite: open"
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, store.Invalid(op, "empty database path")
	}
	if strings.ContainsAny(path, "?#\x00") {
		return nil, store.Invalid(op, "database path %q contains ?, # or NUL", path)
	}
	s := &Store{path: path, opts: o, rs: readStmts{m: map[string]*sql.Stmt{}}}
	front.Init(&s.ledgerFront, "sqlite", backend{s}, &s.closed, o.Now)
	params := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)", o.BusyTimeout.Milliseconds())
	if path == Memory {
		w, err := sql.Open("sqlite", "file::memory:?"+params+"&_txlock=immediate")
		if err != nil {
			return nil, s.classify(op, err)
		}
		// One connection holds the database: it must never be closed while
		// the store is open.
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		w.SetConnMaxLifetime(0)
		w.SetConnMaxIdleTime(0)
		s.w, s.r = w, w
	} else {
		if o.MustExist {
			if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
				return nil, &broker.Error{Op: op, Class: broker.Permanent, Err: fmt.Errorf("no such database: %s", path)}
			}
		}
		if err := checkHeader(path); err != nil {
			return nil, err
		}
		// A new database is created 0600 (SQLite gives its -wal and -shm
		// files the database's mode; the directory must exist); wider
		// existing ones are reported.
		if err := fileperm.Prepare(path, "ledger", false, o.Logger); err != nil {
			return nil, &broker.Error{Op: op, Class: broker.Permanent, Err: err}
		}
		dsn := "file:" + path + "?" + params
		w, err := sql.Open("sqlite", dsn+"&_pragma=journal_mode(WAL)&_pragma=synchronous("+o.Synchronous+")&_txlock=immediate")
		if err != nil {
			return nil, s.classify(op, err)
		}
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		w.SetConnMaxLifetime(0)
		w.SetConnMaxIdleTime(0)
		s.w = w
		// The writer's first connection sets WAL (a persistent property of
		// the file) before any reader opens.
		// Another process opening the file at once can hold the lock
		// this needs (SQLite may answer SQLITE_BUSY without waiting).
		if err := sqliteopen.RetryBusy(ctx, func() error { return w.PingContext(ctx) }); err != nil {
			w.Close()
			return nil, s.classify(op, err)
		}
		r, err := sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
		if err != nil {
			w.Close()
			return nil, s.classify(op, err)
		}
		r.SetMaxOpenConns(o.Readers)
		r.SetMaxIdleConns(o.Readers)
		s.r = r
	}
	s.startWriter()
	// Processes opening a new ledger at once race for its lock.
	if err := sqliteopen.RetryBusy(ctx, func() error { return s.migrate(ctx) }); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

var sqliteHeader = []byte("SQLite format 3\x00")

// checkHeader refuses a non-empty file that is not a SQLite database, with
// a clear error, before SQLite touches it.
func checkHeader(path string) error {
	const op = "sqlite: open"
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &broker.Error{Op: op, Class: broker.Permanent, Err: fmt.Errorf("cannot read %s: %w", path, err)}
	}
	defer f.Close()
	buf := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, buf)
	if n == 0 && (err == io.EOF || err == nil) {
		return nil // empty file: SQLite initialises it
	}
	if err != nil || !bytes.Equal(buf, sqliteHeader) {
		return &broker.Error{Op: op, Class: broker.Permanent, Kind: broker.ErrInvalid,
			Err: fmt.Errorf("%s is not a SQLite database (bad header)", path)}
	}
	return nil
}

// migrate applies the embedded migrations newer than the database's
// schema_version, all in one write transaction.
func (s *Store) migrate(ctx context.Context) error {
	const op = "sqlite: open"
	ms, err := store.Migrations(migrationFS, "migrations")
	if err != nil {
		return &broker.Error{Op: op, Class: broker.Permanent, Err: err}
	}
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS ledger_schema_version (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
			return err
		}
		pending, err := s.pendingMigrations(ctx, tx, ms)
		if err != nil {
			return &broker.Error{Op: op, Class: broker.Permanent, Err: fmt.Errorf("%s: %w", s.path, err)}
		}
		for _, m := range pending {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %s: %w", m.Name, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO ledger_schema_version (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, s.opts.Now().UnixNano()); err != nil {
				return err
			}
		}
		return nil
	})
}

// pendingMigrations returns the migrations of ms not yet recorded in tx's
// database (store.Pending).
func (s *Store) pendingMigrations(ctx context.Context, tx *sql.Tx, ms []store.Migration) ([]store.Migration, error) {
	rows, err := tx.QueryContext(ctx, `SELECT version FROM ledger_schema_version`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var applied []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied = append(applied, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return store.Pending(ms, applied)
}

// SchemaVersion implements front.Backend.
func (s backend) SchemaVersion(ctx context.Context, op string) (int, error) {
	var v int
	err := s.r.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM ledger_schema_version`).Scan(&v)
	return v, s.classify(op, err)
}

// Close closes the database. Calls after Close return broker.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.hubOnce.Do(func() {})
	if s.hub != nil {
		s.hub.Close()
	}
	if s.stop != nil {
		close(s.stop)
		<-s.stopped
		for _, st := range s.wr.stmts {
			st.Close()
		}
	}
	s.rs.mu.Lock()
	for _, st := range s.rs.m {
		st.Close()
	}
	s.rs.mu.Unlock()
	var err error
	if s.r != nil && s.r != s.w {
		err = s.r.Close()
	}
	if s.w != nil {
		if e := s.w.Close(); e != nil {
			err = e
		}
	}
	return err
}

// Path returns the database path (Memory for an in-memory store).
func (s *Store) Path() string { return s.path }
