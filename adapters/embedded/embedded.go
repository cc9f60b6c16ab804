package embedded

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/fileperm"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver
)

func init() {
	broker.Register("embedded", openURL)
	broker.Register("mem", openURL)
}

// Config configures a driver opened with Open. The zero value of each field
// means its default.
type Config struct {
	// Path is the database file. Empty with Memory set means in-process.
	Path string
	// Memory selects an in-process database named MemoryName (shared by
	// every driver of the process that opens the same name).
	Memory     bool
	MemoryName string
	// Namespace separates independent sets of lanes in one file. Defaults
	// to "default".
	Namespace string
	// DedupWindow is how long an idempotency key is remembered. Defaults to
	// 24h.
	DedupWindow time.Duration
	// MaxMessageSize is the largest Message.Size accepted. Defaults to
	// 1 MiB.
	MaxMessageSize int
	// Poll is how often a waiting Receive looks for messages published by
	// other processes or becoming due. Publishes in this process wake it at
	// once. Defaults to 25ms.
	Poll time.Duration
	// SyncFull makes every commit fsync the WAL (synchronous=FULL): nothing
	// is lost even on power failure. The default (synchronous=NORMAL) loses
	// nothing when the process is killed; a power failure may lose the last
	// commits.
	SyncFull bool
	// DefaultMaxAttempts limits deliveries of messages published with
	// MaxAttempts 0. Defaults to 25, like broker.Options.
	DefaultMaxAttempts int
	// Reduced makes the driver behave like a minimal broker: no native
	// ordering, deduplication or attempt limit, and delays of at most one
	// second. It exists to prove the framework's fallbacks with the
	// conformance suite; production code has no reason to set it.
	Reduced bool
	// Logger receives warnings (a database file others can read). Defaults
	// to slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	o := *c
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.DedupWindow <= 0 {
		o.DedupWindow = 24 * time.Hour
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = 1 << 20
	}
	if o.Poll <= 0 {
		o.Poll = 25 * time.Millisecond
	}
	if o.DefaultMaxAttempts <= 0 {
		o.DefaultMaxAttempts = 25
	}
	if o.MemoryName == "" {
		o.MemoryName = "default"
	}
	return o
}

func openURL(ctx context.Context, u *url.URL) (broker.Driver, error) {
	var c Config
	switch u.Scheme {
	case "mem":
		c.Memory = true
		c.MemoryName = u.Host
		if u.Path != "" && u.Path != "/" {
			return nil, broker.Invalidf("mem:// URL takes a name as host (mem://name), not a path %q", u.Path)
		}
	case "embedded":
		if u.Host != "" {
			// embedded://rel/path.db: host is the first path element.
			c.Path = u.Host + u.Path
		} else {
			c.Path = u.Path
		}
		if c.Path == "" || c.Path == "/" {
			return nil, broker.Invalidf("embedded:// URL needs a file path, e.g. embedded:///var/lib/app/switchyard.db or embedded://./switchyard.db")
		}
		c.Path = strings.TrimPrefix(c.Path, "./")
	default:
		return nil, broker.Invalidf("embedded driver cannot open scheme %q", u.Scheme)
	}
	q := broker.NewQuery(u)
	c.Namespace = q.String("namespace", "default")
	c.DedupWindow = q.Duration("dedup_window", 24*time.Hour)
	c.MaxMessageSize = q.Int("max_message_size", 1<<20)
	c.Poll = q.Duration("poll", 25*time.Millisecond)
	c.SyncFull = q.Bool("sync_full", false)
	c.Reduced = q.Bool("reduced", false)
	c.DefaultMaxAttempts = q.Int("default_max_attempts", 25)
	if err := q.Finish(); err != nil {
		return nil, err
	}
	if err := broker.ValidateName("namespace", c.Namespace); err != nil {
		return nil, err
	}
	if c.MaxMessageSize <= 0 {
		return nil, broker.Invalidf("max_message_size must be positive")
	}
	return Open(ctx, c)
}

