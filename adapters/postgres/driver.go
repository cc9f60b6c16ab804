package postgres

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-dev/switchyard/broker"
)

func init() {
	// The broker's registry is not the ledger's (ledger.Register): the same
	// scheme names a queue for broker.Open and a ledger for ledger.Open.
	broker.Register("postgres", openURL)
	broker.Register("postgresql", openURL)
}

func openURL(ctx context.Context, u *url.URL) (broker.Driver, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	return open(ctx, c)
}

// ParseURL reads a postgres:// or postgresql:// broker URL (see the
// package documentation). Errors match broker.ErrInvalid and never quote
// the password.
func ParseURL(u *url.URL) (*Config, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// OpenURL opens a driver from a postgres:// broker URL.
func OpenURL(ctx context.Context, rawURL string) (*Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the URL, password included: drop it.
		return nil, broker.Invalidf("postgres broker: URL does not parse")
	}
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	return open(ctx, c)
}

// DefaultPoolMaxConns is the pool's size unless the URL's pool_max_conns
// says otherwise; the driver also holds one listening connection outside
// the pool.
const DefaultPoolMaxConns = 16

// Driver is the PostgreSQL broker: queues in tables of one schema.
type Driver struct {
	cfg     Config
	pool    *pgxpool.Pool
	q       queries
	channel string

	closed atomic.Bool
	stop   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	wakers map[string]*waker // per lane
}

var (
	_ broker.Driver             = (*Driver)(nil)
	_ broker.Releaser           = (*Driver)(nil)
	_ broker.NackErrorer        = (*Driver)(nil)
	_ broker.LaneLister         = (*Driver)(nil)
	_ broker.PublishConcurrency = (*Driver)(nil)
)

// OpenConfig connects to the database of cfg.DSN, creates or checks the
// broker's schema and starts listening for publishes.
func OpenConfig(ctx context.Context, cfg *Config) (*Driver, error) {
	if cfg == nil {
		return nil, broker.Invalidf("postgres broker: nil config")
	}
	return open(ctx, *cfg)
}

// Open connects to the database of c.DSN, creates or checks the broker's
// schema and starts listening for publishes.
//
// Deprecated: Use OpenConfig, the constructor every adapter has.
func Open(ctx context.Context, c Config) (*Driver, error) { return open(ctx, c) }

func open(ctx context.Context, c Config) (*Driver, error) {
	const op = "postgres broker: open"
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(c.DSN)
	if err != nil {
		// pgx's parse errors redact the password.
		return nil, &broker.Error{Op: op, Class: broker.Permanent, Kind: broker.ErrInvalid, Err: err}
	}
	if !strings.Contains(c.DSN, "pool_max_conns") {
		// pgx's default (the larger of 4 and the CPUs) is small for a
		// queue: publishes, receives of every lane, acks and extends all
		// take a connection, and more commits in flight share WAL
		// flushes.
		pc.MaxConns = DefaultPoolMaxConns
	}
	if _, ok := pc.ConnConfig.RuntimeParams["application_name"]; !ok {
		pc.ConnConfig.RuntimeParams["application_name"] = "switchyard-broker"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, classify(op, err, false)
	}
	d := &Driver{cfg: c, pool: pool, q: newQueries(c.Schema), channel: channelFor(c.Schema), stop: make(chan struct{}), wakers: map[string]*waker{}}
	// A server that is not there fails here, not at the first publish.
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, classify(op, err, false)
	}
	if err := d.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	d.wg.Add(2)
	go d.listen(pc.ConnConfig.Copy())
	go d.janitor()
	return d, nil
}

// Capabilities implements broker.Driver: everything is native.
func (d *Driver) Capabilities() broker.Capabilities {
	return broker.Capabilities{
		MaxDelay:          0,
		MaxLease:          0,
		LeaseExtension:    true,
		Dedup:             true,
		DedupWindow:       d.cfg.DedupWindow,
		Ordering:          true,
		DeadLetterReasons: true,
		MaxAttempts:       true,
		MaxMessageSize:    d.cfg.MaxMessageSize,
		MaxBatch:          d.cfg.MaxBatch,
		OldestReadyAge:    true,
	}
}

