package embedded

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/sqliteopen"
)

// uriPath escapes a file path for a SQLite "file:" URI, where "?" starts
// the parameters, "#" a fragment and "%" an escape: left as they are, a
// path like b#c.db opened "b" without the WAL and busy-timeout pragmas.
func uriPath(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '%', '?', '#':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var sqliteHeader = []byte("SQLite format 3\x00")

// checkExisting refuses, without modifying it, an existing non-empty file
// that is not a Switchyard embedded database: a file that is not SQLite,
// and a SQLite database with tables but none of ours (another
// application's, or a Switchyard ledger), which opening would otherwise
// switch to WAL and fill with the broker's tables. A missing or empty file
// is fine: it becomes a new database.
func checkExisting(ctx context.Context, abs string) error {
	f, err := os.Open(abs)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return broker.Wrap("open", broker.Permanent, fmt.Errorf("embedded: cannot read %s: %w", abs, err))
	}
	buf := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, buf)
	f.Close()
	if n == 0 && (err == nil || errors.Is(err, io.EOF)) {
		return nil
	}
	if err != nil || !bytes.Equal(buf, sqliteHeader) {
		return broker.Invalidf("embedded: %s is not a Switchyard SQLite database (it is not a SQLite file)", abs)
	}
	// Another process creating or migrating the file at this moment (its
	// switch to WAL, its WAL recovery) answers this read with SQLITE_BUSY
	// at once, whatever busy_timeout says: a fleet's processes starting
	// together failed "open: database is locked" here.
	var names []string
	ours := false
	err = sqliteopen.RetryBusy(ctx, func() error {
		names, ours = nil, false
		db, err := sql.Open("sqlite", "file:"+uriPath(abs)+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			return err
		}
		defer db.Close()
		rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				return err
			}
			ours = ours || name == "sy_meta"
			names = append(names, name)
		}
		return rows.Err()
	})
	if err != nil {
		return classifyOpen(err)
	}
	if len(names) > 0 && !ours {
		if len(names) > 5 {
			names = append(names[:5], "…")
		}
		return broker.Invalidf("embedded: %s is not a Switchyard SQLite database: it is another SQLite database (tables %s); left unchanged", abs, strings.Join(names, ", "))
	}
	return nil
}

// sharedDB is one *sql.DB per database per process, shared by every driver
// that opens it, so that publishes wake receivers at once and in-memory
// databases live while anyone uses them.
type sharedDB struct {
	key    string
	db     *sql.DB
	refs   int
	memory bool

	mu     sync.Mutex
	wakers map[laneKey]*waker // under mu
	lanes  map[laneKey]int64  // sy_lanes ids read or written, under mu
	w      *writer            // gathers concurrent write transactions

	stmtMu sync.RWMutex
	stmts  map[string]*sql.Stmt // prepared at open or by prepare, under stmtMu
}

// laneKey names a lane of a namespace (a map key that costs no allocation).
type laneKey struct{ ns, lane string }

// waker returns the waker of (ns, lane).
func (s *sharedDB) waker(ns, lane string) *waker {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := laneKey{ns, lane}
	w := s.wakers[k]
	if w == nil {
		w = newWaker()
		s.wakers[k] = w
	}
	return w
}

