package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"log/slog"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// The demo pipeline: ingest → chunk → embed (one task per chunk) →
// summarize → sync. Documents a user is waiting for travel the interactive
// lane; the backlog travels the batch lane. The model is fake: slow, and
// sometimes overloaded (a transient error) or stuck (a timeout).

type ingestArgs struct {
	Doc         string `json:"doc"`
	Interactive bool   `json:"interactive"`
}

func (ingestArgs) Kind() string { return "demo.ingest" }

type chunkArgs struct {
	Doc         string `json:"doc"`
	Interactive bool   `json:"interactive"`
}

func (chunkArgs) Kind() string { return "demo.chunk" }

type embedArgs struct {
	Doc         string `json:"doc"`
	Chunk       int    `json:"chunk"`
	Of          int    `json:"of"`
	Interactive bool   `json:"interactive"`
}

func (embedArgs) Kind() string { return "demo.embed" }

type summarizeArgs struct {
	Doc         string `json:"doc"`
	Interactive bool   `json:"interactive"`
}

func (summarizeArgs) Kind() string { return "demo.summarize" }

type syncArgs struct {
	Doc     string `json:"doc"`
	Summary string `json:"summary"`
}

func (syncArgs) Kind() string { return "demo.sync" }

var stages = []string{"ingest", "chunk", "embed", "summarize", "sync"}

// fakeModel is a slow model that sometimes fails.
type fakeModel struct {
	mu          sync.Mutex
	rng         *rand.Rand
	failRate    float64
	timeoutRate float64
	calls       atomic.Int64
	failures    atomic.Int64
	timeouts    atomic.Int64
}

var errOverloaded = errors.New("model: 503 overloaded, try again")

func (m *fakeModel) call(ctx context.Context, base time.Duration) error {
	m.calls.Add(1)
	m.mu.Lock()
	r, jitter := m.rng.Float64(), m.rng.Float64()
	m.mu.Unlock()
	latency := base + time.Duration(jitter*float64(base))
	stuck := r < m.timeoutRate
	if stuck {
		latency = 50 * base // outlives the handler's timeout
	}
	select {
	case <-ctx.Done():
		if stuck {
			m.timeouts.Add(1)
		}
		return ctx.Err()
	case <-time.After(latency):
	}
	if r < m.timeoutRate+m.failRate {
		m.failures.Add(1)
		return errOverloaded
	}
	return nil
}