// MaxConcurrentPublishes implements broker.PublishConcurrency: every
// publish is a commit (a WAL flush); publishes that arrive while half of
// the pool is publishing go out together in one statement.
func (d *Driver) MaxConcurrentPublishes() int { return max(int(d.pool.Config().MaxConns)/2, 1) }

// Schema returns the schema holding the driver's tables.
func (d *Driver) Schema() string { return d.cfg.Schema }

// Pool returns the driver's connection pool.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Close implements broker.Driver. Leased messages become deliverable again
// when their leases end.
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	close(d.stop)
	d.wg.Wait()
	d.pool.Close()
	return nil
}

func (d *Driver) check(op string) error {
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	return nil
}

// VacuumThreshold is the number of dead tuples in the queue table past
// which the driver vacuums it (Config.Vacuum); the table's autovacuum
// threshold is the same.
const VacuumThreshold = 10000

// janitor deletes expired deduplication records once a minute and, every
// Config.Vacuum, vacuums the queue table when its dead tuples passed
// VacuumThreshold.
func (d *Driver) janitor() {
	defer d.wg.Done()
	dedup := time.NewTicker(time.Minute)
	defer dedup.Stop()
	var vacuum <-chan time.Time
	if d.cfg.Vacuum > 0 {
		t := time.NewTicker(d.cfg.Vacuum)
		defer t.Stop()
		vacuum = t.C
	}
	for {
		select {
		case <-d.stop:
			return
		case <-dedup.C:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _ = d.pool.Exec(ctx, d.q.dedupExpire)
			cancel()
		case <-vacuum:
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, _ = d.VacuumIfNeeded(ctx)
			cancel()
		}
	}
}

// VacuumIfNeeded vacuums the queue table when the server's statistics
// count more than VacuumThreshold dead tuples in it, unless another
// process of the schema is doing it; it reports whether it vacuumed.
func (d *Driver) VacuumIfNeeded(ctx context.Context) (bool, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return false, classify("vacuum", err, false)
	}
	defer conn.Release()
	var dead int64
	err = conn.QueryRow(ctx, `SELECT coalesce(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relid = to_regclass($1)`, d.cfg.Schema+".sy_queue").Scan(&dead)
	if err != nil || dead < VacuumThreshold {
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		return false, classify("vacuum", err, false)
	}
	var got bool
	lock := "switchyard-broker-vacuum:" + d.cfg.Schema
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, lock).Scan(&got); err != nil || !got {
		return false, classify("vacuum", err, false)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, lock)
	}()
	_, err = conn.Exec(ctx, sqlFor(d.cfg.Schema, `VACUUM {s}.sy_queue`), pgx.QueryExecModeSimpleProtocol)
	return err == nil, classify("vacuum", err, false)
}

// waker lets Receive calls sleep until a notification for their lane.
type waker struct {
	mu sync.Mutex
	ch chan struct{}
}

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

func (d *Driver) waker(lane string) *waker {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.wakers[lane]
	if w == nil {
		w = &waker{ch: make(chan struct{})}
		d.wakers[lane] = w
	}
	return w
}

// wakeAll wakes every waiting Receive (after the listening connection was
// lost: notifications may have been missed).
func (d *Driver) wakeAll() {
	d.mu.Lock()
	ws := make([]*waker, 0, len(d.wakers))
	for _, w := range d.wakers {
		ws = append(ws, w)
	}
	d.mu.Unlock()
	for _, w := range ws {
		w.broadcast()
	}
}

// listen holds one connection of its own (outside the pool) LISTENing on
// the schema's channel and wakes the Receive calls of the notified lane.
// A lost connection is reopened with backoff; meanwhile waiting receives
// fall back to polling (Config.Poll).
func (d *Driver) listen(cc *pgx.ConnConfig) {
	defer d.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-d.stop
		cancel()
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{d.channel}.Sanitize())
			if err == nil {
				backoff = 100 * time.Millisecond
				d.wakeAll() // anything published while not listening
				for {
					n, werr := conn.WaitForNotification(ctx)
					if werr != nil {
						break
					}
					d.waker(n.Payload).broadcast()
				}
			}
			cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(cctx)
			ccancel()
		}
		d.wakeAll()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
