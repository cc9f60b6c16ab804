package runtimebench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// FleetConfig describes a fleet measurement: P worker processes sharing
// one ledger drain a pre-filled queue (issue 15, "a fleet").
type FleetConfig struct {
	// BrokerURL is the broker; empty means a fresh embedded file (which
	// several processes may open at once).
	BrokerURL string
	// LedgerDSN is the shared ledger (required); a fresh schema or file per
	// run, removed after.
	LedgerDSN string
	// Procs lists the process counts to measure, in order. Defaults to 1, 3.
	Procs []int
	// Tasks per run. Defaults to 10,000.
	Tasks int
	// Runs of every process count (interleaved; medians are reported).
	Runs int
	// Publishers fill the queue before the workers start. Defaults to 8.
	Publishers int
	// Slots and Prefetch of each worker's Server. Default 64 and 128.
	Slots, Prefetch int
	// Timeout bounds one run (fill and drain). Defaults to 5 minutes.
	Timeout time.Duration
	// Command returns the command that runs one worker with args (the
	// arguments of FleetWorker, to be handed to it by the command line).
	// Required.
	Command func(ctx context.Context, args []string) *exec.Cmd
	// Logger receives warnings and cleanup failures.
	Logger *slog.Logger
}

// FleetResult is one measured run of P workers.
type FleetResult struct {
	Procs int `json:"procs"`
	Tasks int `json:"tasks"`
	// Fill is how long the parent took to enqueue the tasks (not measured
	// as throughput).
	Fill time.Duration `json:"fill_ns"`
	// Elapsed is the drain: from the moment every worker was told to
	// start to the moment their reports summed to Tasks.
	Elapsed time.Duration `json:"elapsed_ns"`
	// ClientCPU is the workers' CPU (user+system, getrusage in each)
	// during the drain, summed, per task.
	ClientCPU time.Duration `json:"client_cpu_per_task_ns"`
	// PGCPU and PGExec are as in Result.
	PGCPU  time.Duration `json:"pg_cpu_per_task_ns,omitempty"`
	PGExec time.Duration `json:"pg_exec_per_task_ns,omitempty"`
	// PerWorker is how many tasks each worker completed.
	PerWorker []int `json:"per_worker"`
	// LockWaitMax and LockWaitMean are the run's PostgreSQL backends
	// (application_name = the run's namespace) waiting on a heavyweight
	// lock (pg_stat_activity, wait_event_type 'Lock'), sampled every
	// 100 ms during the drain: a lock convoy shows here. LockWaitEvents sums the waiters seen by
	// wait event ("extend", "transactionid", "tuple", …). PostgreSQL only.
	LockWaitMax    int            `json:"lock_wait_max"`
	LockWaitMean   float64        `json:"lock_wait_mean"`
	LockWaitEvents map[string]int `json:"lock_wait_events,omitempty"`
	// Commits is the ledger database's committed transactions
	// (pg_stat_database.xact_commit) per task during the drain, and
	// WALBytes and WALSyncs the server's WAL volume and WAL flushes
	// (pg_stat_wal, the whole server) per task: what group commit saves.
	// PostgreSQL only.
	Commits  float64 `json:"pg_commits_per_task,omitempty"`
	WALBytes float64 `json:"pg_wal_bytes_per_task,omitempty"`
	WALSyncs float64 `json:"pg_wal_syncs_per_task,omitempty"`
	// Completed is the ledger's count of completed tasks after the run (a
	// check: it must equal Tasks).
	Completed int `json:"completed_in_ledger"`
}

// PerSecond is the drain throughput.
func (r FleetResult) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Tasks) / r.Elapsed.Seconds()
}

// FleetReport is a whole fleet measurement.
type FleetReport struct {
	Broker     string          `json:"broker"`
	Ledger     string          `json:"ledger"`
	Tasks      int             `json:"tasks"`
	Runs       int             `json:"runs"`
	Slots      int             `json:"slots"`
	Prefetch   int             `json:"prefetch"`
	LoadStart  string          `json:"load_start"`
	LoadEnd    string          `json:"load_end"`
	Started    time.Time       `json:"started"`
	Rows       []FleetResult   `json:"rows"` // medians per process count, in Procs order
	All        [][]FleetResult `json:"all_runs"`
	Procs      []int           `json:"procs"`
	CPUs       int             `json:"cpus"`
	FillMethod string          `json:"fill_method"`
}