// Driver is the embedded broker: a queue in a SQLite database.
type Driver struct {
	cfg    Config
	db     *sql.DB
	shared *sharedDB
	closed atomic.Bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

var (
	_ broker.Driver   = (*Driver)(nil)
	_ broker.Releaser = (*Driver)(nil)
)

// Open opens (creating if needed) the database described by c.
func Open(ctx context.Context, c Config) (*Driver, error) {
	c = c.withDefaults()
	var key, dsn string
	if c.Memory {
		key = "mem:" + c.MemoryName
		// A named in-memory database lives as long as a connection to it
		// does; sharedDB keeps one open while any driver uses it.
		dsn = "file:" + url.PathEscape("switchyard-"+c.MemoryName) + "?mode=memory&cache=shared&_pragma=busy_timeout(10000)&_txlock=immediate"
	} else {
		// The path goes into a SQLite URI: ?, # and % are escaped there
		// (uriPath); NUL and control characters are refused.
		if strings.ContainsFunc(c.Path, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, broker.Invalidf("embedded: database path %q contains a NUL or control character", c.Path)
		}
		abs, err := filepath.Abs(c.Path)
		if err != nil {
			return nil, broker.Invalidf("embedded: bad path: %v", err)
		}
		if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
			return nil, broker.Invalidf("embedded: %s is a directory, not a database file", abs)
		}
		// A file that exists must be a Switchyard database (or empty): it
		// is refused, untouched, otherwise.
		if err := checkExisting(ctx, abs); err != nil {
			return nil, err
		}
		// A new database is created 0600 in a 0700 directory (SQLite gives
		// its -wal and -shm files the database's mode); wider existing
		// ones are reported.
		if err := fileperm.Prepare(abs, "embedded broker", true, c.Logger); err != nil {
			return nil, broker.Wrap("open", broker.Permanent, fmt.Errorf("embedded: %w", err))
		}
		key = "file:" + abs
		sync := "NORMAL"
		if c.SyncFull {
			sync = "FULL"
		}
		dsn = "file:" + uriPath(abs) + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(" + sync + ")&_txlock=immediate"
	}
	s, err := acquireShared(ctx, key, dsn, c.Memory)
	if err != nil {
		return nil, err
	}
	d := &Driver{cfg: c, db: s.db, shared: s, stop: make(chan struct{})}
	d.wg.Add(1)
	go d.janitor()
	return d, nil
}

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
	db, err := sql.Open("sqlite", "file:"+uriPath(abs)+"?mode=ro")
	if err != nil {
		return classifyOpen(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		return classifyOpen(err)
	}
	defer rows.Close()
	var names []string
	ours := false
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return classifyOpen(err)
		}
		ours = ours || name == "sy_meta"
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
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
	wakers map[string]*waker    // per namespace and lane, under mu
	stmts  map[string]*sql.Stmt // prepared at open, read-only after
}

// waker returns the waker of (ns, lane).
func (s *sharedDB) waker(ns, lane string) *waker {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := ns + "\x00" + lane
	w := s.wakers[k]
	if w == nil {
		w = newWaker()
		s.wakers[k] = w
	}
	return w
}

// stmt returns query prepared on the database at open (parsing the receive
// query costs more than running it). Every query the driver runs often is
// in preparedQueries; preparing lazily could deadlock on the single
// connection while a transaction holds it.
func (s *sharedDB) stmt(query string) (*sql.Stmt, error) {
	if st := s.stmts[query]; st != nil {
		return st, nil
	}
	return nil, fmt.Errorf("embedded: statement not prepared: %.40s", query)
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
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	s := &sharedDB{key: key, db: db, refs: 1, memory: memory, wakers: map[string]*waker{}, stmts: map[string]*sql.Stmt{}}
	for _, q := range preparedQueries {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			db.Close()
			return nil, classifyOpen(err)
		}
		s.stmts[q] = st
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
	for _, st := range s.stmts {
		st.Close()
	}
	return s.db.Close()
}

const schemaVersion = 1

