package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/fileperm"

	_ "modernc.org/sqlite"
)

func init() {
	broker.Register("embedded", openURL)
	broker.Register("mem", openURL)
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

// OpenConfig opens (creating if needed) the database described by cfg. A
// nil cfg means every default: the in-process database "default".
func OpenConfig(ctx context.Context, cfg *Config) (*Driver, error) {
	c := Config{Memory: true}
	if cfg != nil {
		c = *cfg
	}
	return open(ctx, c)
}

// Open opens (creating if needed) the database described by c.
//
// Deprecated: Use OpenConfig, the constructor every adapter has.
func Open(ctx context.Context, c Config) (*Driver, error) { return open(ctx, c) }

func open(ctx context.Context, c Config) (*Driver, error) {
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
		} else if errors.Is(err, os.ErrNotExist) && c.MustExist {
			return nil, broker.Wrap("open", broker.Permanent, fmt.Errorf("no such database: %s", abs))
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
	if be := (*broker.Error)(nil); errors.As(err, &be) {
		return err // classified already (an operation's own error through the writer)
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

func (d *Driver) nowNano() int64 { return d.cfg.Now().UnixNano() }

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

// InjectRaw stores a row that no publisher wrote — a corrupt message with
// garbage headers and no kind — on lane. Tests use it to prove that
// undecodable messages are dead-lettered, never delivered or retried.
func (d *Driver) InjectRaw(ctx context.Context, lane string, body []byte) error {
	laneID, _, err := d.laneID(ctx, lane, true)
	if err != nil {
		return classify("inject", err)
	}
	now := d.nowNano()
	_, err = d.db.ExecContext(ctx, `INSERT INTO sy_messages (lane_id, id, kind, body, headers, enqueued_at, visible_at) VALUES (?, ?, '', ?, ?, ?, ?)`,
		laneID, broker.NewID(), body, body, now, now)
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
			_, _ = d.db.ExecContext(ctx, `DELETE FROM sy_dedup WHERE ns = ? AND expires_at < ?`, d.cfg.Namespace, d.nowNano())
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