func (c FleetConfig) withDefaults() FleetConfig {
	if len(c.Procs) == 0 {
		c.Procs = []int{1, 3}
	}
	if c.Tasks <= 0 {
		c.Tasks = 10000
	}
	if c.Runs <= 0 {
		c.Runs = 1
	}
	if c.Publishers <= 0 {
		c.Publishers = 8
	}
	if c.Slots <= 0 {
		c.Slots = 64
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 2 * c.Slots
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Fleet measures every process count of cfg.Procs cfg.Runs times
// (interleaved) and returns the medians.
func Fleet(ctx context.Context, cfg FleetConfig, progress io.Writer) (*FleetReport, error) {
	cfg = cfg.withDefaults()
	if cfg.LedgerDSN == "" {
		return nil, broker.Invalidf("runtimebench: the fleet needs a ledger DSN")
	}
	if cfg.Command == nil {
		return nil, broker.Invalidf("runtimebench: the fleet needs a worker command")
	}
	rep := &FleetReport{Broker: redact(cfg.BrokerURL), Ledger: redact(cfg.LedgerDSN), Tasks: cfg.Tasks, Runs: cfg.Runs, Slots: cfg.Slots,
		Prefetch: cfg.Prefetch, LoadStart: LoadAvg(), Started: time.Now().UTC(), Procs: cfg.Procs, CPUs: runtime.NumCPU(),
		FillMethod: fmt.Sprintf("pre-filled: Client.Enqueue from %d goroutines with the ledger, before the workers start", cfg.Publishers)}
	if rep.Broker == "" {
		rep.Broker = "embedded (temporary file)"
	}
	rep.All = make([][]FleetResult, len(cfg.Procs))
	for r := 0; r < cfg.Runs; r++ {
		for i, p := range cfg.Procs {
			if progress != nil {
				fmt.Fprintf(progress, "run %d/%d: %d worker process(es), %d tasks…\n", r+1, cfg.Runs, p, cfg.Tasks)
			}
			res, err := FleetRun(ctx, cfg, p)
			if err != nil {
				return rep, fmt.Errorf("%d procs: %w", p, err)
			}
			rep.All[i] = append(rep.All[i], res)
		}
	}
	for _, rs := range rep.All {
		rep.Rows = append(rep.Rows, medianFleet(rs))
	}
	rep.LoadEnd = LoadAvg()
	return rep, nil
}

func medianFleet(rs []FleetResult) FleetResult {
	out := rs[0]
	med := func(f func(FleetResult) time.Duration) time.Duration {
		xs := make([]time.Duration, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
		return xs[len(xs)/2]
	}
	out.Elapsed = med(func(r FleetResult) time.Duration { return r.Elapsed })
	out.Fill = med(func(r FleetResult) time.Duration { return r.Fill })
	out.ClientCPU = med(func(r FleetResult) time.Duration { return r.ClientCPU })
	out.PGCPU = med(func(r FleetResult) time.Duration { return r.PGCPU })
	out.PGExec = med(func(r FleetResult) time.Duration { return r.PGExec })
	medf := func(f func(FleetResult) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		sort.Float64s(xs)
		return xs[len(xs)/2]
	}
	out.Commits = medf(func(r FleetResult) float64 { return r.Commits })
	out.WALBytes = medf(func(r FleetResult) float64 { return r.WALBytes })
	out.WALSyncs = medf(func(r FleetResult) float64 { return r.WALSyncs })
	out.LockWaitMean = medf(func(r FleetResult) float64 { return r.LockWaitMean })
	// The worst run's waiters, and every run's by event.
	out.LockWaitEvents = map[string]int{}
	for _, r := range rs {
		out.LockWaitMax = max(out.LockWaitMax, r.LockWaitMax)
		for ev, n := range r.LockWaitEvents {
			out.LockWaitEvents[ev] += n
		}
	}
	return out
}

// worker is one running worker process as the parent sees it.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  atomic.Int64 // tasks it reported completed
	ready chan struct{}
	cpu0  atomic.Int64 // its CPU when told to go
	cpu1  atomic.Int64 // its CPU when told to stop
	ended chan struct{}
	errs  strings.Builder
	mu    sync.Mutex
}

// FleetRun measures one run of p worker processes: a fresh namespace and
// ledger schema, the queue filled with cfg.Tasks tasks through
// Client.Enqueue (with the ledger), then p workers started and drained.
func FleetRun(ctx context.Context, cfg FleetConfig, p int) (FleetResult, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	ns := NewNamespace("syfleet")
	brokerURL, cleanBroker, err := brokerFor(ctx, cfg.BrokerURL, ns, cfg.Logger)
	if err != nil {
		return FleetResult{}, err
	}
	defer cleanBroker()
	dsn, cleanLedger, err := ledgerFor(cfg.LedgerDSN, ns, cfg.Logger)
	if err != nil {
		return FleetResult{}, err
	}
	defer cleanLedger()
	if isPostgres(dsn) {
		// The run's connections carry the namespace as their
		// application_name, so that the lock sampler counts only them.
		if u, err := url.Parse(dsn); err == nil && u.Query().Get("application_name") == "" {
			q := u.Query()
			q.Set("application_name", ns)
			u.RawQuery = q.Encode()
			dsn = u.String()
		}
	}
	res := FleetResult{Procs: p, Tasks: cfg.Tasks}

	// Fill: the ledger records and the broker's messages, before any
	// worker runs.
	L, err := ledger.Open(ctx, dsn)
	if err != nil {
		return res, err
	}
	defer L.Close()
	fill := time.Now()
	if err := fillQueue(ctx, cfg, brokerURL, L); err != nil {
		return res, fmt.Errorf("filling the queue: %w", err)
	}
	res.Fill = time.Since(fill)
	if isPostgres(dsn) {
		// The fill's connections go before the drain's counters are
		// read: a backend reports its commits at most once a second
		// while busy and 10 s after going idle, so the fill's could land
		// in the drain's figures. Exiting reports them (waitBackendsGone
		// below). countCompleted opens its own connection.
		L.Close()
		waitBackendsGone(ctx, dsn, appName(dsn), 15*time.Second)
	}

	// Start the workers; each sets up and says ready, then waits for "go".
	ws := make([]*worker, p)
	defer func() {
		for _, w := range ws {
			if w != nil && w.cmd.Process != nil && w.cmd.ProcessState == nil {
				_ = w.cmd.Process.Kill()
			}
		}
		for _, w := range ws {
			if w != nil {
				<-w.ended
			}
		}
	}()
	for i := range ws {
		w, err := startWorker(ctx, cfg, brokerURL, dsn, i)
		if err != nil {
			return res, err
		}
		ws[i] = w
	}
	for i, w := range ws {
		select {
		case <-w.ready:
		case <-w.ended:
			return res, fmt.Errorf("worker %d exited before it was ready: %s", i, w.stderr())
		case <-ctx.Done():
			return res, fmt.Errorf("worker %d not ready when the run timed out", i)
		}
	}
	pgDSN := ""
	if isPostgres(dsn) {
		pgDSN = dsn
	}
	pg := startPGSample(ctx, pgDSN)
	locks := startLockSampler(ctx, pgDSN, appName(pgDSN))
	c0, c0ok := pgCounters(ctx, pgDSN)
	start := time.Now()
	for i, w := range ws {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			return res, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var sum int64
		for _, w := range ws {
			sum += w.done.Load()
		}
		if sum >= int64(cfg.Tasks) {
			break
		}
		for i, w := range ws {
			select {
			case <-w.ended:
				return res, fmt.Errorf("worker %d exited during the run: %s", i, w.stderr())
			default:
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return res, fmt.Errorf("%d of %d tasks done when the run timed out", sum, cfg.Tasks)
		}
	}
	res.Elapsed = time.Since(start)
	res.PGCPU, res.PGExec = pg.perTask(ctx, cfg.Tasks)
	res.LockWaitMax, res.LockWaitMean, res.LockWaitEvents = locks.stop()
	for _, w := range ws {
		_, _ = io.WriteString(w.stdin, "stop\n")
		_ = w.stdin.Close()
	}
	var cpu time.Duration
	for i, w := range ws {
		select {
		case <-w.ended:
		case <-ctx.Done():
			return res, fmt.Errorf("worker %d did not stop", i)
		}
		if w.cpu1.Load() == 0 {
			return res, fmt.Errorf("worker %d did not report its CPU: %s", i, w.stderr())
		}
		cpu += time.Duration(w.cpu1.Load() - w.cpu0.Load())
		res.PerWorker = append(res.PerWorker, int(w.done.Load()))
	}
	res.ClientCPU = cpu / time.Duration(cfg.Tasks)
	// The counters are read once the workers' backends have exited: a
	// backend reports its commits and WAL to pg_stat_database and
	// pg_stat_wal at most once a second while busy and 10 s after it goes
	// idle, so read straight after a drain of a second or less they
	// missed most of it (0.00 a task). Exiting flushes them. What the
	// workers write while stopping (their server records) is a few
	// commits a process.
	if c0ok && waitBackendsGone(ctx, pgDSN, appName(pgDSN), 10*time.Second) {
		if c1, ok := pgCounters(ctx, pgDSN); ok {
			n := float64(cfg.Tasks)
			res.Commits, res.WALBytes, res.WALSyncs = float64(c1[0]-c0[0])/n, float64(c1[1]-c0[1])/n, float64(c1[2]-c0[2])/n
		}
	}
	res.Completed = countCompleted(ctx, dsn, L)
	return res, nil
}

// fillQueue enqueues cfg.Tasks no-op tasks with the ledger from
// cfg.Publishers goroutines.
func fillQueue(ctx context.Context, cfg FleetConfig, brokerURL string, L ledger.Ledger) error {
	b, err := broker.Open(ctx, brokerURL, &broker.Options{Logger: cfg.Logger, Dedup: L})
	if err != nil {
		return err
	}
	defer b.Close()
	client, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		return err
	}
	return publish(ctx, Config{Publishers: cfg.Publishers}, LedgerOn, brokerURL, client, cfg.Tasks)
}

// countCompleted counts the ledger's completed tasks (the run's check).
func countCompleted(ctx context.Context, dsn string, L ledger.Ledger) int {
	if isPostgres(dsn) {
		conn, err := pgx.Connect(ctx, pgxDSN(dsn))
		if err != nil {
			return -1
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schemaOf(dsn), "ledger_tasks"}.Sanitize()+` WHERE state = 'completed'`).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	n, after := 0, ""
	for {
		ts, err := L.List(ctx, ledger.Filter{States: []ledger.State{ledger.Completed}, Limit: 1000, After: after})
		if err != nil {
			return -1
		}
		n += len(ts)
		if len(ts) < 1000 {
			return n
		}
		after = ts[len(ts)-1].ID
	}
}

func startWorker(ctx context.Context, cfg FleetConfig, brokerURL, dsn string, i int) (*worker, error) {
	args := []string{"--broker", brokerURL, "--ledger", dsn, "--slots", strconv.Itoa(cfg.Slots), "--prefetch", strconv.Itoa(cfg.Prefetch),
		"--worker-id", "fleet-" + strconv.Itoa(i)}
	cmd := cfg.Command(ctx, args)
	w := &worker{cmd: cmd, ready: make(chan struct{}), ended: make(chan struct{})}
	var err error
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = &lockedWriter{w: &w.errs, mu: &w.mu}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting worker %d: %w", i, err)
	}
	go func() {
		defer close(w.ended)
		sc := bufio.NewScanner(stdout)
		readyOnce := sync.Once{}
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 2 {
				continue
			}
			v, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "ready":
				readyOnce.Do(func() { close(w.ready) })
			case "cpu0":
				w.cpu0.Store(v)
			case "done":
				w.done.Store(v)
			case "cpu1":
				w.cpu1.Store(v)
			}
		}
		_ = cmd.Wait()
	}()
	return w, nil
}