var schema = []string{
	`CREATE TABLE IF NOT EXISTS sy_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS sy_messages (
		seq          INTEGER PRIMARY KEY AUTOINCREMENT,
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
	)`,
	`CREATE INDEX IF NOT EXISTS sy_messages_ready ON sy_messages (ns, lane, dead, visible_at, seq)`,
	`CREATE INDEX IF NOT EXISTS sy_messages_order ON sy_messages (ns, lane, ord_key, seq) WHERE ord_key <> ''`,
	`CREATE TABLE IF NOT EXISTS sy_dedup (
		ns TEXT NOT NULL, lane TEXT NOT NULL, tenant TEXT NOT NULL, key TEXT NOT NULL,
		id TEXT NOT NULL, expires_at INTEGER NOT NULL,
		PRIMARY KEY (ns, lane, tenant, key)
	) WITHOUT ROWID`,
}

func migrate(ctx context.Context, db *sql.DB) error {
	// A quick read first: a file that is not SQLite fails here with a clear
	// error instead of deep inside a statement.
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil {
		return classifyOpen(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return classifyOpen(err)
	}
	defer tx.Rollback()
	for _, s := range schema {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return classifyOpen(err)
		}
	}
	var v string
	err = tx.QueryRowContext(ctx, `SELECT value FROM sy_meta WHERE key = 'schema_version'`).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, `INSERT INTO sy_meta (key, value) VALUES ('schema_version', ?)`, fmt.Sprint(schemaVersion)); err != nil {
			return classifyOpen(err)
		}
	case err != nil:
		return classifyOpen(err)
	case v != fmt.Sprint(schemaVersion):
		return broker.Invalidf("embedded: database schema version %s is not supported by this build (which knows %d)", v, schemaVersion)
	}
	return classifyOpen(tx.Commit())
}

func classifyOpen(err error) error {
	if err == nil {
		return nil
	}
	s := err.Error()
	if strings.Contains(s, "not a database") || strings.Contains(s, "malformed") || strings.Contains(s, "file is encrypted") {
		return broker.Invalidf("embedded: the file is not a Switchyard SQLite database or is corrupt: %v", err)
	}
	return classify("open", err)
}

// classify maps SQLite errors: busy and locked are transient; anything
// else from the database is transient too (a full disk may clear), except
// corruption, which is permanent.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if broker.IsContext(err) {
		return broker.Wrap(op, broker.Transient, err)
	}
	s := err.Error()
	switch {
	case strings.Contains(s, "malformed"), strings.Contains(s, "not a database"):
		return broker.Wrap(op, broker.Permanent, err)
	case strings.Contains(s, "database is closed"), strings.Contains(s, "sql: database is closed"):
		return broker.ClosedError(op)
	}
	return broker.Wrap(op, broker.Transient, err)
}

// Capabilities implements broker.Driver: the embedded broker does everything
// natively.
func (d *Driver) Capabilities() broker.Capabilities {
	if d.cfg.Reduced {
		return broker.Capabilities{
			MaxDelay:          time.Second,
			LeaseExtension:    true,
			DeadLetterReasons: true,
			MaxMessageSize:    d.cfg.MaxMessageSize,
			MaxBatch:          10,
			OldestReadyAge:    true,
		}
	}
	return broker.Capabilities{
		MaxDelay:          0,
		LeaseExtension:    true,
		Dedup:             true,
		DedupWindow:       d.cfg.DedupWindow,
		Ordering:          true,
		DeadLetterReasons: true,
		MaxAttempts:       true,
		MaxMessageSize:    d.cfg.MaxMessageSize,
		MaxBatch:          500,
		OldestReadyAge:    true,
	}
}

func nowNano() int64 { return time.Now().UnixNano() }

func nano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return broker.UnixNano(t) // clamped, never wrapped
}

func fromNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// txStmt returns query prepared once, bound to tx.
func (d *Driver) txStmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	st, err := d.shared.stmt(query)
	if err != nil {
		return nil, err
	}
	return tx.StmtContext(ctx, st), nil
}

func (d *Driver) wake(lane string) { d.shared.waker(d.cfg.Namespace, lane).broadcast() }

