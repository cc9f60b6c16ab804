package runtimebench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/internal/benchkit"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Mode is one kind of measured run.
type Mode string

// The modes, in the order a run takes them.
const (
	Raw             Mode = "raw"
	LedgerOff       Mode = "ledger-off"
	LedgerOn        Mode = "ledger-on"
	LedgerOnBulk    Mode = "ledger-on-bulk"
	LedgerOnStepEff Mode = "ledger-on-step-effect"
	// The keyed modes give every task one of Config.Keys ordering keys
	// (task i gets key i mod Keys): the cost of ordering by key. Without
	// the ledger they run only on brokers that order natively.
	LedgerOffKeyed Mode = "ledger-off-keyed"
	LedgerOnKeyed  Mode = "ledger-on-keyed"
	// LedgerOffBulk is LedgerOff enqueuing through EnqueueMany from one
	// goroutine, 1,000 a call (as LedgerOnBulk and river's InsertMany in
	// the peers module).
	LedgerOffBulk Mode = "ledger-off-bulk"
	// LedgerOffBatched is LedgerOff enqueuing through EnqueueMany in the
	// shape of RawClientBatched: Publishers goroutines each calling it with
	// chunks of rawChunk (100; 10 on SQS). It is the row the issue's
	// "ledger off ≥ 0.7× the raw client" target compares with
	// RawClientBatched.
	LedgerOffBatched Mode = "ledger-off-batched"
)

// ledgerOff says whether a mode runs the runtime without a ledger.
func ledgerOff(m Mode) bool {
	return m == LedgerOff || m == LedgerOffKeyed || m == LedgerOffBulk || m == LedgerOffBatched
}

// enqueueMany says whether a mode enqueues through Client.EnqueueMany.
func enqueueMany(m Mode) bool {
	return m == LedgerOffBulk || m == LedgerOnBulk || m == LedgerOffBatched
}

// Config describes one measurement. Zero fields take their defaults.
type Config struct {
	// BrokerURL is the broker; empty means a fresh embedded file in a
	// temporary directory.
	BrokerURL string
	// LedgerDSN is the ledger (sqlite:///path, postgres://…); a fresh
	// schema or file is derived from it for every run. Empty skips the
	// ledger-on modes.
	LedgerDSN string
	// Tasks per run. Defaults to 20,000.
	Tasks int
	// Publishers calling Client.Enqueue at once. Defaults to 8.
	Publishers int
	// Slots and Prefetch of the Server. Default 64 and 128.
	Slots, Prefetch int
	// Rate, when positive, paces the publishers to this many tasks/s in
	// total, for latency at a given load; zero publishes as fast as
	// possible (drain throughput).
	Rate int
	// Delay, when positive, enqueues every runtime row's task to run Delay
	// after its Enqueue (EnqueueOpts.Delay, EnqueueItem.Opts.Delay: the
	// "scheduled" lane and the broker's delay path), and P50/P99 count
	// from the requested run time (enqueue time + Delay), not from the
	// enqueue. The raw rows ignore it. Defaults to 0: every task due at
	// once.
	Delay time.Duration
	// Modes limits Suite to these modes, in this order (nil: Modes).
	Modes []Mode
	// Keys is the number of ordering keys of the keyed modes. Defaults to
	// 1,000.
	Keys int
	// Timeout bounds one run. Defaults to 5 minutes.
	Timeout time.Duration
	// Logger receives the runtime's warnings and cleanup failures.
	// Defaults to discarding them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Tasks <= 0 {
		c.Tasks = 20000
	}
	if c.Keys <= 0 {
		c.Keys = 1000
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

// Result is one measured run.
type Result struct {
	Mode    Mode          `json:"mode"`
	Tasks   int           `json:"tasks"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// P50 and P99 are enqueue → handler start (zero for raw).
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	// ClientCPU is this process's CPU time per task during the run.
	ClientCPU time.Duration `json:"client_cpu_per_task_ns"`
	// PGCPU is the PostgreSQL server's CPU time per task (see the package
	// doc); zero when not measured.
	PGCPU time.Duration `json:"pg_cpu_per_task_ns,omitempty"`
	// PGExec is pg_stat_statements' total_exec_time per task, when the
	// extension is installed.
	PGExec time.Duration `json:"pg_exec_per_task_ns,omitempty"`
	// Duplicates counts the raw-client rows' deliveries of a message
	// already consumed in the run (at-least-once redeliveries), and the
	// runtime rows' handler starts of a task already started in the run.
	Duplicates int `json:"duplicates,omitempty"`
	// Skipped says why the mode did not run (e.g. no EnqueueMany yet).
	Skipped string `json:"skipped,omitempty"`
}

// PerSecond is the throughput.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Tasks) / r.Elapsed.Seconds()
}

// NewNamespace returns a fresh namespace name usable on every adapter
// (letters and digits only).
func NewNamespace(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Run measures one mode once.
func Run(ctx context.Context, cfg Config, mode Mode) (Result, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	ns := NewNamespace("sybench")
	brokerURL, cleanBroker, err := brokerFor(ctx, cfg.BrokerURL, ns, cfg.Logger)
	if err != nil {
		return Result{}, err
	}
	defer cleanBroker()
	if mode == Raw {
		return runRaw(ctx, brokerURL, cfg.Tasks)
	}
	if mode == RawClient || mode == RawClientBatched {
		return runRawClient(ctx, cfg, mode, brokerURL, ns)
	}
	var L ledger.Ledger
	var pgDSN string
	if enqueueMany(mode) && bulkEnqueue == nil {
		return Result{Mode: mode, Skipped: "Client.EnqueueMany is not in this build"}, nil
	}
	if !ledgerOff(mode) {
		if cfg.LedgerDSN == "" {
			return Result{Mode: mode, Skipped: "no ledger DSN"}, nil
		}
		dsn, cleanLedger, err := ledgerFor(cfg.LedgerDSN, ns, cfg.Logger)
		if err != nil {
			return Result{}, err
		}
		defer cleanLedger()
		if L, err = ledger.Open(ctx, dsn); err != nil {
			return Result{}, err
		}
		defer L.Close()
		if isPostgres(dsn) {
			pgDSN = dsn
		}
	}
	if mode == LedgerOffKeyed {
		b, err := broker.Open(ctx, brokerURL, nil)
		if err != nil {
			return Result{}, err
		}
		native := b.Capabilities().Ordering
		b.Close()
		if !native {
			return Result{Mode: mode, Skipped: "the broker does not order by key natively: keyed work needs the ledger"}, nil
		}
	}
	return runRuntime(ctx, cfg, mode, brokerURL, L, pgDSN)
}

func runRaw(ctx context.Context, brokerURL string, n int) (Result, error) {
	b, err := broker.Open(ctx, brokerURL, nil)
	if err != nil {
		return Result{}, err
	}
	defer b.Close()
	cpu0 := processCPU()
	r, err := benchkit.EndToEnd(ctx, b, "rawbench", n, 64, 100, 2)
	if err != nil {
		return Result{}, fmt.Errorf("raw loop: %w", err)
	}
	return Result{Mode: Raw, Tasks: r.Messages, Elapsed: r.Elapsed, ClientCPU: (processCPU() - cpu0) / time.Duration(max(r.Messages, 1))}, nil
}

// benchArgs is the task: the enqueue time (plus Config.Delay: the
// requested run time), so the handler can measure enqueue → start.
type benchArgs struct {
	T int64 `json:"t"`
}

func (benchArgs) Kind() string { return "bench.runtime" }

// bulkEnqueue enqueues the tasks through Client.EnqueueMany in chunks of
// chunk, to run delay after the call (0: at once), stamping each item's
// requested run time just before its chunk's call, and returns the first
// per-item error.
var bulkEnqueue = func(ctx context.Context, c *switchyard.Client, args []benchArgs, chunk int, delay time.Duration) error {
	var opts *switchyard.EnqueueOpts
	if delay > 0 {
		opts = &switchyard.EnqueueOpts{Delay: delay}
	}
	for lo := 0; lo < len(args); lo += chunk {
		hi := min(lo+chunk, len(args))
		items := make([]switchyard.EnqueueItem, hi-lo)
		now := time.Now().Add(delay).UnixNano()
		for i := range items {
			args[lo+i].T = now
			items[i] = switchyard.EnqueueItem{Args: args[lo+i], Opts: opts} // the default lane, as Enqueue's rows
		}
		res, err := c.EnqueueMany(ctx, items)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
		}
	}
	return nil
}

// bulkChunk is the bulk rows' EnqueueMany size, as river's InsertMany in
// the peers module.
const bulkChunk = 1000

func runRuntime(ctx context.Context, cfg Config, mode Mode, brokerURL string, L ledger.Ledger, pgDSN string) (Result, error) {
	opts := &broker.Options{Logger: cfg.Logger}
	if L != nil {
		opts.Dedup = L
	}
	b, err := broker.Open(ctx, brokerURL, opts)
	if err != nil {
		return Result{}, err
	}
	defer b.Close()
	client, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		return Result{}, err
	}
	n := cfg.Tasks
	lat := make([]time.Duration, n)
	var started, succeeded atomic.Int64
	var seenMu sync.Mutex
	seen := make(map[string]struct{}, n)
	dups := 0
	all := make(chan struct{})
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, Slots: cfg.Slots, Prefetch: cfg.Prefetch, Logger: cfg.Logger,
		Observer: func(e scheduler.Event) {
			if e.Type == scheduler.EventSucceeded && succeeded.Add(1) == int64(n) {
				close(all)
			}
		}})
	if err != nil {
		return Result{}, err
	}
	stepEffect := mode == LedgerOnStepEff
	err = switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[benchArgs]) error {
		d := time.Since(time.Unix(0, t.Args.T))
		if i := started.Add(1) - 1; i < int64(n) {
			lat[i] = d
		}
		seenMu.Lock()
		if _, ok := seen[t.ID]; ok {
			dups++
		} else {
			seen[t.ID] = struct{}{}
		}
		seenMu.Unlock()
		if stepEffect {
			if _, err := switchyard.Step(ctx, "s", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return err
			}
			if _, err := switchyard.Effect(ctx, "e", func(context.Context) (int, error) { return 1, nil }, nil); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	if err != nil {
		return Result{}, err
	}
	pg := startPGSample(ctx, pgDSN)
	cpu0 := processCPU()
	start := time.Now()
	if err := srv.Start(ctx); err != nil {
		return Result{}, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Stop(sctx)
	}()
	errc := make(chan error, 1)
	go func() { errc <- publish(ctx, cfg, mode, brokerURL, client, n) }()
	select {
	case <-all:
	case err := <-errc:
		if err != nil {
			return Result{}, fmt.Errorf("enqueue: %w", err)
		}
		select {
		case <-all:
		case <-ctx.Done():
			return Result{}, fmt.Errorf("%s: %d of %d tasks done when the run timed out", mode, succeeded.Load(), n)
		}
	case <-ctx.Done():
		return Result{}, fmt.Errorf("%s: %d of %d tasks done when the run timed out", mode, succeeded.Load(), n)
	}
	el := time.Since(start)
	cpu := processCPU() - cpu0
	seenMu.Lock()
	r := Result{Mode: mode, Tasks: n, Elapsed: el, ClientCPU: cpu / time.Duration(n), Duplicates: dups}
	seenMu.Unlock()
	r.PGCPU, r.PGExec = pg.perTask(ctx, n)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r.P50, r.P99 = lat[n/2], lat[min(n-1, n*99/100)]
	return r, nil
}

// publish enqueues n tasks from cfg.Publishers goroutines (or through
// bulkEnqueue), paced to cfg.Rate when it is set (not the EnqueueMany
// rows).
func publish(ctx context.Context, cfg Config, mode Mode, brokerURL string, c *switchyard.Client, n int) error {
	switch mode {
	case LedgerOnBulk, LedgerOffBulk:
		return bulkEnqueue(ctx, c, make([]benchArgs, n), bulkChunk, cfg.Delay)
	case LedgerOffBatched:
		args := make([]benchArgs, n)
		chunk := 100
		if u, err := url.Parse(brokerURL); err == nil {
			chunk = rawChunk(rawScheme(u))
		}
		send := func(lo, hi int) error { return bulkEnqueue(ctx, c, args[lo:hi], hi-lo, cfg.Delay) }
		return publishers(ctx, cfg.Publishers, n, chunk, func() (func(lo, hi int) error, func(), error) { return send, func() {}, nil })
	}
	keyed := mode == LedgerOnKeyed || mode == LedgerOffKeyed
	var next atomic.Int64
	var tick <-chan time.Time
	if cfg.Rate > 0 {
		t := time.NewTicker(time.Second / time.Duration(cfg.Rate))
		defer t.Stop()
		tick = t.C
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for p := 0; p < cfg.Publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if tick != nil {
					select {
					case <-tick:
					case <-ctx.Done():
						return
					}
				}
				var opts *switchyard.EnqueueOpts
				if keyed || cfg.Delay > 0 {
					opts = &switchyard.EnqueueOpts{Delay: cfg.Delay}
				}
				if keyed {
					opts.OrderingKey = "k" + strconv.FormatInt(i%int64(cfg.Keys), 10)
				}
				if _, err := c.Enqueue(ctx, benchArgs{T: time.Now().Add(cfg.Delay).UnixNano()}, opts); err != nil {
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

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// brokerFor returns brokerURL with namespace ns (a fresh embedded file
// when brokerURL is empty or "embedded") and a function removing what the
// run created there.
func brokerFor(ctx context.Context, brokerURL, ns string, log *slog.Logger) (string, func(), error) {
	if brokerURL == "" || brokerURL == "embedded" {
		dir, err := os.MkdirTemp("", "switchyard-runtimebench-")
		if err != nil {
			return "", nil, err
		}
		return "embedded://" + filepath.Join(dir, "queue.db") + "?namespace=" + ns, func() { _ = os.RemoveAll(dir) }, nil
	}
	u, err := url.Parse(brokerURL)
	if err != nil {
		return "", nil, broker.Invalidf("runtimebench: broker URL does not parse")
	}
	if strings.EqualFold(u.Scheme, "amqp") {
		u.Scheme = "rabbitmq" // the adapter's scheme; amqp:// is what people copy from RabbitMQ's docs
	}
	q := u.Query()
	q.Set("namespace", ns)
	u.RawQuery = q.Encode()
	if strings.EqualFold(u.Scheme, "nats") {
		u.Path = "/" // the namespace may also sit in the path: the query's wins only when the path is empty
	}
	s := u.String()
	return s, func() { CleanNamespace(s, ns, log) }, nil
}

// ledgerFor returns a DSN for a fresh ledger derived from dsn — a new
// schema on PostgreSQL, a new file beside the given one on SQLite — and a
// function removing it.
func ledgerFor(dsn, ns string, log *slog.Logger) (string, func(), error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", nil, broker.Invalidf("runtimebench: ledger DSN does not parse")
	}
	switch strings.ToLower(u.Scheme) {
	case "postgres", "postgresql":
		q := u.Query()
		q.Set("schema", ns)
		u.RawQuery = q.Encode()
		fresh := u.String()
		return fresh, func() { dropSchema(fresh, ns, log) }, nil
	case "sqlite":
		p := u.Path
		if p == "" {
			p = u.Opaque
		}
		if p == "" || p == ":memory:" {
			return dsn, func() {}, nil
		}
		ext := filepath.Ext(p)
		fresh := strings.TrimSuffix(p, ext) + "-" + ns + ext
		if u.Path != "" {
			u.Path = fresh
		} else {
			u.Opaque = fresh
		}
		return u.String(), func() {
			for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
				_ = os.Remove(fresh + suffix)
			}
		}, nil
	}
	return "", nil, broker.Invalidf("runtimebench: ledger scheme %q: want sqlite or postgres", u.Scheme)
}

func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Median returns the run whose throughput is the median of rs, with the
// medians of each other figure (computed separately).
func Median(rs []Result) Result {
	if len(rs) == 0 {
		return Result{}
	}
	out := rs[0]
	if out.Skipped != "" {
		return out
	}
	med := func(f func(Result) time.Duration) time.Duration {
		xs := make([]time.Duration, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
		return xs[len(xs)/2]
	}
	// Elapsed's median is the throughput's median: every run has the same
	// task count.
	out.Elapsed = med(func(r Result) time.Duration { return r.Elapsed })
	out.P50 = med(func(r Result) time.Duration { return r.P50 })
	out.P99 = med(func(r Result) time.Duration { return r.P99 })
	out.ClientCPU = med(func(r Result) time.Duration { return r.ClientCPU })
	out.PGCPU = med(func(r Result) time.Duration { return r.PGCPU })
	out.PGExec = med(func(r Result) time.Duration { return r.PGExec })
	return out
}

var errNoProc = errors.New("no /proc")