func (w *worker) stderr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.TrimSpace(w.errs.String())
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	if s == "" {
		return "(no output on stderr)"
	}
	return s
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// FleetWorkerConfig is one worker process of a fleet run.
type FleetWorkerConfig struct {
	BrokerURL, LedgerDSN string
	Slots, Prefetch      int
	WorkerID             string
	Logger               *slog.Logger
}

// FleetWorker is the worker side of a fleet run (the command line's hidden
// `bench fleet-worker`): it opens the broker and the ledger, registers the
// no-op handler, prints "ready", waits for "go" on in, runs the Server,
// prints "cpu0 <ns>" and then "done <n>" as tasks complete, and on "stop"
// (or the end of in) prints "cpu1 <ns>" — its own CPU, from getrusage —
// and stops.
func FleetWorker(ctx context.Context, cfg FleetWorkerConfig, in io.Reader, out io.Writer) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	L, err := ledger.Open(ctx, cfg.LedgerDSN)
	if err != nil {
		return err
	}
	defer L.Close()
	b, err := broker.Open(ctx, cfg.BrokerURL, &broker.Options{Logger: cfg.Logger, Dedup: L})
	if err != nil {
		return err
	}
	defer b.Close()
	var succeeded atomic.Int64
	changed := make(chan struct{}, 1)
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, Slots: cfg.Slots, Prefetch: cfg.Prefetch, Logger: cfg.Logger,
		WorkerID: cfg.WorkerID,
		Observer: func(e scheduler.Event) {
			if e.Type == scheduler.EventSucceeded {
				succeeded.Add(1)
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		}})
	if err != nil {
		return err
	}
	if err := switchyard.Register(srv, func(context.Context, *switchyard.Task[benchArgs]) error { return nil }, nil); err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(k string, v int64) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%s %d\n", k, v)
	}
	say("ready", 1)
	lines := bufio.NewScanner(in)
	if !lines.Scan() || lines.Text() != "go" {
		return errors.New("fleet worker: no go")
	}
	say("cpu0", int64(processCPU()))
	if err := srv.Start(ctx); err != nil {
		return err
	}
	stop := make(chan struct{})
	go func() {
		for lines.Scan() && lines.Text() != "stop" {
		}
		close(stop)
	}()
	var last int64
	report := time.NewTicker(10 * time.Millisecond)
	defer report.Stop()