const ackSQL = `DELETE FROM sy_messages WHERE (seq, lease_token) IN
	(SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?1))
RETURNING seq`

var preparedQueries = []string{insertSQL, ackSQL, receiveSQL, receiveUnorderedSQL, receiveDeadSQL}

const insertSQL = `INSERT INTO sy_messages
		(ns, lane, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, visible_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// Publish implements broker.Driver.
func (d *Driver) Publish(ctx context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	if d.closed.Load() {
		return nil, broker.ClosedError("publish")
	}
	res := make([]broker.PublishResult, len(msgs))
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, classify("publish", err)
	}
	defer tx.Rollback()
	ins, err := d.txStmt(ctx, tx, insertSQL)
	if err != nil {
		return nil, classify("publish", err)
	}
	now := nowNano()
	for i, m := range msgs {
		res[i].ID = m.ID
		if m.IdempotencyKey != "" && !d.cfg.Reduced {
			var id string
			var exp int64
			err := tx.QueryRowContext(ctx, `SELECT id, expires_at FROM sy_dedup WHERE ns = ? AND lane = ? AND tenant = ? AND key = ?`,
				d.cfg.Namespace, m.Lane, m.Tenant, m.IdempotencyKey).Scan(&id, &exp)
			if err == nil && exp > now {
				res[i] = broker.PublishResult{ID: id, Duplicate: true}
				continue
			}
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return nil, classify("publish", err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO sy_dedup (ns, lane, tenant, key, id, expires_at) VALUES (?, ?, ?, ?, ?, ?)`,
				d.cfg.Namespace, m.Lane, m.Tenant, m.IdempotencyKey, m.ID, now+int64(d.cfg.DedupWindow)); err != nil {
				return nil, classify("publish", err)
			}
		}
		var hdr []byte
		if len(m.Headers) > 0 {
			hdr, _ = json.Marshal(m.Headers)
		}
		visible := now
		if rn := nano(m.RunAt); rn > visible {
			visible = rn
		}
		if _, err := ins.ExecContext(ctx, d.cfg.Namespace, m.Lane, m.ID, m.Kind, m.Body, hdr, m.Tenant, m.IdempotencyKey, m.OrderingKey,
			nano(m.RunAt), nano(m.EnqueuedAt), m.MaxAttempts, visible); err != nil {
			return nil, classify("publish", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, classify("publish", err)
	}
	woken := map[string]bool{}
	for _, m := range msgs {
		if !woken[m.Lane] {
			woken[m.Lane] = true
			d.wake(m.Lane)
		}
	}
	return res, nil
}

// handle is the driver's per-delivery reference.
type handle struct {
	seq   int64
	token int64
}

func newToken() int64 {
	for {
		if t := rand.Int64(); t != 0 {
			return t
		}
	}
}

// The receive queries cap the attempt count before adding one: a tampered
// row's count would otherwise overflow to a REAL that no longer scans, and
// fail every Receive of the lane.
//
// The receive statements' LIMIT is "?6 + 0", not "?6": SQLite (3.50 with
// STAT4) marks a bare LIMIT parameter as plan-relevant, so binding it on
// every call expired the prepared statement, which was then re-prepared on
// its next step (sqlite3Reprepare: about a tenth of the runtime's CPU). An
// expression is not inspected, so the statement stays prepared.
const receiveSQL = `UPDATE sy_messages SET attempts = MIN(attempts, 2147483646) + 1, lease_token = ?1, visible_at = ?2
WHERE seq IN (
	SELECT seq FROM sy_messages m
	WHERE m.ns = ?3 AND m.lane = ?4 AND m.dead = 0 AND m.visible_at <= ?5
	  AND (m.ord_key = '' OR NOT EXISTS (
		SELECT 1 FROM sy_messages p
		WHERE p.ns = m.ns AND p.lane = m.lane AND p.ord_key = m.ord_key AND p.seq < m.seq AND p.dead = 0))
	ORDER BY m.visible_at, m.seq
	LIMIT ?6 + 0)
RETURNING seq, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, attempts`