// laneID returns the sy_lanes id of (ns, lane). A lane that has none yet
// gets one in a write transaction of its own when create is set, and is
// reported missing (false) otherwise: it holds no message. Its caller must
// hold no transaction (it may wait for the connection). An id is cached
// once committed: rows of sy_lanes are never changed or removed.
func (s *sharedDB) laneID(ctx context.Context, ns, lane string, create bool) (int64, bool, error) {
	k := laneKey{ns, lane}
	s.mu.Lock()
	id, ok := s.lanes[k]
	s.mu.Unlock()
	if ok {
		return id, true, nil
	}
	err := s.db.QueryRowContext(ctx, `SELECT id FROM sy_lanes WHERE ns = ? AND lane = ?`, ns, lane).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows) && !create:
		return 0, false, nil
	case errors.Is(err, sql.ErrNoRows):
		err = s.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO sy_lanes (ns, lane) VALUES (?, ?) ON CONFLICT DO NOTHING`, ns, lane); err != nil {
				return err
			}
			return tx.QueryRowContext(ctx, `SELECT id FROM sy_lanes WHERE ns = ? AND lane = ?`, ns, lane).Scan(&id)
		})
		if err != nil {
			return 0, false, err
		}
	case err != nil:
		return 0, false, err
	}
	s.mu.Lock()
	s.lanes[k] = id
	s.mu.Unlock()
	return id, true, nil
}

// stmt returns query prepared on the database at open (parsing the receive
// query costs more than running it). Every query the driver runs often is
// in preparedQueries; preparing lazily could deadlock on the single
// connection while a transaction holds it.
func (s *sharedDB) stmt(query string) (*sql.Stmt, error) {
	s.stmtMu.RLock()
	st := s.stmts[query]
	s.stmtMu.RUnlock()
	if st != nil {
		return st, nil
	}
	return nil, fmt.Errorf("embedded: statement not prepared: %.40s", query)
}

// prepare prepares the multi-row statements (lazyQueries) a batch will use
// the first time one is needed. Its caller must hold no transaction: it
// waits for the connection. A failure is left to the transaction, which
// then prepares the statement for itself (txStmt). Preparing them all at
// open made every open several times slower under the race detector (the
// chaos test's restarted workers).
func (s *sharedDB) prepare(ctx context.Context, queries ...string) {
	for _, q := range queries {
		if _, err := s.stmt(q); err == nil {
			continue
		}
		st, err := s.db.PrepareContext(ctx, q)
		if err != nil {
			return
		}
		s.stmtMu.Lock()
		if s.stmts == nil || s.stmts[q] != nil {
			st.Close() // closed meanwhile, or prepared by another caller
		} else {
			s.stmts[q] = st
		}
		s.stmtMu.Unlock()
	}
}

var (
	sharedMu sync.Mutex
	sharedBy = map[string]*sharedDB{}
)

func acquireShared(ctx context.Context, key, dsn string, memory bool) (*sharedDB, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s := sharedBy[key]; s != nil {
		s.refs++
		return s, nil
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, broker.Wrap("open", broker.Permanent, err)
	}
	// One connection: SQLite has one writer anyway, and a single
	// connection avoids SQLITE_BUSY churn inside the process. Other
	// processes coordinate through SQLite's file locks and busy_timeout.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	// Processes opening a new file at once race for its lock.
	if err := sqliteopen.RetryBusy(ctx, func() error { return migrate(ctx, db) }); err != nil {
		db.Close()
		return nil, err
	}
	s := &sharedDB{key: key, db: db, refs: 1, memory: memory, wakers: map[laneKey]*waker{}, lanes: map[laneKey]int64{}, stmts: map[string]*sql.Stmt{}}
	s.w = &writer{s: s}
	// Preparing reads the schema, which another process may be writing
	// (its migration) or recovering: SQLite answers that with
	// SQLITE_BUSY at once, without waiting on busy_timeout.
	err = sqliteopen.RetryBusy(ctx, func() error {
		for _, q := range preparedQueries {
			if s.stmts[q] != nil {
				continue
			}
			st, err := db.PrepareContext(ctx, q)
			if err != nil {
				return err
			}
			s.stmts[q] = st
		}
		return nil
	})
	if err != nil {
		for _, st := range s.stmts {
			st.Close()
		}
		db.Close()
		return nil, classifyOpen(err)
	}
	sharedBy[key] = s
	return s, nil
}

func releaseShared(s *sharedDB) error {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	s.refs--
	if s.refs > 0 || s.memory {
		// A named in-memory database lives as long as the process, like a
		// server would: a consumer that closes without acking must not
		// take the other consumers' messages with it.
		return nil
	}
	delete(sharedBy, s.key)
	s.stmtMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = nil
	s.stmtMu.Unlock()
	return s.db.Close()
}

// schemaVersion is the version of the database's tables, in sy_meta.
//
// Version 2 dropped AUTOINCREMENT from sy_messages.seq: it updated
// sqlite_sequence (a row and a page more in every publish's transaction)
// for a guarantee nothing needs. A new seq is still above every seq in the
// table, so publish order and ordering by key hold; a seq freed by an ack
// can come back once every message above it is gone too, and the random
// lease token every ack, nack and extend is guarded by tells the new
// message from the old one.
//
// Version 3 names a message's namespace and lane by an integer, lane_id,
// from sy_lanes (one row per namespace and lane, never changed or removed
// once written), instead of their text in every row and in every entry of
// its indexes: each task writes the ready index four times (publish,
// lease, ack), and every one of those entries was two strings longer, each
// comparison of them a string comparison. The indexes no longer repeat
// seq, which SQLite appends to every index entry anyway.
const schemaVersion = 3

// messagesTableV2 is the CREATE TABLE of version 2's sy_messages under name.
func messagesTableV2(name string) string {
	return `CREATE TABLE IF NOT EXISTS ` + name + ` (
		seq          INTEGER PRIMARY KEY,
		ns           TEXT NOT NULL,
		lane         TEXT NOT NULL,
		dead         INTEGER NOT NULL DEFAULT 0,
		id           TEXT NOT NULL,
		kind         TEXT NOT NULL,
		body         BLOB,
		headers      BLOB,
		tenant       TEXT NOT NULL DEFAULT '',
		idem_key     TEXT NOT NULL DEFAULT '',
		ord_key      TEXT NOT NULL DEFAULT '',
		run_at       INTEGER NOT NULL DEFAULT 0,
		enqueued_at  INTEGER NOT NULL,
		max_attempts INTEGER NOT NULL DEFAULT 0,
		visible_at   INTEGER NOT NULL,
		attempts     INTEGER NOT NULL DEFAULT 0,
		lease_token  INTEGER NOT NULL DEFAULT 0,
		dead_letter  BLOB
	)`
}

// messagesColumnsV2 are version 1's and version 2's columns.
const messagesColumnsV2 = `seq, ns, lane, dead, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, visible_at, attempts, lease_token, dead_letter`

var messagesIndexesV2 = []string{
	`CREATE INDEX IF NOT EXISTS sy_messages_ready ON sy_messages (ns, lane, dead, visible_at, seq)`,
	`CREATE INDEX IF NOT EXISTS sy_messages_order ON sy_messages (ns, lane, ord_key, seq) WHERE ord_key <> ''`,
}

// lanesTable maps a namespace and lane to the integer the messages carry.
// Its rows are only ever added: a process caches what it has read.
const lanesTable = `CREATE TABLE IF NOT EXISTS sy_lanes (
		id   INTEGER PRIMARY KEY,
		ns   TEXT NOT NULL,
		lane TEXT NOT NULL,
		UNIQUE (ns, lane)
	)`

// messagesTable is the CREATE TABLE of sy_messages under name.
func messagesTable(name string) string {
	return `CREATE TABLE IF NOT EXISTS ` + name + ` (
		seq          INTEGER PRIMARY KEY,
		lane_id      INTEGER NOT NULL,
		dead         INTEGER NOT NULL DEFAULT 0,
		id           TEXT NOT NULL,
		kind         TEXT NOT NULL,
		body         BLOB,
		headers      BLOB,
		tenant       TEXT NOT NULL DEFAULT '',
		idem_key     TEXT NOT NULL DEFAULT '',
		ord_key      TEXT NOT NULL DEFAULT '',
		run_at       INTEGER NOT NULL DEFAULT 0,
		enqueued_at  INTEGER NOT NULL,
		max_attempts INTEGER NOT NULL DEFAULT 0,
		visible_at   INTEGER NOT NULL,
		attempts     INTEGER NOT NULL DEFAULT 0,
		lease_token  INTEGER NOT NULL DEFAULT 0,
		dead_letter  BLOB
	)`
}

// The indexes end with seq implicitly: SQLite appends the rowid (seq) to
// every entry, and orders and looks up by it (TestQueryPlans).
var messagesIndexes = []string{
	`CREATE INDEX IF NOT EXISTS sy_messages_ready ON sy_messages (lane_id, dead, visible_at)`,
	`CREATE INDEX IF NOT EXISTS sy_messages_order ON sy_messages (lane_id, ord_key) WHERE ord_key <> ''`,
}

const dedupTable = `CREATE TABLE IF NOT EXISTS sy_dedup (
		ns TEXT NOT NULL, lane TEXT NOT NULL, tenant TEXT NOT NULL, key TEXT NOT NULL,
		id TEXT NOT NULL, expires_at INTEGER NOT NULL,
		PRIMARY KEY (ns, lane, tenant, key)
	) WITHOUT ROWID`

// schema creates the tables of schemaVersion where they are missing.
var schema = append([]string{lanesTable, messagesTable("sy_messages"), dedupTable}, messagesIndexes...)

// migrateV1 rebuilds a version 1 sy_messages without AUTOINCREMENT (version
// 2), keeping every row (seq, leases and dead letters included). SQLite
// cannot drop AUTOINCREMENT in place; dropping the old table drops its
// indexes and its sqlite_sequence row.
var migrateV1 = append([]string{
	messagesTableV2("sy_messages_v2"),
	`INSERT INTO sy_messages_v2 (` + messagesColumnsV2 + `) SELECT ` + messagesColumnsV2 + ` FROM sy_messages`,
	`DROP TABLE sy_messages`,
	`ALTER TABLE sy_messages_v2 RENAME TO sy_messages`,
}, messagesIndexesV2...)

// migrateV2 rebuilds a version 2 sy_messages with lane ids (version 3):
// every (ns, lane) of its rows gets a row in sy_lanes, and every message
// keeps its seq, attempts, lease (visible_at, lease_token) and dead letter.
var migrateV2 = append([]string{
	lanesTable,
	`INSERT OR IGNORE INTO sy_lanes (ns, lane) SELECT DISTINCT ns, lane FROM sy_messages ORDER BY ns, lane`,
	messagesTable("sy_messages_v3"),
	`INSERT INTO sy_messages_v3 (seq, lane_id, dead, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, visible_at, attempts, lease_token, dead_letter)
		SELECT m.seq, l.id, m.dead, m.id, m.kind, m.body, m.headers, m.tenant, m.idem_key, m.ord_key, m.run_at, m.enqueued_at, m.max_attempts, m.visible_at, m.attempts, m.lease_token, m.dead_letter
		FROM sy_messages m JOIN sy_lanes l ON l.ns = m.ns AND l.lane = m.lane`,
	`DROP TABLE sy_messages`,
	`ALTER TABLE sy_messages_v3 RENAME TO sy_messages`,
}, messagesIndexes...)

func migrate(ctx context.Context, db *sql.DB) error {
	// A quick read first: a file that is not SQLite fails here with a clear
	// error instead of deep inside a statement.
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil {
		return classifyOpen(err)
	}
	// The transaction is IMMEDIATE (the DSN's _txlock): a second process
	// opening the file at once waits here and then finds the version
	// written.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return classifyOpen(err)
	}
	defer tx.Rollback()
	exec := func(qs ...string) error {
		for _, q := range qs {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return classifyOpen(err)
			}
		}
		return nil
	}
	if err := exec(`CREATE TABLE IF NOT EXISTS sy_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`); err != nil {
		return err
	}
	var v string
	err = tx.QueryRowContext(ctx, `SELECT value FROM sy_meta WHERE key = 'schema_version'`).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// A new database: every version wrote its version with its tables.
		if err := exec(schema...); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO sy_meta (key, value) VALUES ('schema_version', ?)`, fmt.Sprint(schemaVersion)); err != nil {
			return classifyOpen(err)
		}
	case err != nil:
		return classifyOpen(err)
	case v == "1" || v == "2":
		if v == "1" {
			if err := exec(migrateV1...); err != nil {
				return err
			}
		}
		if err := exec(migrateV2...); err != nil {
			return err
		}
		if err := exec(schema...); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE sy_meta SET value = ? WHERE key = 'schema_version'`, fmt.Sprint(schemaVersion)); err != nil {
			return classifyOpen(err)
		}
	case v == fmt.Sprint(schemaVersion):
		if err := exec(schema...); err != nil {
			return err
		}
	default:
		return broker.Invalidf("embedded: database schema version %s is not supported by this build (which knows %d)", v, schemaVersion)
	}
	return classifyOpen(tx.Commit())
}

// txStmt returns query prepared once, bound to tx; a statement of
// lazyQueries not prepared yet is prepared for tx alone.
func (d *Driver) txStmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	st, err := d.shared.stmt(query)
	if err != nil {
		if lazyQueries[query] {
			return tx.PrepareContext(ctx, query)
		}
		return nil, err
	}
	return tx.StmtContext(ctx, st), nil
}

// laneID is the id of lane in the driver's namespace (sharedDB.laneID).
func (d *Driver) laneID(ctx context.Context, lane string, create bool) (int64, bool, error) {
	return d.shared.laneID(ctx, d.cfg.Namespace, lane, create)
}

func (d *Driver) wake(lane string) { d.shared.waker(d.cfg.Namespace, lane).broadcast() }

// preparedQueries are prepared at open: the single-row insert and the
// smallest ack are what a lone caller uses.
var preparedQueries = []string{receiveSQL, receiveUnorderedSQL, receiveDeadSQL, savepointSQL, releaseSQL, rollbackSQL,
	insertSQL[1], ackSQL[ackSizes[0]]}

// lazyQueries are prepared when a batch first needs them (sharedDB.prepare).
var lazyQueries = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range insertSizes {
		m[insertSQL[n]] = true
	}
	for _, n := range ackSizes {
		m[ackSQL[n]] = true
	}
	for _, q := range preparedQueries {
		delete(m, q)
	}
	return m
}()

// waker lets Receive calls sleep until a publish in this process.
type waker struct {
	mu sync.Mutex
	ch chan struct{}
}

func newWaker() *waker { return &waker{ch: make(chan struct{})} }

func (w *waker) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *waker) broadcast() {
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}
