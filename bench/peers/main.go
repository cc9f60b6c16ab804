// Command peers measures Switchyard's runtime beside river (PostgreSQL and
// SQLite) and asynq in one run (issue 15), so every ratio comes from the
// same machine at the same moment. It is its own module, outside the
// library's dependency graph: river never enters the root go.mod.
//
//	cd bench/peers
//	go run . [--pg DSN] [--redis ADDR] [--tasks 20000] [--publishers 8] [--workers 64] [--runs 3] [--only river]
//
// Every row runs N small tasks with a no-op handler, publishers and workers
// at once, from the first insert to the last completion; rows are
// interleaved run by run and medians printed. See docs/BENCHMARKS.md,
// "Runtime through the public API (issue 15)", for what each row does.
package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	_ "modernc.org/sqlite"

	"github.com/switchyard-dev/switchyard/internal/runtimebench"
)

type options struct {
	pg, redis  string
	tasks      int
	publishers int
	workers    int
	// riverWorkers and riverCooldown: river fetches at most MaxWorkers
	// minus the running jobs per fetch, and fetches at most once per
	// FetchCooldown, so its throughput is capped near
	// riverWorkers / riverCooldown.
	riverWorkers  int
	riverCooldown time.Duration
	// sqliteSync is SQLite's synchronous setting for river-sqlite and the
	// Switchyard SQLite ledger alike.
	sqliteSync string
	timeout    time.Duration
	dir        string
	// rate, when positive, paces the publishers of the per-job rows to
	// this many tasks/s in all (latency at a given load); the InsertMany
	// rows are not paced.
	rate int
}

// result is one measured run of one row.
type result struct {
	tasks     int
	elapsed   time.Duration
	p50, p99  time.Duration
	clientCPU time.Duration // per task, this process
	pgCPU     time.Duration // per task, the PostgreSQL server (0: not measured)
	skipped   string
}

func (r result) perSecond() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.tasks) / r.elapsed.Seconds()
}