const receiveUnorderedSQL = `UPDATE sy_messages SET attempts = MIN(attempts, 2147483646) + 1, lease_token = ?1, visible_at = ?2
WHERE seq IN (
	SELECT seq FROM sy_messages m
	WHERE m.ns = ?3 AND m.lane = ?4 AND m.dead = 0 AND m.visible_at <= ?5
	ORDER BY m.visible_at, m.seq
	LIMIT ?6 + 0)
RETURNING seq, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, attempts`

const receiveDeadSQL = `UPDATE sy_messages SET lease_token = ?1, visible_at = ?2
WHERE seq IN (
	SELECT seq FROM sy_messages m
	WHERE m.ns = ?3 AND m.lane = ?4 AND m.dead = 1 AND m.visible_at <= ?5
	ORDER BY m.seq
	LIMIT ?6 + 0)
RETURNING seq, id, kind, body, headers, tenant, idem_key, ord_key, run_at, enqueued_at, max_attempts, attempts, dead_letter`

// Receive implements broker.Driver. It waits for a publish in this process
// or polls every Config.Poll for messages from other processes and
// messages becoming due.
func (d *Driver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	var deadline time.Time
	if req.Wait > 0 {
		deadline = time.Now().Add(req.Wait)
	}
	for {
		if d.closed.Load() {
			return nil, broker.ClosedError("receive")
		}
		ch := d.shared.waker(d.cfg.Namespace, req.Lane).wait()
		ds, err := d.receiveOnce(ctx, req)
		if err != nil || len(ds) > 0 || req.Wait <= 0 {
			return ds, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		t := time.NewTimer(min(left, d.cfg.Poll))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, broker.Wrap("receive", broker.Transient, ctx.Err())
		case <-d.stop:
			t.Stop()
			return nil, broker.ClosedError("receive")
		case <-ch:
			t.Stop()
		case <-t.C:
		}
	}
}

