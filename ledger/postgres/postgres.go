package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/front"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

func init() {
	ledger.Register("postgres", openURL)
	ledger.Register("postgresql", openURL)
}

// Options configures a Store. A nil *Options means the defaults.
type Options struct {
	// Schema is the PostgreSQL schema holding the ledger's tables; it is
	// created if missing and set as every connection's search_path. Empty
	// uses the server's search_path (normally "public"). 1–63 characters
	// of [a-z0-9_], starting with a letter or underscore.
	Schema string
	// DedupWindow is how long a dedup claim (broker.DedupStore) holds.
	// Defaults to 24h.
	DedupWindow time.Duration
	// OrderingStall is how long an ordering key waits for a number that
	// was assigned but never offered to a consumer before later numbers
	// may start without it (see Sequencer). Defaults to 30s.
	OrderingStall time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// NoGroupCommit turns group commit off: every write is its own
	// statement and commit (see group.go). By default the runtime's hot
	// writes that arrive together share one round trip and one commit,
	// through one writer goroutine per pool connection but one (left for
	// reads).
	// DSN: group_commit=false.
	NoGroupCommit bool
	// GroupWait is how long a write waits for the group writer that is
	// busy to take it in its next group before an idle writer starts a
	// group with it (group.go): the longest a write waits for a busy
	// connection while another is free. Longer waits make larger groups
	// and fewer commits under load; a write that arrives while no writer
	// is busy is sent at once whatever the wait. Defaults to 1ms; a
	// negative value means no wait (an idle writer takes every write at
	// once). DSN: group_wait=1ms (0 for no wait).
	GroupWait time.Duration
}

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Schema != "" && !schemaRE.MatchString(c.Schema) {
		return c, store.Invalid("postgres: open", "schema %q is not 1–63 characters of [a-z0-9_] starting with a letter or _", c.Schema)
	}
	if err := store.Defaults("postgres: open", &c.DedupWindow, &c.OrderingStall, &c.Now); err != nil {
		return c, err
	}
	switch {
	case c.GroupWait == 0:
		c.GroupWait = defaultGroupWait
	case c.GroupWait < 0:
		c.GroupWait = -1
	}
	return c, nil
}

// Store is the PostgreSQL ledger. Its methods are those of the interfaces it
// implements, documented there, and are shared with the SQLite store
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
	pool   *pgxpool.Pool
	opts   Options
	closed atomic.Bool
	g      *grouper // nil without group commit
	notes  notes    // ledger.Notes (notes.go)
	mark   marker   // the ledger's identity (outbox.go)
	// checked holds the pgx connections CreateTx has found on this
	// ledger's database (outbox.go); nChecked counts them.
	checked  sync.Map
	nChecked atomic.Int64
	// listen is the shared LISTEN connection of the relays (outbox.go);
	// listenStop is closed by Close.
	listen         listener
	listenStop     chan struct{}
	listenStopOnce sync.Once
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

// pgxParams are the DSN query parameters passed through to pgx.
var pgxParams = map[string]bool{
	"connect_timeout": true, "sslmode": true, "sslkey": true, "sslcert": true, "sslcertmode": true,
	"sslrootcert": true, "sslnegotiation": true, "sslpassword": true, "sslsni": true, "krbspn": true,
	"krbsrvname": true, "target_session_attrs": true, "service": true, "servicefile": true,
	"min_protocol_version": true, "max_protocol_version": true, "channel_binding": true, "require_auth": true,
	"passfile": true, "application_name": true,
	"pool_max_conns": true, "pool_min_conns": true, "pool_min_idle_conns": true, "pool_max_conn_lifetime": true,
	"pool_max_conn_idle_time": true, "pool_health_check_period": true, "pool_max_conn_lifetime_jitter": true,
	"pool_ping_timeout":        true,
	"statement_cache_capacity": true, "description_cache_capacity": true, "default_query_exec_mode": true,
}