type row struct {
	name string
	pg   bool // measure PostgreSQL CPU
	run  func(ctx context.Context, o options) (result, error)
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.pg, "pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN (river, the Switchyard PostgreSQL ledger); a fresh schema per run")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address (asynq, the Switchyard asynq adapter)")
	fs.IntVar(&o.tasks, "tasks", 20000, "tasks per run")
	fs.IntVar(&o.publishers, "publishers", 8, "goroutines inserting one job per call")
	fs.IntVar(&o.workers, "workers", 64, "concurrent handlers: asynq Concurrency, Switchyard Slots (river: --river-workers)")
	fs.IntVar(&o.riverWorkers, "river-workers", 1000, "river's MaxWorkers (its throughput is capped near MaxWorkers per FetchCooldown)")
	fs.DurationVar(&o.riverCooldown, "river-cooldown", 0, "river's FetchCooldown (0: river's default, 100ms)")
	fs.StringVar(&o.sqliteSync, "sqlite-sync", "full", "SQLite synchronous setting for river-sqlite and the Switchyard SQLite ledger alike: full (the ledger's default) or normal")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on each run")
	fs.IntVar(&o.rate, "rate", 0, "pace the per-job rows' publishers to this many tasks/s in all (0: as fast as they go); select rows with --only")
	runs := fs.Int("runs", 3, "runs of every row (medians are printed)")
	only := fs.String("only", "", "run only rows whose name contains this (or one of these, separated by |; one that starts with = names a row exactly)")
	roles := fs.Bool("pg-roles", false, "sample PostgreSQL's CPU by role (ledger writers, LISTEN connections, background) every 20ms during the rows that use it, and commits and xids per task (pgroles.go)")
	rolesDSN := fs.String("pg-roles-db", "", "--pg-roles: where the sampler connects (default: --pg with database postgres, so that its own queries are not counted as the benchmark database's commits)")
	suite := fs.String("suite", "runtime", "runtime (the rows above), or enqueuetx (EnqueueTx beside river's InsertTx; see enqueuetx.go)")
	var tx txOptions
	fs.IntVar(&tx.batch, "tx-batch", 100, "enqueuetx: tasks per transaction in the Many rows")
	fs.IntVar(&tx.latTasks, "tx-lat-tasks", 2000, "enqueuetx: tasks of a latency row")
	fs.IntVar(&tx.latRate, "tx-lat-rate", 200, "enqueuetx: transactions per second of a latency row")
	fs.StringVar(&tx.brokerURL, "tx-broker", "", "enqueuetx: broker URL of Switchyard's latency rows (default redis://<--redis>/0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.sqliteSync != "full" && o.sqliteSync != "normal" {
		return errors.New("--sqlite-sync: full or normal")
	}
	if o.tasks < 1 || o.publishers < 1 || o.workers < 1 || *runs < 1 {
		return errors.New("need tasks, publishers, workers and runs ≥ 1")
	}
	if *suite == "enqueuetx" {
		if tx.brokerURL == "" {
			tx.brokerURL = "redis://" + o.redis + "/0"
		}
		if tx.batch < 1 || tx.latTasks < 1 || tx.latRate < 1 {
			return errors.New("need tx-batch, tx-lat-tasks and tx-lat-rate ≥ 1")
		}
		tx.wait = time.Minute
		return runEnqueueTx(ctx, o, tx, *runs, *only, stdout, stderr)
	}
	if *suite != "runtime" {
		return fmt.Errorf("--suite %q: runtime or enqueuetx", *suite)
	}
	dir, err := os.MkdirTemp("", "switchyard-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	o.dir = dir

	rows := allRows()
	var selected []row
	for _, r := range rows {
		for _, o := range strings.Split(*only, "|") {
			o = strings.ToLower(strings.TrimSpace(o))
			name := strings.ToLower(r.name)
			if exact, ok := strings.CutPrefix(o, "="); ok && name == exact || !ok && strings.Contains(name, o) {
				selected = append(selected, r)
				break
			}
		}
	}
	var (
		benchDB   string
		roleLines bytes.Buffer
	)
	if *roles {
		u, err := url.Parse(o.pg)
		if err != nil {
			return fmt.Errorf("--pg: %v", err)
		}
		benchDB = strings.TrimPrefix(u.Path, "/")
		if *rolesDSN == "" {
			u.Path = "/postgres"
			*rolesDSN = u.String()
		}
		if o.pg, err = withAppName(o.pg, rolesApp); err != nil {
			return err
		}
	}
	load0, started := runtimebench.LoadAvg(), time.Now().UTC()
	all := make([][]result, len(selected))
	for n := 0; n < *runs; n++ {
		for i, r := range selected {
			fmt.Fprintf(stderr, "run %d/%d: %s…\n", n+1, *runs, r.name)
			rctx, cancel := context.WithTimeout(ctx, o.timeout)
			var sampler *rolesSampler
			if *roles && r.pg {
				var err error
				if sampler, err = startRoles(rctx, *rolesDSN, benchDB); err != nil {
					fmt.Fprintf(stderr, "  --pg-roles: %v\n", err)
				}
			}
			res, err := r.run(rctx, o)
			if sampler != nil {
				st := sampler.finish(ctx)
				if err == nil && res.skipped == "" {
					printRoles(&roleLines, r.name, n+1, res.tasks, res.elapsed, st)
				}
			}
			cancel()
			if err != nil {
				fmt.Fprintf(stderr, "  %s failed: %v\n", r.name, err)
				res = result{skipped: "failed: " + firstLine(err.Error())}
			}
			all[i] = append(all[i], res)
		}
	}
	cooldown := "default"
	if o.riverCooldown > 0 {
		cooldown = o.riverCooldown.String()
	}
	fmt.Fprintf(stdout, "%d tasks a run, medians of %d runs; %d publishers, %d workers (river: MaxWorkers %d, FetchCooldown %s); SQLite synchronous=%s; PostgreSQL %s, Redis %s\n",
		o.tasks, *runs, o.publishers, o.workers, o.riverWorkers, cooldown, o.sqliteSync, redactDSN(o.pg), o.redis)
	fmt.Fprintf(stdout, "load average: %s at start (%s), %s at end\n\n", load0, started.Format("15:04 MST"), runtimebench.LoadAvg())
	fmt.Fprintln(stdout, "| row | tasks/s | enqueue → start p50 / p99 ms | client CPU µs/task | PostgreSQL CPU µs/task |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|")
	med := map[string]result{}
	for i, r := range selected {
		m := median(all[i])
		med[r.name] = m
		if m.skipped != "" {
			fmt.Fprintf(stdout, "| %s | – (%s) | | | |\n", r.name, m.skipped)
			continue
		}
		pg := ""
		if m.pgCPU > 0 {
			pg = fmt.Sprintf("%.0f", us(m.pgCPU))
		}
		fmt.Fprintf(stdout, "| %s | %.0f | %.2f / %.2f | %.0f | %s |\n", r.name, m.perSecond(), ms(m.p50), ms(m.p99), us(m.clientCPU), pg)
	}
	if roleLines.Len() > 0 {
		fmt.Fprintf(stdout, "\nPostgreSQL CPU by role, µs per task (database %s; sampled every %v):\n\n", benchDB, rolesEvery)
		fmt.Fprintln(stdout, "| row | run | tasks/s | PG CPU µs/task | writers' share | by role | commits/task | xids/task (cluster-wide) |")
		fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|")
		io.Copy(stdout, &roleLines)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "| ratio (same run) | value |")
	fmt.Fprintln(stdout, "|---|---|")
	for _, q := range ratios {
		a, b := med[q.num], med[q.den]
		if a.skipped != "" || b.skipped != "" || a.tasks == 0 || b.tasks == 0 {
			continue
		}
		fmt.Fprintf(stdout, "| %s / %s | %.2f |\n", q.num, q.den, a.perSecond()/b.perSecond())
	}
	return nil
}

// Row names; ratios refer to them.
const (
	rRiverPGMany     = "river, PostgreSQL, InsertMany ×1,000"
	rRiverPGOne      = "river, PostgreSQL, Insert per job"
	rRiverSQLiteMany = "river-sqlite, InsertMany ×1,000"
	rRiverSQLiteOne  = "river-sqlite, Insert per job"
	rAsynq           = "asynq client + server, Redis"
	rSyRedisOff      = "Switchyard, Redis (asynq adapter), ledger off"
	rSyRedisPG       = "Switchyard, Redis, PostgreSQL ledger"
	rSyRedisPGStep   = "Switchyard, Redis, PostgreSQL ledger, 1 Step + 1 Effect"
	rSyRedisPGMany   = "Switchyard, Redis, PostgreSQL ledger, EnqueueMany ×1,000"
	rSyEmbeddedOff   = "Switchyard, embedded, ledger off"
	rSyEmbeddedSQL   = "Switchyard, embedded, SQLite ledger"
	// rSyEmbeddedSQLM is the bulk path beside river-sqlite's InsertMany.
	rSyEmbeddedSQLM = "Switchyard, embedded, SQLite ledger, EnqueueMany ×1,000"
	rSyRedisSQL     = "Switchyard, Redis, SQLite ledger"
	rSyPGBrokerOff  = "Switchyard, PostgreSQL broker, ledger off"
	rSyPGBrokerPG   = "Switchyard, PostgreSQL broker, PostgreSQL ledger"
)