func (d *Driver) receiveOnce(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	now := nowNano()
	token := newToken()
	leaseEnd := now + int64(req.Lease)
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, d.receiveErr(ctx, err)
	}
	defer tx.Rollback()
	q := receiveSQL
	if d.cfg.Reduced {
		q = receiveUnorderedSQL
	}
	if req.DeadLetters {
		q = receiveDeadSQL
	}
	st, err := d.txStmt(ctx, tx, q)
	if err != nil {
		return nil, d.receiveErr(ctx, err)
	}
	rows, err := st.QueryContext(ctx, token, leaseEnd, d.cfg.Namespace, req.Lane, now, req.Max)
	if err != nil {
		return nil, d.receiveErr(ctx, err)
	}
	var out []*broker.Delivery
	type bad struct {
		seq int64
		dl  *broker.DeadLetter
	}
	var toDead []bad
	for rows.Next() {
		var (
			seq, runAt, enq, maxAtt, attempts int64
			id, kind, tenant, idem, ord       string
			body, hdr, dlb                    []byte
		)
		dest := []any{&seq, &id, &kind, &body, &hdr, &tenant, &idem, &ord, &runAt, &enq, &maxAtt, &attempts}
		if req.DeadLetters {
			dest = append(dest, &dlb)
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return nil, d.receiveErr(ctx, err)
		}
		dv := &broker.Delivery{
			Message: broker.Message{
				ID: id, Lane: req.Lane, Kind: kind, Body: body, Tenant: tenant, IdempotencyKey: idem, OrderingKey: ord,
				RunAt: fromNano(runAt), EnqueuedAt: fromNano(enq), MaxAttempts: int(maxAtt),
			},
			Attempt:       int(attempts),
			LeaseDeadline: fromNano(leaseEnd),
			Handle:        handle{seq: seq, token: token},
		}
		var decodeErr error
		if len(hdr) > 0 {
			decodeErr = json.Unmarshal(hdr, &dv.Headers)
		}
		if decodeErr == nil {
			decodeErr = broker.ValidateName("kind", kind)
		}
		if decodeErr == nil {
			// A row written behind the framework's back (or tampered
			// with): a bad ID would loop in the runtime, whose ledger
			// refuses it.
			decodeErr = broker.CheckDecoded(&dv.Message)
		}
		if req.DeadLetters {
			if len(dlb) > 0 {
				dl, err := broker.DecodeDeadLetter(dlb)
				if err != nil {
					dl = &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: err.Error()}
				} else if dl.Reason == "" {
					dl.Reason = broker.ReasonUndecodable // a dead letter always has a reason
				}
				dv.DeadLetter = dl
			} else {
				dv.DeadLetter = &broker.DeadLetter{Reason: broker.ReasonUndecodable}
			}
			out = append(out, dv)
			continue
		}
		switch {
		case decodeErr != nil:
			toDead = append(toDead, bad{seq, &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: "undecodable message: " + decodeErr.Error(), At: time.Now().UTC()}})
		case attempts > limitOr(maxAtt, d.cfg.DefaultMaxAttempts) && !d.cfg.Reduced:
			toDead = append(toDead, bad{seq, &broker.DeadLetter{Reason: broker.ReasonMaxAttempts,
				Error: fmt.Sprintf("attempt %d exceeds the limit of %d", attempts, limitOr(maxAtt, d.cfg.DefaultMaxAttempts)), At: time.Now().UTC(),
				Attempts: []broker.AttemptRecord{{Attempt: int(attempts - 1), Error: "lease expired or nacked"}}}})
		default:
			out = append(out, dv)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, d.receiveErr(ctx, err)
	}
	rows.Close()
	for _, b := range toDead {
		enc, _ := broker.EncodeDeadLetter(b.dl)
		if _, err := tx.ExecContext(ctx, `UPDATE sy_messages SET dead = 1, lease_token = 0, visible_at = ?, dead_letter = ? WHERE seq = ?`,
			now, enc, b.seq); err != nil {
			return nil, d.receiveErr(ctx, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, d.receiveErr(ctx, err)
	}
	if err := ctx.Err(); err != nil && len(out) > 0 {
		// Cancelled after the lease was taken: a caller that gave up may
		// drop the deliveries, so give them back unspent first.
		rel := context.WithoutCancel(ctx)
		q := `UPDATE sy_messages SET visible_at = ?, lease_token = 0, attempts = MAX(attempts - 1, 0) WHERE seq = ? AND lease_token = ?`
		if req.DeadLetters {
			q = `UPDATE sy_messages SET visible_at = ?, lease_token = 0 WHERE seq = ? AND lease_token = ?`
		}
		for _, dv := range out {
			h := dv.Handle.(handle)
			if rerr := d.exec(rel, "receive", dv, q, now, h.seq, h.token); rerr != nil {
				return nil, d.receiveErr(ctx, rerr) // it comes back when its lease ends
			}
		}
		d.wake(req.Lane)
		return nil, broker.Wrap("receive", broker.Transient, err)
	}
	return out, nil
}

// receiveErr classifies a receive error; once ctx has ended it is the
// context's error (database/sql rolls the transaction back when the context
// ends, and later calls on it fail with sql.ErrTxDone, which is not the
// cause).
func (d *Driver) receiveErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return broker.Wrap("receive", broker.Transient, cerr)
	}
	return classify("receive", err)
}

func limitOr(n int64, def int) int64 {
	if n > 0 {
		return n
	}
	return int64(def)
}

func handleOf(op string, dv *broker.Delivery) (handle, error) {
	if dv == nil {
		return handle{}, broker.Invalidf("%s: nil delivery", op)
	}
	h, ok := dv.Handle.(handle)
	if !ok {
		return handle{}, broker.Invalidf("%s: delivery %s was not received from the embedded broker", op, dv.ID)
	}
	return h, nil
}

// Ack implements broker.Driver.
func (d *Driver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	if d.closed.Load() {
		return broker.ClosedError("ack")
	}
	if len(ds) == 0 {
		return nil
	}
	// One statement for the whole batch: the (seq, token) pairs travel as a
	// JSON array, so the statement stays prepared whatever the batch size.
	pairs := make([]byte, 0, 40*len(ds))
	pairs = append(pairs, '[')
	want := make(map[int64]string, len(ds))
	for i, dv := range ds {
		h, err := handleOf("ack", dv)
		if err != nil {
			return err
		}
		if i > 0 {
			pairs = append(pairs, ',')
		}
		pairs = fmt.Appendf(pairs, "[%d,%d]", h.seq, h.token)
		want[h.seq] = dv.ID
	}
	pairs = append(pairs, ']')
	st, err := d.shared.stmt(ackSQL)
	if err != nil {
		return classify("ack", err)
	}
	rows, err := st.QueryContext(ctx, string(pairs))
	if err != nil {
		return classify("ack", err)
	}
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			rows.Close()
			return classify("ack", err)
		}
		delete(want, seq)
	}
	if err := rows.Err(); err != nil {
		return classify("ack", err)
	}
	rows.Close()
	if len(want) > 0 {
		lost := make([]string, 0, len(want))
		for _, id := range want {
			lost = append(lost, id)
		}
		return broker.LeaseLostError("ack", strings.Join(lost, ","))
	}
	return nil
}

// exec runs one guarded single-row update and reports ErrLeaseLost when the
// guard matched nothing.
func (d *Driver) exec(ctx context.Context, op string, dv *broker.Delivery, q string, args ...any) error {
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	r, err := d.db.ExecContext(ctx, q, args...)
	if err != nil {
		return classify(op, err)
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return broker.LeaseLostError(op, dv.ID)
	}
	return nil
}

// Nack implements broker.Driver.
func (d *Driver) Nack(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	h, err := handleOf("nack", dv)
	if err != nil {
		return err
	}
	err = d.exec(ctx, "nack", dv, `UPDATE sy_messages SET visible_at = ?, lease_token = 0 WHERE seq = ? AND lease_token = ?`,
		nowNano()+int64(delay), h.seq, h.token)
	if err == nil && delay <= d.cfg.Poll {
		d.wake(dv.Lane)
	}
	return err
}

// Release implements broker.Releaser: the message becomes deliverable after
// delay and its next delivery keeps the same attempt number.
func (d *Driver) Release(ctx context.Context, dv *broker.Delivery, delay time.Duration) error {
	h, err := handleOf("release", dv)
	if err != nil {
		return err
	}
	err = d.exec(ctx, "release", dv, `UPDATE sy_messages SET visible_at = ?, lease_token = 0, attempts = MAX(attempts - 1, 0) WHERE seq = ? AND lease_token = ?`,
		nowNano()+int64(delay), h.seq, h.token)
	if err == nil && delay <= d.cfg.Poll {
		d.wake(dv.Lane)
	}
	return err
}

// Extend implements broker.Driver.
func (d *Driver) Extend(ctx context.Context, ds []*broker.Delivery, lease time.Duration) error {
	if d.closed.Load() {
		return broker.ClosedError("extend")
	}
	end := nowNano() + int64(lease)
	var lost []string
	for _, dv := range ds {
		h, err := handleOf("extend", dv)
		if err != nil {
			return err
		}
		r, err := d.db.ExecContext(ctx, `UPDATE sy_messages SET visible_at = ? WHERE seq = ? AND lease_token = ?`, end, h.seq, h.token)
		if err != nil {
			return classify("extend", err)
		}
		if n, _ := r.RowsAffected(); n == 0 {
			lost = append(lost, dv.ID)
			continue
		}
		dv.LeaseDeadline = fromNano(end)
	}
	if len(lost) > 0 {
		return broker.LeaseLostError("extend", strings.Join(lost, ","))
	}
	return nil
}

// DeadLetter implements broker.Driver.
func (d *Driver) DeadLetter(ctx context.Context, dv *broker.Delivery, dl *broker.DeadLetter) error {
	h, err := handleOf("dead-letter", dv)
	if err != nil {
		return err
	}
	enc, err := broker.EncodeDeadLetter(dl)
	if err != nil {
		return broker.Wrap("dead-letter", broker.Permanent, err)
	}
	return d.exec(ctx, "dead-letter", dv, `UPDATE sy_messages SET dead = 1, lease_token = 0, visible_at = ?, dead_letter = ? WHERE seq = ? AND lease_token = ? AND dead = 0`,
		nowNano(), enc, h.seq, h.token)
}