loop:
	for {
		select {
		case <-report.C:
			if n := succeeded.Load(); n != last {
				last = n
				say("done", n)
			}
		case <-stop:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	say("cpu1", int64(processCPU()))
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Stop(sctx)
}

// pgCounters reads the database's committed transactions and the
// server's WAL bytes and WAL syncs.
func pgCounters(ctx context.Context, dsn string) ([3]int64, bool) {
	var c [3]int64
	if dsn == "" {
		return c, false
	}
	conn, err := pgx.Connect(ctx, pgxDSN(dsn))
	if err != nil {
		return c, false
	}
	defer conn.Close(context.Background())
	err = conn.QueryRow(ctx, `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
		wal_bytes::bigint, wal_sync FROM pg_stat_wal`).Scan(&c[0], &c[1], &c[2])
	return c, err == nil
}

// waitBackendsGone waits, at most for limit, until no backend of the
// database has application_name app; false if some still had it then (or
// the check failed: the counters are then left unreported).
func waitBackendsGone(ctx context.Context, dsn, app string, limit time.Duration) bool {
	if dsn == "" || app == "" {
		return false
	}
	conn, err := pgx.Connect(ctx, pgxDSN(dsn))
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(limit)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n); err != nil {
			return false
		}
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// appName is the application_name of a PostgreSQL DSN.
func appName(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return u.Query().Get("application_name")
}

// lockSampler counts the run's backends (those whose application_name is
// the run's) waiting on a lock,
// by wait event (relation extension, a row's transaction, a tuple, …).
type lockSampler struct {
	stopc   chan struct{}
	done    chan struct{}
	max     int
	sum     int
	n       int
	byEvent map[string]int
}

func startLockSampler(ctx context.Context, dsn, app string) *lockSampler {
	s := &lockSampler{stopc: make(chan struct{}), done: make(chan struct{}), byEvent: map[string]int{}}
	if dsn == "" {
		close(s.done)
		return s
	}
	go func() {
		defer close(s.done)
		conn, err := pgx.Connect(ctx, pgxDSN(dsn))
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-s.stopc:
				return
			case <-ctx.Done():
				return
			}
			rows, err := conn.Query(ctx, `SELECT wait_event, count(*)::int FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name = $1 GROUP BY wait_event`, app)
			if err != nil {
				return
			}
			k := 0
			for rows.Next() {
				var ev string
				var c int
				if rows.Scan(&ev, &c) == nil {
					s.byEvent[ev] += c
					k += c
				}
			}
			rows.Close()
			s.n++
			s.sum += k
			s.max = max(s.max, k)
		}
	}()
	return s
}