var ratios = []struct{ num, den string }{
	{rSyRedisPG, rRiverPGOne},
	{rSyRedisPG, rRiverPGMany},
	{rSyRedisPGMany, rRiverPGMany},
	{rSyEmbeddedSQL, rRiverSQLiteMany},
	{rSyEmbeddedSQL, rRiverSQLiteOne},
	{rSyEmbeddedSQLM, rRiverSQLiteMany},
	{rSyEmbeddedSQLM, rRiverSQLiteOne},
	{rSyRedisSQL, rRiverSQLiteMany},
	{rSyRedisOff, rAsynq},
	{rSyRedisPGStep, rSyRedisPG},
	{rSyPGBrokerOff, rRiverPGOne},
	{rSyPGBrokerOff, rRiverPGMany},
	{rSyPGBrokerPG, rRiverPGOne},
}

func allRows() []row {
	sy := func(brokerURL func(o options) string, ledger func(o options) string, mode runtimebench.Mode) func(context.Context, options) (result, error) {
		return func(ctx context.Context, o options) (result, error) {
			cfg := runtimebench.Config{BrokerURL: brokerURL(o), Tasks: o.tasks, Publishers: o.publishers, Slots: o.workers, Timeout: o.timeout, Rate: o.rate}
			if ledger != nil {
				cfg.LedgerDSN = ledger(o)
			}
			r, err := runtimebench.Run(ctx, cfg, mode)
			return result{tasks: r.Tasks, elapsed: r.Elapsed, p50: r.P50, p99: r.P99, clientCPU: r.ClientCPU, pgCPU: r.PGCPU, skipped: r.Skipped}, err
		}
	}
	redisURL := func(o options) string { return "redis://" + o.redis + "/0" }
	embedded := func(options) string { return "" }
	pgLedger := func(o options) string { return o.pg }
	sqliteLedger := func(o options) string {
		return "sqlite://" + filepath.Join(o.dir, "ledger.db") + "?synchronous=" + o.sqliteSync
	}
	return []row{
		{rRiverPGMany, true, func(ctx context.Context, o options) (result, error) { return riverPG(ctx, o, true) }},
		{rRiverPGOne, true, func(ctx context.Context, o options) (result, error) { return riverPG(ctx, o, false) }},
		{rRiverSQLiteMany, false, func(ctx context.Context, o options) (result, error) { return riverSQLite(ctx, o, true) }},
		{rRiverSQLiteOne, false, func(ctx context.Context, o options) (result, error) { return riverSQLite(ctx, o, false) }},
		{rAsynq, false, asynqRun},
		{rSyRedisOff, false, sy(redisURL, nil, runtimebench.LedgerOff)},
		{rSyRedisPG, true, sy(redisURL, pgLedger, runtimebench.LedgerOn)},
		{rSyRedisPGMany, true, sy(redisURL, pgLedger, runtimebench.LedgerOnBulk)},
		{rSyRedisPGStep, true, sy(redisURL, pgLedger, runtimebench.LedgerOnStepEff)},
		{rSyRedisSQL, false, sy(redisURL, sqliteLedger, runtimebench.LedgerOn)},
		{rSyEmbeddedOff, false, sy(embedded, nil, runtimebench.LedgerOff)},
		{rSyEmbeddedSQL, false, sy(embedded, sqliteLedger, runtimebench.LedgerOn)},
		{rSyEmbeddedSQLM, false, sy(embedded, sqliteLedger, runtimebench.LedgerOnBulk)},
		// The queue in PostgreSQL itself (adapters/postgres), on the same
		// server as river's rows.
		{rSyPGBrokerOff, true, sy(pgLedger, nil, runtimebench.LedgerOff)},
		{rSyPGBrokerPG, true, sy(pgLedger, pgLedger, runtimebench.LedgerOn)},
	}
}

// jobArgs is river's and asynq's task: the enqueue time.
type jobArgs struct {
	T int64 `json:"t"`
}

func (jobArgs) Kind() string { return "peers_noop" }

// latencies records enqueue → start for n tasks.
type latencies struct {
	next atomic.Int64
	d    []time.Duration
}

func newLatencies(n int) *latencies { return &latencies{d: make([]time.Duration, n)} }