type demoStats struct {
	mu        sync.Mutex
	done      map[string]int // stage → completed tasks
	retries   int
	dead      map[broker.Reason]int
	inflight  int
	chunks    map[string]map[int]bool // doc → embedded chunks
	start     map[string]time.Time    // doc → ingest enqueued
	finish    map[string]time.Duration
	syncs     map[string]int // doc → sync effects executed
	dupes     int
	interDocs map[string]bool
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	docs := fs.Int("docs", 24, "documents in the batch backlog")
	inter := fs.Int("interactive", 4, "documents a user is waiting for (interactive lane), enqueued after the backlog")
	chunks := fs.Int("chunks", 6, "chunks per document")
	slots := fs.Int("slots", 8, "worker slots")
	failRate := fs.Float64("fail-rate", 0.10, "fraction of model calls that fail transiently")
	timeoutRate := fs.Float64("timeout-rate", 0.03, "fraction of model calls that hang past the handler's timeout")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "random seed for the fake model")
	brokerURL := fs.String("broker", "", "broker URL (default: a fresh embedded database in a temporary directory)")
	ledgerDSN := fs.String("ledger", "", "ledger DSN (default: a fresh SQLite ledger beside the broker; \"none\" to run without)")
	quiet := fs.Bool("quiet", false, "print only the summary")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *docs < 0 || *inter < 0 || *chunks < 1 || *slots < 4 || *failRate < 0 || *timeoutRate < 0 || *failRate+*timeoutRate > 0.9 {
		fmt.Fprintln(stderr, "demo: need docs ≥ 0, interactive ≥ 0, chunks ≥ 1, slots ≥ 4, and fail-rate + timeout-rate ≤ 0.9")
		return errUsage
	}
	dir, err := os.MkdirTemp("", "switchyard-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if *brokerURL == "" {
		*brokerURL = "embedded://" + filepath.Join(dir, "broker.db")
	}
	if *ledgerDSN == "" {
		*ledgerDSN = "sqlite://" + filepath.Join(dir, "ledger.db")
	}

	// Every run's idempotency keys are its own: a run on the files of an
	// earlier one (--broker, --ledger) does new work instead of finding
	// every task already done and waiting for progress that never comes.
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	runKey := func(k string) string { return "demo-" + runID + "/" + k }

	var L ledger.Ledger
	if *ledgerDSN != "none" {
		L, err = ledger.Open(ctx, *ledgerDSN)
		if err != nil {
			return fmt.Errorf("open ledger: %w", err)
		}
		defer L.Close()
	}
	bopts := &broker.Options{}
	if L != nil {
		bopts.Dedup = L
	}
	if bopts.Codec, err = envCodec(); err != nil {
		return err
	}
	b, err := broker.Open(ctx, *brokerURL, bopts)
	if err != nil {
		return fmt.Errorf("open broker: %w", err)
	}
	defer b.Close()

	client, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		return err
	}
	st := &demoStats{done: map[string]int{}, dead: map[broker.Reason]int{}, chunks: map[string]map[int]bool{},
		start: map[string]time.Time{}, finish: map[string]time.Duration{}, syncs: map[string]int{}, interDocs: map[string]bool{}}
	model := &fakeModel{rng: rand.New(rand.NewPCG(*seed, *seed^0x9e3779b97f4a7c15)), failRate: *failRate, timeoutRate: *timeoutRate}
	quietLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{
		Slots: *slots, Lease: 10 * time.Second, PollWait: 200 * time.Millisecond, Ledger: L, Logger: quietLog,
		Retry: scheduler.RetryPolicy{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond, MaxAttempts: 8},
		Observer: func(e scheduler.Event) {
			st.mu.Lock()
			defer st.mu.Unlock()
			switch e.Type {
			case scheduler.EventStarted:
				st.inflight++
			case scheduler.EventSucceeded:
				st.inflight--
				st.done[strings.TrimPrefix(e.Kind, "demo.")]++
			case scheduler.EventRetried:
				st.inflight--
				st.retries++
			case scheduler.EventDead:
				if e.Attempt > 0 && e.Reason != broker.ReasonUnknownKind {
					st.inflight--
				}
				st.dead[e.Reason]++
			case scheduler.EventDuplicate:
				st.dupes++
			case scheduler.EventSnoozed, scheduler.EventCancelled, scheduler.EventReturned, scheduler.EventAwaiting, scheduler.EventLeaseLost:
				st.inflight--
			}
		},
	})
	if err != nil {
		return err
	}
	lane := func(interactive bool) string {
		if interactive {
			return lanes.Interactive
		}
		return lanes.Batch
	}

	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[ingestArgs]) error {
		// A corrupt upload fails for good: a dead letter with a reason.
		if strings.HasPrefix(t.Args.Doc, "corrupt") {
			return switchyard.Permanent(fmt.Errorf("ingest %s: not a PDF (bad magic bytes)", t.Args.Doc))
		}
		_, err := client.Enqueue(ctx, chunkArgs{Doc: t.Args.Doc, Interactive: t.Args.Interactive},
			&switchyard.EnqueueOpts{Lane: lane(t.Args.Interactive), IdempotencyKey: runKey("chunk/" + t.Args.Doc)})
		return err
	}, nil))
	must(switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[chunkArgs]) error {
		for i := 0; i < *chunks; i++ {
			if _, err := client.Enqueue(ctx, embedArgs{Doc: t.Args.Doc, Chunk: i, Of: *chunks, Interactive: t.Args.Interactive},
				&switchyard.EnqueueOpts{Lane: lane(t.Args.Interactive), IdempotencyKey: runKey(fmt.Sprintf("embed/%s/%d", t.Args.Doc, i))}); err != nil {
				return err
			}
		}
		return nil
	}, nil))
	must(switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[embedArgs]) error {
		// Memoised: a retry after a later failure does not pay for the
		// embedding again.
		if _, err := switchyard.Step(ctx, "embed", func(ctx context.Context) ([]float32, error) {
			if err := model.call(ctx, 15*time.Millisecond); err != nil {
				return nil, err
			}
			return []float32{float32(t.Args.Chunk), 0.5, 0.25}, nil
		}); err != nil {
			return err
		}
		st.mu.Lock()
		set := st.chunks[t.Args.Doc]
		if set == nil {
			set = map[int]bool{}
			st.chunks[t.Args.Doc] = set
		}
		set[t.Args.Chunk] = true
		complete := len(set) == t.Args.Of
		st.mu.Unlock()
		if complete {
			_, err := client.Enqueue(ctx, summarizeArgs{Doc: t.Args.Doc, Interactive: t.Args.Interactive},
				&switchyard.EnqueueOpts{Lane: lane(t.Args.Interactive), IdempotencyKey: runKey("summarize/" + t.Args.Doc)})
			return err
		}
		return nil
	}, &switchyard.HandlerOpts{Timeout: 300 * time.Millisecond}))
	must(switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[summarizeArgs]) error {
		summary, err := switchyard.Step(ctx, "summarize", func(ctx context.Context) (string, error) {
			if err := model.call(ctx, 40*time.Millisecond); err != nil {
				return "", err
			}
			return "summary of " + t.Args.Doc, nil
		})
		if err != nil {
			return err
		}
		_, err = client.Enqueue(ctx, syncArgs{Doc: t.Args.Doc, Summary: summary},
			&switchyard.EnqueueOpts{Lane: lane(t.Args.Interactive), IdempotencyKey: runKey("sync/" + t.Args.Doc)})
		return err
	}, &switchyard.HandlerOpts{Timeout: 800 * time.Millisecond}))
	must(switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[syncArgs]) error {
		// The side effect: writing the summary to the customer's system.
		// Recorded in the ledger, it is never done twice.
		_, err := switchyard.Effect(ctx, "crm.write/"+t.Args.Doc, func(ctx context.Context) (string, error) {
			st.mu.Lock()
			st.syncs[t.Args.Doc]++
			if s, ok := st.start[t.Args.Doc]; ok {
				st.finish[t.Args.Doc] = time.Since(s)
			}
			st.mu.Unlock()
			return "crm-record-" + t.Args.Doc, nil
		}, nil)
		return err
	}, nil))

	began := time.Now()
	// The backlog first, then the documents users are waiting for.
	enqueue := func(doc string, interactive bool) error {
		st.mu.Lock()
		st.start[doc] = time.Now()
		if interactive {
			st.interDocs[doc] = true
		}
		st.mu.Unlock()
		_, err := client.Enqueue(ctx, ingestArgs{Doc: doc, Interactive: interactive},
			&switchyard.EnqueueOpts{Lane: lane(interactive), IdempotencyKey: runKey("ingest/" + doc)})
		return err
	}
	for i := 0; i < *docs; i++ {
		if err := enqueue(fmt.Sprintf("report-%03d.pdf", i), false); err != nil {
			return err
		}
	}
	if err := enqueue("corrupt-upload.pdf", false); err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	time.Sleep(100 * time.Millisecond) // let the backlog occupy the workers
	for i := 0; i < *inter; i++ {
		if err := enqueue(fmt.Sprintf("user-upload-%d.pdf", i), true); err != nil {
			return err
		}
	}

	want := *docs + *inter
	tty := isTerminal(stdout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPrint := time.Time{}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st.mu.Lock()
		synced := st.done["sync"]
		deadCount := 0
		for _, n := range st.dead {
			deadCount += n
		}
		line := progressLine(st, time.Since(began))
		st.mu.Unlock()
		finished := synced >= want && deadCount >= 1
		if !*quiet && (tty || time.Since(lastPrint) >= time.Second || finished) {
			if tty {
				fmt.Fprintf(stdout, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(stdout, line)
			}
			lastPrint = time.Now()
		}
		if finished {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pipeline did not finish within 2 minutes (%d of %d documents synced)", synced, want)
		}
		select {
		case <-ctx.Done():
			_ = srv.StopAndCancel(context.Background())
			return ctx.Err()
		case <-tick.C:
		}
	}
	if tty && !*quiet {
		fmt.Fprintln(stdout)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Stop(stopCtx); err != nil {
		return err
	}
	return printSummary(ctx, stdout, b, L, st, model, time.Since(began), want)
}

func progressLine(st *demoStats, el time.Duration) string {
	var sb strings.Builder
	for i, s := range stages {
		if i > 0 {
			sb.WriteString(" → ")
		}
		fmt.Fprintf(&sb, "%s %d", s, st.done[s])
	}
	dead := 0
	for _, n := range st.dead {
		dead += n
	}
	fmt.Fprintf(&sb, " | in flight %d | retries %d | dead letters %d | %.1fs", max(st.inflight, 0), st.retries, dead, el.Seconds())
	return sb.String()
}

func printSummary(ctx context.Context, w io.Writer, b *broker.Broker, L ledger.Ledger, st *demoStats, m *fakeModel, el time.Duration, want int) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	fmt.Fprintf(w, "\nSwitchyard demo — %d documents through ingest → chunk → embed → summarize → sync in %.2fs\n\n", want, el.Seconds())
	fmt.Fprintf(w, "  %-10s %s\n", "stage", "completed tasks")
	for _, s := range stages {
		fmt.Fprintf(w, "  %-10s %d\n", s, st.done[s])
	}
	fmt.Fprintf(w, "\n  model calls %d: %d failed (503), %d timed out; %d task retries\n", m.calls.Load(), m.failures.Load(), m.timeouts.Load(), st.retries)
	var inter, batch []time.Duration
	for doc, d := range st.finish {
		if st.interDocs[doc] {
			inter = append(inter, d)
		} else {
			batch = append(batch, d)
		}
	}
	fmt.Fprintf(w, "  end-to-end per document: interactive p50 %s p99 %s | batch p50 %s p99 %s\n",
		pct(inter, 0.5), pct(inter, 0.99), pct(batch, 0.5), pct(batch, 0.99))
	twice := 0
	for _, n := range st.syncs {
		if n > 1 {
			twice++
		}
	}
	mode := "with the ledger"
	if L == nil {
		mode = "without a ledger (broker-level guarantees only)"
	}
	fmt.Fprintf(w, "  sync side effects: %d documents written, %d written twice (%s); %d duplicate deliveries absorbed\n", len(st.syncs), twice, mode, st.dupes)
	var reasons []string
	for r, n := range st.dead {
		reasons = append(reasons, fmt.Sprintf("%s ×%d", r, n))
	}
	sort.Strings(reasons)
	fmt.Fprintf(w, "  dead letters: %s\n", strings.Join(reasons, ", "))
	for _, l := range []string{lanes.Interactive, lanes.Batch} {
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: l, Max: 5, Lease: time.Second, DeadLetters: true})
		if err != nil {
			return err
		}
		for _, d := range ds {
			fmt.Fprintf(w, "    %s/%s %s: %s — %s\n", l, d.Kind, d.ID, d.DeadLetter.Reason, d.DeadLetter.Error)
		}
	}
	fmt.Fprintln(w, "\n  Try: switchyard demo -h   (more documents, higher failure rates, your own broker URL)")
	if twice > 0 && L != nil {
		return fmt.Errorf("%d side effects ran twice with a ledger: this is a bug", twice)
	}
	return nil
}

func pct(ds []time.Duration, p float64) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i].Round(time.Millisecond).String()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