// stop ends the sampling: the most waiters in one sample, the mean per
// sample, and the waiters seen per wait event (summed over samples).
func (s *lockSampler) stop() (int, float64, map[string]int) {
	close(s.stopc)
	<-s.done
	if s.n == 0 {
		return 0, 0, nil
	}
	return s.max, float64(s.sum) / float64(s.n), s.byEvent
}

// schemaOf is the schema parameter of a PostgreSQL ledger DSN.
func schemaOf(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Query().Get("schema") != "" {
		return u.Query().Get("schema")
	}
	return "public"
}

// WriteTable prints the fleet report as a Markdown table, with each
// process count's throughput as a ratio to the first's.
func (rep *FleetReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "broker %s · ledger %s · %d CPUs\n", rep.Broker, rep.Ledger, rep.CPUs)
	fmt.Fprintf(w, "%d tasks a run, medians of %d runs; %s; each worker a Server with slots %d, prefetch %d\n",
		rep.Tasks, rep.Runs, rep.FillMethod, rep.Slots, rep.Prefetch)
	fmt.Fprintf(w, "load average: %s at start (%s), %s at end\n\n", rep.LoadStart, rep.Started.Format("15:04 MST"), rep.LoadEnd)
	fmt.Fprintln(w, "| worker processes | drain tasks/s | ratio to first | workers' CPU µs/task (sum) | PostgreSQL CPU µs/task | PostgreSQL commits / WAL flushes / WAL KB per task | lock waiters: max / median mean (by wait event, summed over samples and runs) | tasks per worker | fill tasks/s | completed in ledger |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	var base float64
	for i, r := range rep.Rows {
		if i == 0 {
			base = r.PerSecond()
		}
		ratio, pg, locks, pgc := "", "", "", ""
		if r.Commits > 0 {
			pgc = fmt.Sprintf("%.2f / %.2f / %.1f", r.Commits, r.WALSyncs, r.WALBytes/1024)
		}
		if base > 0 {
			ratio = fmt.Sprintf("%.2f", r.PerSecond()/base)
		}
		if r.PGCPU > 0 {
			pg = fmt.Sprintf("%.0f", us(r.PGCPU))
			if r.PGExec > 0 {
				pg += fmt.Sprintf(" (statements exec %.0f)", us(r.PGExec))
			}
		}
		if isPostgres(rep.Ledger) {
			locks = fmt.Sprintf("%d / %.2f", r.LockWaitMax, r.LockWaitMean)
			var evs []string
			for ev, n := range r.LockWaitEvents {
				evs = append(evs, fmt.Sprintf("%s %d", ev, n))
			}
			sort.Strings(evs)
			if len(evs) > 0 {
				locks += " (" + strings.Join(evs, ", ") + ")"
			}
		}
		per := make([]string, len(r.PerWorker))
		for j, n := range r.PerWorker {
			per[j] = strconv.Itoa(n)
		}
		fill := 0.0
		if r.Fill > 0 {
			fill = float64(r.Tasks) / r.Fill.Seconds()
		}
		fmt.Fprintf(w, "| %d | %.0f | %s | %.0f | %s | %s | %s | %s | %.0f | %d |\n", r.Procs, r.PerSecond(), ratio, us(r.ClientCPU), pg, pgc, locks,
			strings.Join(per, " + "), fill, r.Completed)
	}
	return nil
}

// WriteJSON prints the fleet report as JSON.
func (rep *FleetReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