// Replay implements broker.Driver.
func (d *Driver) Replay(ctx context.Context, dv *broker.Delivery) error {
	h, err := handleOf("replay", dv)
	if err != nil {
		return err
	}
	err = d.exec(ctx, "replay", dv, `UPDATE sy_messages SET dead = 0, attempts = 0, lease_token = 0, visible_at = ?, dead_letter = NULL WHERE seq = ? AND lease_token = ? AND dead = 1`,
		nowNano(), h.seq, h.token)
	if err == nil {
		d.wake(dv.Lane)
	}
	return err
}

// Stats implements broker.Driver.
func (d *Driver) Stats(ctx context.Context, lane string) (broker.Stats, error) {
	if d.closed.Load() {
		return broker.Stats{}, broker.ClosedError("stats")
	}
	now := nowNano()
	var ready, inflight, delayed, dead sql.NullInt64
	var oldest sql.NullInt64
	err := d.db.QueryRowContext(ctx, `SELECT
		SUM(dead = 0 AND visible_at <= ?1),
		SUM(dead = 0 AND visible_at > ?1 AND lease_token <> 0),
		SUM(dead = 0 AND visible_at > ?1 AND lease_token = 0),
		SUM(dead = 1),
		MIN(CASE WHEN dead = 0 AND visible_at <= ?1 THEN visible_at END)
		FROM sy_messages WHERE ns = ?2 AND lane = ?3`, now, d.cfg.Namespace, lane).Scan(&ready, &inflight, &delayed, &dead, &oldest)
	if err != nil {
		return broker.Stats{}, classify("stats", err)
	}
	s := broker.Stats{Lane: lane, Ready: ready.Int64, InFlight: inflight.Int64, Delayed: delayed.Int64, DeadLettered: dead.Int64}
	if oldest.Valid && oldest.Int64 > 0 {
		s.OldestReady = time.Duration(now - oldest.Int64)
	}
	return s, nil
}

// Lanes lists the lanes that have messages in this namespace, live or dead.
func (d *Driver) Lanes(ctx context.Context) ([]string, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT DISTINCT lane FROM sy_messages WHERE ns = ? ORDER BY lane`, d.cfg.Namespace)
	if err != nil {
		return nil, classify("lanes", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return nil, classify("lanes", err)
		}
		out = append(out, l)
	}
	return out, classify("lanes", rows.Err())
}

// InjectRaw stores a row that no publisher wrote — a corrupt message with
// garbage headers and no kind — on lane. Tests use it to prove that
// undecodable messages are dead-lettered, never delivered or retried.
func (d *Driver) InjectRaw(ctx context.Context, lane string, body []byte) error {
	now := nowNano()
	_, err := d.db.ExecContext(ctx, `INSERT INTO sy_messages (ns, lane, id, kind, body, headers, enqueued_at, visible_at) VALUES (?, ?, ?, '', ?, ?, ?, ?)`,
		d.cfg.Namespace, lane, broker.NewID(), body, body, now, now)
	d.wake(lane)
	return classify("inject", err)
}

// janitor deletes expired deduplication records once a minute.
func (d *Driver) janitor() {
	defer d.wg.Done()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _ = d.db.ExecContext(ctx, `DELETE FROM sy_dedup WHERE ns = ? AND expires_at < ?`, d.cfg.Namespace, nowNano())
			cancel()
		}
	}
}

// Close implements broker.Driver. Leased messages become deliverable again
// when their leases end.
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	close(d.stop)
	d.wg.Wait()
	return releaseShared(d.shared)
}

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

// OpenURL opens a driver from an embedded:// or mem:// URL.
func OpenURL(ctx context.Context, rawURL string) (*Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, broker.Invalidf("embedded: URL does not parse")
	}
	d, err := openURL(ctx, u)
	if err != nil {
		return nil, err
	}
	return d.(*Driver), nil
}