func (l *latencies) add(enq int64) {
	d := time.Since(time.Unix(0, enq))
	if i := l.next.Add(1) - 1; i < int64(len(l.d)) {
		l.d[i] = d
	}
}

func (l *latencies) fill(r *result) {
	n := min(int(l.next.Load()), len(l.d))
	if n == 0 {
		return
	}
	d := l.d[:n]
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	r.p50, r.p99 = d[n/2], d[min(n-1, n*99/100)]
}

type riverWorker struct {
	river.WorkerDefaults[jobArgs]
	lat *latencies
}

func (w *riverWorker) Work(ctx context.Context, job *river.Job[jobArgs]) error {
	w.lat.add(job.Args.T)
	return nil
}

// riverRun runs n jobs through a river client: inserting with InsertMany
// in chunks of 1,000 (many) or one Insert per job from the publishers,
// while the client works them; done when the last completion event
// arrives (river emits it once the completion is persisted).
func riverRun[TTx any](ctx context.Context, o options, client *river.Client[TTx], lat *latencies, many, pg bool) (result, error) {
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: o.tasks + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancelSub()
	pg0, pgErr := runtimebench.PostgresCPU()
	cpu0 := processCPU()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	errc := make(chan error, 1)
	go func() {
		if many {
			for sent := 0; sent < o.tasks; {
				k := min(1000, o.tasks-sent)
				params := make([]river.InsertManyParams, k)
				now := time.Now().UnixNano()
				for i := range params {
					params[i] = river.InsertManyParams{Args: jobArgs{T: now}}
				}
				if _, err := client.InsertMany(ctx, params); err != nil {
					errc <- err
					return
				}
				sent += k
			}
			errc <- nil
			return
		}
		errc <- parallel(ctx, o, func() error {
			_, err := client.Insert(ctx, jobArgs{T: time.Now().UnixNano()}, nil)
			return err
		})
	}()
	done := 0
	for done < o.tasks {
		select {
		case <-events:
			done++
		case err := <-errc:
			if err != nil {
				return result{}, fmt.Errorf("insert: %w", err)
			}
			errc = nil
		case <-ctx.Done():
			return result{}, fmt.Errorf("%d of %d jobs completed when the run timed out", done, o.tasks)
		}
	}
	r := result{tasks: o.tasks, elapsed: time.Since(start), clientCPU: (processCPU() - cpu0) / time.Duration(o.tasks)}
	if pg1, err := runtimebench.PostgresCPU(); pg && err == nil && pgErr == nil {
		r.pgCPU = (pg1 - pg0) / time.Duration(o.tasks)
	}
	lat.fill(&r)
	return r, nil
}

func riverPG(ctx context.Context, o options, many bool) (result, error) {
	_, driver, schema, cleanup, err := riverSchema(ctx, o, "peersriver")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	lat := newLatencies(o.tasks)
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{lat: lat})
	client, err := river.NewClient(driver, &river.Config{Schema: schema, Workers: workers, Logger: quietLogger(),
		FetchCooldown: o.riverCooldown,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.riverWorkers}}})
	if err != nil {
		return result{}, err
	}
	return riverRun(ctx, o, client, lat, many, true)
}

func riverSQLite(ctx context.Context, o options, many bool) (result, error) {
	path := filepath.Join(o.dir, runtimebench.NewNamespace("river")+".db")
	defer func() {
		for _, s := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(path + s)
		}
	}()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous("+strings.ToUpper(o.sqliteSync)+")")
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // as riversqlite's documentation advises
	driver := riversqlite.New(db)
	if err := migrateRiver(ctx, driver, ""); err != nil {
		return result{}, fmt.Errorf("river-sqlite: %w", err)
	}
	lat := newLatencies(o.tasks)
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{lat: lat})
	client, err := river.NewClient(driver, &river.Config{Workers: workers, Logger: quietLogger(),
		FetchCooldown: o.riverCooldown,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.riverWorkers}}})
	if err != nil {
		return result{}, err
	}
	return riverRun(ctx, o, client, lat, many, false)
}

// asynqRun enqueues with asynq's Client from the publishers while asynq's
// Server (defaults, Concurrency = workers) runs a no-op handler; done when
// the queue has no pending or active task left after the last handler
// returned.
func asynqRun(ctx context.Context, o options) (result, error) {
	queue := runtimebench.NewNamespace("peersasynq")
	redis := asynq.RedisClientOpt{Addr: o.redis}
	client := asynq.NewClient(redis)
	defer client.Close()
	insp := asynq.NewInspector(redis)
	defer insp.Close()
	defer func() { _ = insp.DeleteQueue(queue, true) }()
	lat := newLatencies(o.tasks)
	var handled atomic.Int64
	mux := asynq.NewServeMux()
	mux.HandleFunc("peers_noop", func(ctx context.Context, t *asynq.Task) error {
		var enq int64
		_, _ = fmt.Sscan(string(t.Payload()), &enq)
		lat.add(enq)
		handled.Add(1)
		return nil
	})
	srv := asynq.NewServer(redis, asynq.Config{Concurrency: o.workers, Queues: map[string]int{queue: 1}, LogLevel: asynq.FatalLevel})
	cpu0 := processCPU()
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		return result{}, err
	}
	defer srv.Shutdown()
	if err := parallel(ctx, o, func() error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("peers_noop", []byte(fmt.Sprint(time.Now().UnixNano()))), asynq.Queue(queue), asynq.Retention(0))
		return err
	}); err != nil {
		return result{}, fmt.Errorf("enqueue: %w", err)
	}
	for {
		if handled.Load() >= int64(o.tasks) {
			if qi, err := insp.GetQueueInfo(queue); err == nil && qi.Pending == 0 && qi.Active == 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return result{}, fmt.Errorf("%d of %d tasks handled when the run timed out", handled.Load(), o.tasks)
		case <-time.After(2 * time.Millisecond):
		}
	}
	r := result{tasks: o.tasks, elapsed: time.Since(start), clientCPU: (processCPU() - cpu0) / time.Duration(o.tasks)}
	lat.fill(&r)
	return r, nil
}

// parallel calls one o.tasks times from o.publishers goroutines, paced to
// o.rate calls/s in all when it is set.
func parallel(ctx context.Context, o options, one func() error) error {
	if o.rate > 0 {
		t := time.NewTicker(time.Second / time.Duration(o.rate))
		defer t.Stop()
		inner := one
		one = func() error {
			select {
			case <-t.C:
			case <-ctx.Done():
				return ctx.Err()
			}
			return inner()
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for p := 0; p < o.publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(o.tasks) && ctx.Err() == nil {
				if err := one(); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func median(rs []result) result {
	var ok []result
	for _, r := range rs {
		if r.skipped == "" {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 {
		return rs[0]
	}
	pick := func(f func(result) time.Duration) time.Duration {
		xs := make([]time.Duration, len(ok))
		for i, r := range ok {
			xs[i] = f(r)
		}
		sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
		return xs[len(xs)/2]
	}
	out := ok[0]
	out.elapsed = pick(func(r result) time.Duration { return r.elapsed })
	out.p50 = pick(func(r result) time.Duration { return r.p50 })
	out.p99 = pick(func(r result) time.Duration { return r.p99 })
	out.clientCPU = pick(func(r result) time.Duration { return r.clientCPU })
	out.pgCPU = pick(func(r result) time.Duration { return r.pgCPU })
	return out
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

func redactDSN(dsn string) string {
	if i := strings.Index(dsn, "@"); i >= 0 {
		if j := strings.Index(dsn, "://"); j >= 0 && j < i {
			userinfo := dsn[j+3 : i]
			if k := strings.IndexByte(userinfo, ':'); k >= 0 {
				return dsn[:j+3] + userinfo[:k] + ":xxxxx" + dsn[i:]
			}
		}
	}
	return dsn
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