// openURL is the registered opener: it takes the ledger's own parameters
// (schema, dedup_window) off the DSN and hands the rest to pgx.
func openURL(ctx context.Context, u *url.URL) (ledger.Ledger, error) {
	vals := u.Query()
	mine := url.Values{}
	var unknown []string
	for k, v := range vals {
		switch {
		case k == "schema" || k == "dedup_window" || k == "group_commit" || k == "group_wait":
			mine[k] = v
			delete(vals, k)
		case !pgxParams[k]:
			unknown = append(unknown, k)
		}
	}
	q := broker.NewQuery(&url.URL{RawQuery: mine.Encode()})
	o := Options{
		Schema:      q.String("schema", ""),
		DedupWindow: q.Duration("dedup_window", store.DefaultDedupWindow),
	}
	o.NoGroupCommit = !q.Bool("group_commit", true)
	o.GroupWait = q.Duration("group_wait", defaultGroupWait)
	if len(unknown) > 0 {
		sort.Strings(unknown)
		q.Errorf("unknown parameter(s) %s (the ledger's: schema, dedup_window, group_commit, group_wait; and pgx's connection and pool_* parameters)", strings.Join(unknown, ", "))
	}
	if err := q.Finish(); err != nil {
		return nil, broker.Invalidf("ledger DSN: %s", strings.TrimPrefix(err.Error(), "broker URL: "))
	}
	if o.DedupWindow <= 0 {
		return nil, broker.Invalidf("ledger DSN: dedup_window must be positive")
	}
	if o.GroupWait == 0 {
		o.GroupWait = -1 // no wait
	}
	c := *u
	c.RawQuery = vals.Encode()
	return Open(ctx, c.String(), &o)
}

// Open connects to the database named by the pgx connection string dsn
// (URL or key=value form) and applies the schema migrations. opts may be
// nil.
func Open(ctx context.Context, dsn string, opts *Options) (*Store, error) {
	const op = "postgres: open"
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors redact the password.
		return nil, &broker.Error{Op: op, Class: broker.Permanent, Kind: broker.ErrInvalid, Err: err}
	}
	if o.Schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = o.Schema
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, classify(op, err, false)
	}
	s := &Store{pool: pool, opts: o}
	front.Init(&s.ledgerFront, "postgres", backend{s}, &s.closed, o.Now)
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if !o.NoGroupCommit {
		s.startGroup(int(max(cfg.MaxConns-1, 1))) // one connection left for reads
	}
	return s, nil
}

// migrate applies the embedded migrations newer than the schema's
// ledger_schema_version in one transaction, under an advisory lock so that
// processes opening the same schema at once apply each migration once.
func (s *Store) migrate(ctx context.Context) error {
	const op = "postgres: open"
	ms, err := store.Migrations(migrationFS, "migrations")
	if err != nil {
		return &broker.Error{Op: op, Class: broker.Permanent, Err: err}
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "switchyard-ledger:"+s.opts.Schema); err != nil {
			return err
		}
		if s.opts.Schema != "" {
			ident := pgx.Identifier{s.opts.Schema}.Sanitize()
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+ident); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+ident); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS ledger_schema_version (
			version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)`); err != nil {
			return err
		}
		pending, err := pendingMigrations(ctx, tx, ms)
		if err != nil {
			return &broker.Error{Op: op, Class: broker.Permanent, Err: fmt.Errorf("the database: %w", err)}
		}
		for _, m := range pending {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO ledger_schema_version (version, name, applied_at) VALUES ($1, $2, $3)`,
				m.Version, m.Name, s.opts.Now()); err != nil {
				return err
			}
		}
		return nil
	})
	return classify(op, err, true)
}

// pendingMigrations returns the migrations of ms not yet recorded in tx's
// schema (store.Pending).
func pendingMigrations(ctx context.Context, tx pgx.Tx, ms []store.Migration) ([]store.Migration, error) {
	rows, err := tx.Query(ctx, `SELECT version FROM ledger_schema_version`)
	if err != nil {
		return nil, err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	vs := make([]int, len(applied))
	for i, v := range applied {
		vs[i] = int(v)
	}
	return store.Pending(ms, vs)
}

// SchemaVersion returns the schema version the database is at.
func (s backend) SchemaVersion(ctx context.Context, op string) (int, error) {
	var v int
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM ledger_schema_version`).Scan(&v)
	return v, classify(op, err, false)
}

func (s *Store) check(op string) error {
	if s.closed.Load() {
		return store.Closed(op)
	}
	return nil
}

// Close closes the connection pool, waiting for calls in progress. Calls
// after Close return broker.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.notes.once.Do(func() {})
	if s.notes.hub != nil {
		s.notes.hub.Close()
	}
	s.stopGroup()
	close(s.stopListen())
	s.pool.Close()
	return nil
}

// Pool returns the connection pool, for callers that need to run their
// own statements in the ledger's database.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

var (
	errNoRows  = pgx.ErrNoRows
	errRetries = errors.New("the claim kept changing under the call")
)

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }
