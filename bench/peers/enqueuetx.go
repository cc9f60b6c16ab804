package main

// The transactional-enqueue suite (issue 19, `go run . --suite enqueuetx`):
// Switchyard's EnqueueTx / EnqueueManyTx beside river's InsertTx /
// InsertManyTx on the same PostgreSQL, inserting in the caller's
// transactions; then the latency from commit to handler start, through
// the outbox relay (LISTEN/NOTIFY) and a broker, beside river's own
// commit → work start and Switchyard's plain Enqueue.

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/all"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/runtimebench"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres"
)

// txOptions are the suite's own knobs.
type txOptions struct {
	batch     int           // tasks per transaction in the Many rows
	latTasks  int           // tasks of a latency row
	latRate   int           // transactions per second of a latency row
	brokerURL string        // the broker of Switchyard's latency rows
	wait      time.Duration // bound on a latency row
}

type txRow struct {
	name string
	run  func(ctx context.Context, o options, t txOptions) (result, error)
}

// txRows lists the suite: insert throughput first, then latencies.
func txRows() []txRow {
	return []txRow{
		{"river InsertTx, 1 job per tx", func(ctx context.Context, o options, t txOptions) (result, error) { return riverInsertTx(ctx, o, 1) }},
		{"Switchyard EnqueueTx, 1 task per tx", func(ctx context.Context, o options, t txOptions) (result, error) { return syEnqueueTx(ctx, o, 1) }},
		{"river InsertManyTx, batch per tx", func(ctx context.Context, o options, t txOptions) (result, error) {
			return riverInsertTx(ctx, o, t.batch)
		}},
		{"Switchyard EnqueueManyTx, batch per tx", func(ctx context.Context, o options, t txOptions) (result, error) {
			return syEnqueueTx(ctx, o, t.batch)
		}},
		{"latency: river, commit → work start", riverLatency},
		{"latency: Switchyard EnqueueTx, commit → handler start", func(ctx context.Context, o options, t txOptions) (result, error) {
			return syLatency(ctx, o, t, true)
		}},
		{"latency: Switchyard Enqueue (no tx), call → handler start", func(ctx context.Context, o options, t txOptions) (result, error) {
			return syLatency(ctx, o, t, false)
		}},
	}
}

// runEnqueueTx runs the suite's rows runs times, interleaved, and prints
// medians.
func runEnqueueTx(ctx context.Context, o options, t txOptions, runs int, only string, stdout, stderr io.Writer) error {
	rows := txRows()
	var sel []txRow
	for _, r := range rows {
		if only == "" || containsFold(r.name, only) {
			sel = append(sel, r)
		}
	}
	load0, started := runtimebench.LoadAvg(), time.Now().UTC()
	all := make([][]result, len(sel))
	for n := 0; n < runs; n++ {
		for i, r := range sel {
			fmt.Fprintf(stderr, "run %d/%d: %s…\n", n+1, runs, r.name)
			rctx, cancel := context.WithTimeout(ctx, o.timeout)
			res, err := r.run(rctx, o, t)
			cancel()
			if err != nil {
				fmt.Fprintf(stderr, "  %s failed: %v\n", r.name, err)
				res = result{skipped: "failed: " + firstLine(err.Error())}
			}
			all[i] = append(all[i], res)
		}
	}
	fmt.Fprintf(stdout, "transactional enqueue: %d tasks a throughput run (%d publishers, batch %d); latency rows %d tasks at %d tx/s; medians of %d runs; PostgreSQL %s; Switchyard broker %s\n",
		o.tasks, o.publishers, t.batch, t.latTasks, t.latRate, runs, redactDSN(o.pg), redactDSN(t.brokerURL))
	fmt.Fprintf(stdout, "load average: %s at start (%s), %s at end\n\n", load0, started.Format("15:04 MST"), runtimebench.LoadAvg())
	fmt.Fprintln(stdout, "| row | tasks/s | p50 / p99 ms | client CPU µs/task | PostgreSQL CPU µs/task |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|")
	for i, r := range sel {
		m := median(all[i])
		if m.skipped != "" {
			fmt.Fprintf(stdout, "| %s | – (%s) | | | |\n", r.name, m.skipped)
			continue
		}
		rate, lat, pg := fmt.Sprintf("%.0f", m.perSecond()), "", ""
		if m.p50 > 0 {
			rate, lat = "(paced)", fmt.Sprintf("%.2f / %.2f", ms(m.p50), ms(m.p99))
		}
		if m.pgCPU > 0 {
			pg = fmt.Sprintf("%.0f", us(m.pgCPU))
		}
		fmt.Fprintf(stdout, "| %s | %s | %s | %.0f | %s |\n", r.name, rate, lat, us(m.clientCPU), pg)
	}
	return nil
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// freshSchema creates a schema for one run and returns a drop function.
func freshSchema(ctx context.Context, pool *pgxpool.Pool, prefix string) (string, func(), error) {
	schema := runtimebench.NewNamespace(prefix)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", nil, err
	}
	return schema, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, _ = pool.Exec(cctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}, nil
}

// riverSchema opens a pool on o.pg and a fresh schema with river's tables
// migrated into it; cleanup drops the schema and closes the pool.
func riverSchema(ctx context.Context, o options, prefix string) (*pgxpool.Pool, *riverpgxv5.Driver, string, func(), error) {
	pool, err := pgxpool.New(ctx, o.pg)
	if err != nil {
		return nil, nil, "", nil, err
	}
	schema, drop, err := freshSchema(ctx, pool, prefix)
	if err != nil {
		pool.Close()
		return nil, nil, "", nil, err
	}
	cleanup := func() { drop(); pool.Close() }
	driver := riverpgxv5.New(pool)
	if err := migrateRiver(ctx, driver, schema); err != nil {
		cleanup()
		return nil, nil, "", nil, err
	}
	return pool, driver, schema, cleanup, nil
}

// migrateRiver runs river's migrations up, into schema ("" for the
// driver's default).
func migrateRiver[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], schema string) error {
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: quietLogger()})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	return nil
}

// insertLoop runs o.tasks inserts of per tasks per transaction from
// o.publishers goroutines, each transaction begun on pool and committed.
func insertLoop(ctx context.Context, o options, pool *pgxpool.Pool, per int, insert func(tx pgx.Tx, n int) error) (result, error) {
	txs := (o.tasks + per - 1) / per
	var next atomic.Int64
	pg0, pgErr := runtimebench.PostgresCPU()
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, o.publishers)
	for range o.publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= txs {
					return
				}
				n := min(per, o.tasks-i*per)
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return insert(tx, n) })
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return result{}, err
	}
	r := result{tasks: o.tasks, elapsed: time.Since(start), clientCPU: (processCPU() - cpu0) / time.Duration(o.tasks)}
	if pg1, err := runtimebench.PostgresCPU(); err == nil && pgErr == nil {
		r.pgCPU = (pg1 - pg0) / time.Duration(o.tasks)
	}
	return r, nil
}

func riverInsertTx(ctx context.Context, o options, per int) (result, error) {
	pool, driver, schema, cleanup, err := riverSchema(ctx, o, "peersrivertx")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	// An insert-only client: no queues, no workers.
	client, err := river.NewClient(driver, &river.Config{Schema: schema, Logger: quietLogger()})
	if err != nil {
		return result{}, err
	}
	return insertLoop(ctx, o, pool, per, func(tx pgx.Tx, n int) error {
		if per == 1 {
			_, err := client.InsertTx(ctx, tx, jobArgs{T: time.Now().UnixNano()}, nil)
			return err
		}
		params := make([]river.InsertManyParams, n)
		for i := range params {
			params[i] = river.InsertManyParams{Args: jobArgs{T: time.Now().UnixNano()}}
		}
		_, err := client.InsertManyTx(ctx, tx, params)
		return err
	})
}

// syArgs is the Switchyard task of the suite.
type syArgs struct {
	T int64 `json:"t"`
}

func (syArgs) Kind() string { return "peers_tx_noop" }

// syLedger opens a PostgreSQL ledger in a fresh schema.
func syLedger(ctx context.Context, o options, pool *pgxpool.Pool) (ledger.Ledger, func(), error) {
	schema, drop, err := freshSchema(ctx, pool, "peerssytx")
	if err != nil {
		return nil, nil, err
	}
	u, err := url.Parse(o.pg)
	if err != nil {
		drop()
		return nil, nil, err
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	L, err := ledger.Open(ctx, u.String())
	if err != nil {
		drop()
		return nil, nil, err
	}
	return L, func() { L.Close(); drop() }, nil
}

// syEnqueueTx measures EnqueueTx / EnqueueManyTx alone: the relay is off
// (river's insert rows are not worked either), so the row is the cost of
// writing the task, its event and its outbox row in the caller's
// transaction.
func syEnqueueTx(ctx context.Context, o options, per int) (result, error) {
	pool, err := pgxpool.New(ctx, o.pg)
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	L, done, err := syLedger(ctx, o, pool)
	if err != nil {
		return result{}, err
	}
	defer done()
	b, err := broker.Open(ctx, "mem://"+runtimebench.NewNamespace("peerstx"), nil)
	if err != nil {
		return result{}, err
	}
	defer b.Close()
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L, Relay: &switchyard.RelayConfig{Off: true}})
	if err != nil {
		return result{}, err
	}
	return insertLoop(ctx, o, pool, per, func(tx pgx.Tx, n int) error {
		if per == 1 {
			_, err := c.EnqueueTx(ctx, tx, syArgs{T: time.Now().UnixNano()}, nil)
			return err
		}
		items := make([]switchyard.EnqueueItem, n)
		for i := range items {
			items[i] = switchyard.EnqueueItem{Args: syArgs{T: time.Now().UnixNano()}}
		}
		rs, err := c.EnqueueManyTx(ctx, tx, items)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Err != nil {
				return r.Err
			}
		}
		return nil
	})
}

// paced calls one at t.latRate per second, t.latTasks times.
func paced(ctx context.Context, t txOptions, one func() error) error {
	tick := time.NewTicker(time.Second / time.Duration(t.latRate))
	defer tick.Stop()
	for i := 0; i < t.latTasks; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if err := one(); err != nil {
			return err
		}
	}
	return nil
}

// latencyResult sorts the latencies into a result.
func latencyResult(ls []time.Duration, elapsed, cpu time.Duration) result {
	sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
	r := result{tasks: len(ls), elapsed: elapsed, clientCPU: cpu / time.Duration(max(len(ls), 1))}
	if len(ls) > 0 {
		r.p50, r.p99 = ls[len(ls)/2], ls[min(len(ls)-1, len(ls)*99/100)]
	}
	return r
}

// stamps pairs the time just before each COMMIT (or enqueue call) with
// the time its handler started, by task.
type stamps[K comparable] struct {
	mu      sync.Mutex
	commit  map[K]time.Time
	started map[K]time.Time
}

func newStamps[K comparable]() *stamps[K] {
	return &stamps[K]{commit: map[K]time.Time{}, started: map[K]time.Time{}}
}

func (s *stamps[K]) committing(k K, at time.Time) {
	s.mu.Lock()
	s.commit[k] = at
	s.mu.Unlock()
}

func (s *stamps[K]) start(k K) {
	now := time.Now()
	s.mu.Lock()
	if _, ok := s.started[k]; !ok {
		s.started[k] = now
	}
	s.mu.Unlock()
}

// wait waits until n handlers started (bounded by d) and returns the
// latencies.
func (s *stamps[K]) wait(ctx context.Context, n int, d time.Duration) ([]time.Duration, error) {
	deadline := time.Now().Add(d)
	for {
		s.mu.Lock()
		got := len(s.started)
		s.mu.Unlock()
		if got >= n {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%d of %d handlers started in %v", got, n, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ls []time.Duration
	for k, c := range s.commit {
		if st, ok := s.started[k]; ok {
			ls = append(ls, st.Sub(c))
		}
	}
	return ls, nil
}

// riverLatency: one InsertTx per transaction at the paced rate, river's
// workers on (LISTEN/NOTIFY, FetchCooldown as --river-cooldown); from just
// before COMMIT to the worker's start.
func riverLatency(ctx context.Context, o options, t txOptions) (result, error) {
	pool, driver, schema, cleanup, err := riverSchema(ctx, o, "peersriverlat")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	st := newStamps[int64]()
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[jobArgs]) error {
		st.start(job.ID)
		return nil
	}))
	client, err := river.NewClient(driver, &river.Config{Schema: schema, Workers: workers, Logger: quietLogger(),
		FetchCooldown: o.riverCooldown, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.riverWorkers}}})
	if err != nil {
		return result{}, err
	}
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	cpu0, begin := processCPU(), time.Now()
	if err := paced(ctx, t, func() error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		r, err := client.InsertTx(ctx, tx, jobArgs{}, nil)
		if err != nil {
			return err
		}
		st.committing(r.Job.ID, time.Now())
		return tx.Commit(ctx)
	}); err != nil {
		return result{}, err
	}
	ls, err := st.wait(ctx, t.latTasks, t.wait)
	if err != nil {
		return result{}, err
	}
	return latencyResult(ls, time.Since(begin), processCPU()-cpu0), nil
}

// syLatency: Switchyard with a PostgreSQL ledger and t.brokerURL, a
// Server running a no-op handler; one task per transaction (inTx:
// EnqueueTx, from just before COMMIT; the Client's and the Server's
// relays publish it on the commit's notification) or one plain Enqueue
// per call (from just before the call), at the paced rate.
func syLatency(ctx context.Context, o options, t txOptions, inTx bool) (result, error) {
	pool, err := pgxpool.New(ctx, o.pg)
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	L, done, err := syLedger(ctx, o, pool)
	if err != nil {
		return result{}, err
	}
	defer done()
	ns := runtimebench.NewNamespace("peerstxlat")
	bu, err := url.Parse(t.brokerURL)
	if err != nil {
		return result{}, err
	}
	q := bu.Query()
	q.Set("namespace", ns)
	bu.RawQuery = q.Encode()
	defer runtimebench.CleanNamespace(bu.String(), ns, quietLogger())
	b, err := broker.Open(ctx, bu.String(), &broker.Options{Dedup: L})
	if err != nil {
		return result{}, err
	}
	defer b.Close()
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		return result{}, err
	}
	defer c.Close(context.Background())
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, Slots: o.workers, Logger: quietLogger()})
	if err != nil {
		return result{}, err
	}
	st := newStamps[string]()
	if err := switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[syArgs]) error {
		st.start(tk.ID)
		return nil
	}, nil); err != nil {
		return result{}, err
	}
	if err := srv.Start(ctx); err != nil {
		return result{}, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Stop(sctx)
	}()
	cpu0, begin := processCPU(), time.Now()
	if err := paced(ctx, t, func() error {
		if !inTx {
			// The ID is known only once Enqueue returns: stamp the call's
			// start under it then (the handler cannot have started before
			// the publish inside the call).
			at := time.Now()
			r, err := c.Enqueue(ctx, syArgs{}, nil)
			if err != nil {
				return err
			}
			st.committing(r.ID, at)
			return nil
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		r, err := c.EnqueueTx(ctx, tx, syArgs{}, nil)
		if err != nil {
			return err
		}
		st.committing(r.ID, time.Now())
		return tx.Commit(ctx)
	}); err != nil {
		return result{}, err
	}
	ls, err := st.wait(ctx, t.latTasks, t.wait)
	if err != nil {
		return result{}, err
	}
	return latencyResult(ls, time.Since(begin), processCPU()-cpu0), nil
}
