package migrate_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/migrate"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// matrixTasks is how many tasks each ordered pair of adapters migrates:
// ready, delayed by a run-at, waiting for a retry after a failed attempt,
// and dead-lettered by a handler, all in one lane. -short uses
// matrixTasksShort and only the pairs with embedded on one side.
const (
	matrixTasks      = 2000
	matrixTasksShort = 400
	// matrixConcurrency is how many pairs run at once.
	matrixConcurrency = 4
)

// TestMatrix is the acceptance test of a migration with every adapter as
// source and as target (embedded included, and each adapter to a second
// namespace of its own kind, standing for a second cluster); see pairs
// below for which, and SWITCHYARD_MIGRATE_MATRIX=full for every ordered
// pair. For each pair:
//
//  1. An application with a SQLite ledger enqueues matrixTasks tasks on the
//     source broker. A server runs the first fifth there: half of those
//     fail for good (dead letters with reason, error and attempt history),
//     half fail once and wait for a retry; each performed its ledger-recorded
//     effect before failing. The rest are enqueued afterwards: ready, and a
//     tenth delayed by a run-at. All carry idempotency keys, tenants and
//     metadata; ready and delayed ones ordering keys.
//  2. A child process migrates the lane with dead letters and is killed
//     with SIGKILL halfway; the migration is run again to its end.
//  3. The target holds every task exactly once (in-doubt IDs at most twice),
//     live ones live and dead ones dead, with their fields, reasons and
//     histories; the source is empty.
//  4. Workers on the target, sharing the ledger, run every live task; the
//     migrated dead letters are replayed through the ledger and run too.
//     Every task completes and every effect ran exactly once — the failed
//     tasks' effects on the source, none again on the target.
//
// Dead letters are replayed here because that is what an operator does with
// them once their cause is fixed, and it proves the migrated copies are
// whole tasks on the new broker; migrate itself moves them as dead letters
// and never revives them.
func TestMatrix(t *testing.T) {
	t.Parallel()
	kinds := []string{"embedded", "rabbitmq", "nats", "asynq", "sqs"}
	n := matrixTasks
	if testing.Short() {
		n = matrixTasksShort
	}
	// The pairs spend most of their time waiting on brokers, delays and
	// leases: run matrixConcurrency of them at once, whatever -parallel
	// says (t.Run may be called from several goroutines).
	sem := make(chan struct{}, matrixConcurrency)
	var wg sync.WaitGroup
	// Every kind migrates to itself (another namespace on the same broker)
	// and to the next kind in a ring, so each adapter is both a source and
	// a target against a different broker: 10 pairs. The whole kinds×kinds
	// matrix (25 pairs, about three times the run time) runs when
	// SWITCHYARD_MIGRATE_MATRIX=full.
	var pairs [][2]string
	for i, a := range kinds {
		pairs = append(pairs, [2]string{a, a}, [2]string{a, kinds[(i+1)%len(kinds)]})
	}
	if os.Getenv("SWITCHYARD_MIGRATE_MATRIX") == "full" {
		pairs = pairs[:0]
		for _, a := range kinds {
			for _, b := range kinds {
				pairs = append(pairs, [2]string{a, b})
			}
		}
	}
	// Adapters added after the matrix was first laid out migrate to and
	// from one existing broker only, to keep the matrix's run time.
	pairs = append(pairs, extraPairs...)
	for _, p := range pairs {
		if testing.Short() && p[0] != "embedded" && p[1] != "embedded" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t.Run(p[0]+"-to-"+p[1], func(t *testing.T) {
				matrixPair(t, p[0], p[1], n)
			})
		}()
	}
	wg.Wait()
}

// extraPairs are the ordered pairs TestMatrix runs beside every pair of
// its kinds.
var extraPairs = [][2]string{
	{"postgres", "embedded"}, {"embedded", "postgres"},
	{"asynq", "redisstreams"}, {"redisstreams", "embedded"},
	// Google Cloud Pub/Sub (pstest, served by this process) as a target
	// only: a pair checks the source's queue depths, which the Pub/Sub API
	// does not have (adapters/gcppubsub, "Stats").
	{"embedded", "gcppubsub"},
}

// matrixArgs are the tasks of TestMatrix.
type matrixArgs struct {
	N    int    `json:"n"`
	Role string `json:"role"` // ready, delayed, flaky, poison
}

func (matrixArgs) Kind() string { return "migrate.matrix" }

// mtask is what the test knows of one task it enqueued.
type mtask struct {
	n     int
	role  string
	runAt time.Time
}

func (m *mtask) tenant() string { return fmt.Sprintf("tenant-%d", m.n%3) }
func (m *mtask) key() string    { return fmt.Sprintf("idem-%d", m.n) }
func (m *mtask) trace() string  { return "t-" + strconv.Itoa(m.n) }
func (m *mtask) order() string {
	if m.role == "flaky" || m.role == "poison" {
		// Failing tasks carry no ordering key: a key's later tasks would
		// wait behind one that waits for a retry.
		return ""
	}
	return fmt.Sprintf("order-%d", m.n%200)
}

// world is one pair's application: the ledger, the handler, and what the
// handler saw.
type world struct {
	L      ledger.Ledger
	target atomic.Bool // false: the source phase (flaky and poison fail)
	tasks  map[string]*mtask

	mu       sync.Mutex
	effects  map[string]int // the effect, by task ID: must end at 1 each
	runs     map[string]int // handler runs on the target
	problems []string
}

func (w *world) problem(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.problems) < 20 {
		w.problems = append(w.problems, fmt.Sprintf(format, args...))
	}
}

func (w *world) handle(ctx context.Context, tk *switchyard.Task[matrixArgs]) error {
	// The side effect: a counter keyed by task, recorded in the ledger so
	// that no retry, duplicate or replay performs it twice.
	if _, err := switchyard.Effect(ctx, "count", func(context.Context) (int, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.effects[tk.ID]++
		return w.effects[tk.ID], nil
	}, nil); err != nil {
		return err
	}
	if !w.target.Load() {
		switch tk.Args.Role {
		case "poison":
			return switchyard.Permanent(fmt.Errorf("poison %d", tk.Args.N))
		case "flaky":
			return fmt.Errorf("flaky %d: try again later", tk.Args.N)
		}
		w.problem("task %s (%s) ran on the source", tk.ID, tk.Args.Role)
		return nil
	}
	m := w.tasks[tk.ID]
	w.mu.Lock()
	w.runs[tk.ID]++
	w.mu.Unlock()
	switch {
	case m == nil:
		w.problem("unknown task %s ran on the target", tk.ID)
	case tk.Args.N != m.n || tk.Args.Role != m.role || tk.Tenant != m.tenant() || tk.Metadata["trace"] != m.trace() ||
		tk.MaxAttempts != 10 || tk.Job.Task == nil || tk.Job.Task.IdempotencyKey != m.key():
		w.problem("task %s changed on the way: %+v tenant %q metadata %v", tk.ID, tk.Args, tk.Tenant, tk.Metadata)
	case m.role == "flaky" && tk.Attempt < 2:
		w.problem("flaky task %s runs as attempt %d on the target: its failed attempt on the source was forgotten", tk.ID, tk.Attempt)
	}
	return nil
}

func (w *world) server(t *testing.T, ctx context.Context, b *broker.Broker, observe func(scheduler.Event)) *switchyard.Server {
	t.Helper()
	// The lease is long enough that a task finished on a loaded machine
	// (load 15 on 2 cores) is settled before it runs out: a lease that
	// ends between the handler's return and its ack or nack gets the
	// message delivered again, which the ledger absorbs but this test
	// would count as a copy too many on the source or the target.
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: w.L, Slots: 16, Lease: 30 * time.Second, PollWait: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: observe})
	if err != nil {
		t.Fatal(err)
	}
	// Retries (the flaky tasks on the source) come back after two seconds.
	retry := &scheduler.RetryPolicy{MaxAttempts: 10, Base: 2 * time.Second, Max: 2 * time.Second, Jitter: scheduler.NoJitter}
	if err := switchyard.Register(srv, w.handle, &switchyard.HandlerOpts{Retry: retry}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return srv
}

func stopServer(t *testing.T, srv *switchyard.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("stop the server: %v", err)
	}
}

// enqueue enqueues the tasks with n in [from, to) through the client, a few
// at a time, and records them in w.tasks.
func (w *world) enqueue(t *testing.T, ctx context.Context, c *switchyard.Client, from, to int, role func(int) string, runAt time.Time) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	var failed atomic.Value
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				m := &mtask{n: i, role: role(i)}
				if m.role == "delayed" {
					m.runAt = runAt
				}
				r, err := c.Enqueue(ctx, matrixArgs{N: i, Role: m.role}, &switchyard.EnqueueOpts{Lane: "batch", IdempotencyKey: m.key(),
					Tenant: m.tenant(), OrderingKey: m.order(), RunAt: m.runAt, MaxAttempts: 10, Metadata: map[string]string{"trace": m.trace()}})
				if err == nil && r.Duplicate {
					err = errors.New("reported as a duplicate")
				}
				if err != nil {
					failed.CompareAndSwap(nil, fmt.Errorf("enqueue %d: %w", i, err))
					continue
				}
				mu.Lock()
				w.tasks[r.ID] = m
				mu.Unlock()
			}
		}()
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
}

// seed fills the source: see TestMatrix, step 1.
func (w *world) seed(t *testing.T, ctx context.Context, src *broker.Broker, n int) {
	t.Helper()
	c, err := switchyard.NewClient(src, &switchyard.ClientConfig{Ledger: w.L})
	if err != nil {
		t.Fatal(err)
	}
	nFail := n / 5
	w.enqueue(t, ctx, c, 0, nFail, func(i int) string {
		if i%2 == 0 {
			return "poison"
		}
		return "flaky"
	}, time.Time{})
	// A server on the source runs them: the poison ones die, the flaky ones
	// fail once and wait for their retry.
	var dead, retried sync.Map
	srv := w.server(t, ctx, src, func(e scheduler.Event) {
		switch e.Type {
		case scheduler.EventDead:
			dead.Store(e.TaskID, true)
		case scheduler.EventRetried:
			retried.Store(e.TaskID, true)
		}
	})
	count := func(m *sync.Map) int {
		k := 0
		m.Range(func(any, any) bool { k++; return true })
		return k
	}
	eventually(t, 2*time.Minute, func() string {
		if d, r := count(&dead), count(&retried); d+r < nFail {
			return fmt.Sprintf("on the source, %d dead and %d retried of %d failing tasks", d, r, nFail)
		}
		return ""
	})
	stopServer(t, srv)
	for id, m := range w.tasks {
		tk, err := w.L.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]ledger.State{"poison": ledger.Dead, "flaky": ledger.RetryWait}[m.role]
		if tk.State != want && !(m.role == "flaky" && tk.State == ledger.Queued) {
			t.Fatalf("task %s (%s) is %s in the ledger on the source", id, m.role, tk.State)
		}
	}
	// The rest, ready, and every tenth delayed until a few seconds after
	// the migration starts.
	w.enqueue(t, ctx, c, nFail, n-n/10, func(int) string { return "ready" }, time.Time{})
	w.enqueue(t, ctx, c, n-n/10, n, func(int) string { return "delayed" }, time.Now().Add(4*time.Second).Truncate(time.Millisecond))
	if len(w.tasks) != n {
		t.Fatalf("enqueued %d tasks, want %d", len(w.tasks), n)
	}
}

func (w *world) count(role string) int {
	k := 0
	for _, m := range w.tasks {
		if m.role == role {
			k++
		}
	}
	return k
}

func matrixPair(t *testing.T, fromKind, toKind string, n int) {
	if os.Getenv(childEnv) != "" {
		t.Fatal("refusing to start a child from a child")
	}
	start := time.Now()
	ctx := ctxFor(t, 8*time.Minute)
	ns := namespace(t)
	fromURL, toURL := urlFor(t, fromKind, ns), urlFor(t, toKind, ns)
	if fromKind == toKind {
		// One server of each kind here: two namespaces on it stand for two
		// clusters (RunURL refuses them; the rerun below uses Run).
		toURL = urlFor(t, toKind, ns+"b")
	}
	ledgerDSN := "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	L, err := ledger.Open(ctx, ledgerDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	w := &world{L: L, tasks: map[string]*mtask{}, effects: map[string]int{}, runs: map[string]int{}}

	// 1. The source, in mixed states.
	src, err := broker.Open(ctx, fromURL, &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	w.seed(t, ctx, src, n)
	// (RabbitMQ counts a message moving from a delay queue to the lane in
	// neither for an instant.)
	var before broker.Stats
	eventually(t, time.Minute, func() string {
		s, err := src.Stats(ctx, "batch")
		if err != nil {
			return err.Error()
		}
		before = s
		if s.DeadLettered != int64(w.count("poison")) || s.Ready+s.Delayed+s.InFlight+s.DeadLettered != int64(n) {
			return fmt.Sprintf("the source holds %+v; want %d tasks, %d dead letters", s, n, w.count("poison"))
		}
		return ""
	})
	if before.Delayed == 0 {
		// Seeding took longer than the run-at delay on a loaded machine.
		t.Logf("NOTE: no task was still delayed on the source when the migration started")
	}
	tSeed := time.Now()

	// 2. Killed halfway, then run again.
	journal := filepath.Join(t.TempDir(), "journal")
	killHalfway(t, fromURL, toURL, journal, ledgerDSN, n)
	afterKill, _ := src.Stats(ctx, "batch")
	tKill := time.Now()
	// A lease far shorter than the default two minutes: a receive whose
	// answer is lost on the way (an SQS long poll under load) leaves its
	// messages leased, and the run should see them back within its Wait.
	//
	// The ledger numbered the source's keyed messages (on a source without
	// native ordering): both runs release those numbers as they move
	// (SourceSequencer), as the CLI does with --ledger. Without that, each
	// key on a target numbered by the ledger (rabbitmq-to-nats) waited for
	// its eight old numbers to be skipped one by one (2m12s idle).
	opts := &migrate.Options{Lanes: []string{"batch"}, IncludeDeadLetters: true, Journal: journal, Wait: 45 * time.Second, Lease: 15 * time.Second,
		SourceSequencer: ledger.SequencerOf(L)}
	var rep *migrate.Report
	if fromKind != toKind {
		rep, err = migrate.RunURL(ctx, fromURL, toURL, &broker.Options{Sequencer: ledger.SequencerOf(L)}, opts)
	} else {
		mdst := open(t, toURL)
		rep, err = migrate.Run(ctx, src, mdst, opts)
	}
	if err != nil {
		t.Fatalf("second run: %v (report %+v)", err, rep)
	}
	if rep.Moved == 0 || rep.Moved+rep.Skipped >= n || len(rep.Failures) != 0 {
		t.Fatalf("second run moved %d and skipped %d of %d: the first did not stop halfway", rep.Moved, rep.Skipped, n)
	}
	if l := rep.Lanes[0]; l.LeftReady+l.LeftDelayed+l.LeftInFlight != 0 {
		t.Fatalf("second run left work on the source: %+v", l)
	}
	tRerun := time.Now()

	// 3. Every task on the target exactly once, the source empty.
	hidden := verifyTarget(t, ctx, toURL, w, rep.InDoubt)
	if s, err := src.Stats(ctx, "batch"); err != nil || s.Ready+s.InFlight+s.Delayed+s.DeadLettered != 0 {
		t.Fatalf("source not empty: %+v %v", s, err)
	}
	if t.Failed() {
		return
	}
	tVerify := time.Now()

	// 4. The workers on the target: everything completes, effects once.
	w.target.Store(true)
	dst, err := broker.Open(ctx, toURL, &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	// Every delivery the workers get, by task: each task must reach them,
	// and a second copy (skipped by the ledger) only of an in-doubt one.
	var evMu sync.Mutex
	started, dups, succeeded := map[string]int{}, map[string]int{}, map[string]bool{}
	srv := w.server(t, ctx, dst, func(e scheduler.Event) {
		evMu.Lock()
		defer evMu.Unlock()
		switch e.Type {
		case scheduler.EventStarted:
			started[e.TaskID]++
		case scheduler.EventDuplicate:
			dups[e.TaskID]++
		case scheduler.EventSucceeded:
			succeeded[e.TaskID] = true
		}
	})
	c, err := switchyard.NewClient(dst, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	replayed := 0
	eventually(t, time.Minute, func() string {
		k, err := c.ReplayDead(ctx, "batch", 0, "migration test")
		replayed += k
		if err != nil {
			return "replay: " + err.Error()
		}
		if replayed < w.count("poison") {
			return fmt.Sprintf("replayed %d of %d dead letters", replayed, w.count("poison"))
		}
		return ""
	})
	eventually(t, 5*time.Minute, func() string {
		evMu.Lock()
		done := len(succeeded)
		evMu.Unlock()
		if done < n {
			return fmt.Sprintf("%d of %d tasks succeeded on the target", done, n)
		}
		for id, m := range w.tasks {
			tk, err := L.Get(ctx, id)
			if err != nil {
				return err.Error()
			}
			if tk.State != ledger.Completed {
				return fmt.Sprintf("task %s (%s) is %s", id, m.role, tk.State)
			}
		}
		return ""
	})
	// Duplicates and messages waiting for their ordering key's turn are
	// delivered, skipped and acked soon after the last task completes. A
	// copy that arrived while its task was running was held back for up to
	// the lease plus a heartbeat (40 s here: scheduler.held), so it may
	// still sit in a delay queue that long after the task completed.
	eventually(t, time.Minute, func() string {
		s, err := dst.Stats(ctx, "batch")
		if err != nil || s.Ready+s.InFlight+s.Delayed+s.DeadLettered != 0 {
			return fmt.Sprintf("the target holds work after every task completed: %+v %v", s, err)
		}
		return ""
	})
	stopServer(t, srv)
	if replayed != w.count("poison") {
		// The dead-letter queue held each exactly once (verifyTarget), so
		// this is the replay's doing, not the migration's; the ledger still
		// runs each once (checked below).
		t.Logf("NOTE: replaying %d dead letters on %s took %d replays: the target's replay put some back twice", w.count("poison"), toKind, replayed)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.problems {
		t.Error(p)
	}
	for id, m := range w.tasks {
		if w.effects[id] != 1 {
			t.Errorf("task %s (%s): effect ran %d times, want 1", id, m.role, w.effects[id])
		}
		if (m.role == "flaky" || m.role == "poison") && w.runs[id] == 0 {
			t.Errorf("task %s (%s) did not run on the target", id, m.role)
		}
	}
	if len(w.effects) != n {
		t.Errorf("%d effects for %d tasks", len(w.effects), n)
	}
	evMu.Lock()
	defer evMu.Unlock()
	doubt := map[string]bool{}
	for _, id := range rep.InDoubt {
		doubt[id] = true
	}
	nDups, replayDups := 0, 0
	for id, k := range dups {
		nDups += k
		if w.tasks[id] != nil && w.tasks[id].role == "poison" && replayed > w.count("poison") {
			replayDups += k // see the NOTE above
			continue
		}
		if !doubt[id] {
			t.Errorf("task %s (%s) reached the workers %d more time(s) as a duplicate: it was on the target more than once", id, w.tasks[id].role, k)
		}
	}
	if replayDups > 0 {
		t.Logf("NOTE: %d duplicate deliveries of replayed dead letters, skipped by the ledger", replayDups)
	}
	for id, m := range w.tasks {
		if started[id] == 0 && dups[id] == 0 {
			t.Errorf("task %s (%s, hidden from the check %v) never reached the workers on the target", id, m.role, hidden[id])
		}
	}
	t.Logf("%d tasks (%d ready, %d delayed, %d retrying, %d dead); source before %+v, after the kill %+v; rerun moved %d skipped %d in doubt %d; %d behind ordering keys at the check; duplicates skipped by the workers %d",
		n, w.count("ready"), w.count("delayed"), w.count("flaky"), w.count("poison"), before, afterKill, rep.Moved, rep.Skipped, len(rep.InDoubt), len(hidden), nDups)
	t.Logf("seed %v, killed run %v, rerun %v, verify %v, workers %v",
		tSeed.Sub(start).Round(time.Millisecond), tKill.Sub(tSeed).Round(time.Millisecond), tRerun.Sub(tKill).Round(time.Millisecond),
		tVerify.Sub(tRerun).Round(time.Millisecond), time.Since(tVerify).Round(time.Millisecond))
}

// killHalfway runs the migration in a child process (this test binary,
// which runs child() and nothing else) and kills it with SIGKILL once it
// has moved about half of n messages.
func killHalfway(t *testing.T, fromURL, toURL, journal, ledgerDSN string, n int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", fromEnv+"="+fromURL, toEnv+"="+toURL, jourEnv+"="+journal, ledgerEnv+"="+ledgerDSN,
		batchEnv+"=25", leaseEnv+"=5s")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	sc := bufio.NewScanner(out)
	timer := time.AfterFunc(3*time.Minute, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "ERROR") {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("child: %s", line)
		}
		if v, ok := strings.CutPrefix(line, "PROGRESS "); ok {
			if k, _ := strconv.Atoi(v); k >= n/2 {
				// A few milliseconds later, so the kill lands anywhere in
				// the next round: receive, journal, publish or ack.
				var r [1]byte
				_, _ = rand.Read(r[:])
				time.Sleep(time.Duration(r[0]%40) * time.Millisecond)
				_ = cmd.Process.Signal(syscall.SIGKILL)
				killed = true
				break
			}
		}
	}
	_ = cmd.Wait()
	if !killed {
		t.Fatal("the child finished or died before it was killed halfway")
	}
}

// verifyTarget leases every message of the target's lane and dead-letter
// queue at the driver, checks each task is there exactly once (in-doubt
// IDs at most twice) with its fields, and gives them all back.
//
// A target that orders keys natively (embedded, asynq) hands out a key's
// next message only once the one before is acked, and asynq looks only a
// window past the blocked heads, so there the live tasks seen here are the
// heads of the keys and what comes before them. For the rest the broker's
// exact count must match, and the workers must later get each of them
// (matrixPair checks that every task ID reaches them and none twice): the
// hidden ones it returns.
func verifyTarget(t *testing.T, ctx context.Context, toURL string, w *world, inDoubt []string) (hidden map[string]bool) {
	t.Helper()
	drv, err := broker.OpenDriver(ctx, toURL)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	ordered := drv.Capabilities().Ordering
	doubt := map[string]bool{}
	for _, id := range inDoubt {
		doubt[id] = true
	}
	batch := 100
	if c := drv.Capabilities().MaxBatch; c > 0 && c < batch {
		batch = c
	}
	var held []*broker.Delivery
	var extend func(ds []*broker.Delivery)
	defer func() {
		rctx := context.WithoutCancel(ctx)
		for i, d := range held {
			// Giving back a thousand or more one by one can outlast a
			// lease on a loaded machine (load 20 on 2 cores).
			extend(held[i:])
			var err error
			if r, ok := drv.(broker.Releaser); ok {
				err = r.Release(rctx, d, 0)
			} else {
				err = drv.Nack(rctx, d, 0)
			}
			if err != nil {
				t.Errorf("give back %s: %v", d.ID, err)
			}
		}
	}()
	// Leases of 45s, extended every 15s while the check runs (it can take
	// longer than a lease on a loaded machine): a receive whose answer is
	// lost on the way (an SQS long poll under load) leaves its messages
	// leased, and they must come back within the check's patience.
	const lease = 45 * time.Second
	extended := time.Now()
	extend = func(held []*broker.Delivery) {
		if time.Since(extended) < lease/3 {
			return
		}
		for i := 0; i < len(held); i += batch {
			if err := drv.Extend(ctx, held[i:min(i+batch, len(held))], lease); err != nil {
				t.Logf("extend the check's leases: %v", err) // a lease that ends shows as a second copy
			}
		}
		extended = time.Now()
	}
	hidden = map[string]bool{}
	for _, dead := range []bool{false, true} {
		want := 0
		for _, m := range w.tasks {
			if (m.role == "poison") == dead {
				want++
			}
		}
		seen := map[string]int{}
		// Receive until every task came and then once more for extra
		// copies; on an ordered target, until nothing more comes.
		partial := ordered && !dead // see the function's comment
		for got, idle := 0, 0; got < 2*want && idle < 60; {
			wait := time.Second
			if got >= want || (partial && got > 0) {
				wait = 300 * time.Millisecond
			}
			extend(held)
			ds, err := drv.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: batch, Lease: lease, Wait: wait, DeadLetters: dead})
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, ds...)
			got += len(ds)
			if len(ds) == 0 {
				if got >= want || (partial && got > 0) {
					break
				}
				idle++
				continue
			}
			idle = 0
			for _, d := range ds {
				seen[d.ID]++
				checkMigrated(t, w, d, dead)
			}
		}
		copies := 0
		for id, k := range seen {
			copies += k
			if k > 1 && !doubt[id] {
				t.Errorf("task %s is on the target %d times (dead letters: %v)", id, k, dead)
			}
		}
		missing := 0
		for id, m := range w.tasks {
			if (m.role == "poison") != dead || seen[id] > 0 {
				continue
			}
			if partial {
				hidden[id] = true
				continue
			}
			if missing++; missing <= 5 {
				t.Errorf("task %s (%s) is missing on the target", id, m.role)
			}
		}
		if missing > 0 {
			st, err := drv.Stats(ctx, "batch")
			t.Errorf("%d of %d tasks missing on the target (dead letters: %v); it holds %+v %v", missing, want, dead, st, err)
		}
		if !dead && len(hidden) > 0 {
			// The rest must be there, once each: the exact count says so
			// (the workers then run each of them).
			s, err := drv.Stats(ctx, "batch")
			if err != nil {
				t.Fatal(err)
			}
			if total := s.Ready + s.InFlight + s.Delayed; total < int64(want) || total > int64(want+len(inDoubt)) || total < int64(copies+len(hidden)) {
				t.Errorf("the target's lane holds %+v, want %d messages (%d seen here, %d behind their ordering keys, %d in doubt)",
					s, want, len(seen), len(hidden), len(inDoubt))
			}
		}
	}
	return hidden
}

func checkMigrated(t *testing.T, w *world, d *broker.Delivery, dead bool) {
	m := w.tasks[d.ID]
	if m == nil {
		t.Errorf("unknown message %s on the target", d.ID)
		return
	}
	if (m.role == "poison") != dead {
		t.Errorf("task %s (%s): dead-lettered %v on the target", d.ID, m.role, dead)
		return
	}
	if d.Kind != (matrixArgs{}).Kind() || string(d.Body) != fmt.Sprintf(`{"n":%d,"role":%q}`, m.n, m.role) || d.IdempotencyKey != m.key() ||
		d.OrderingKey != m.order() || d.Tenant != m.tenant() || d.MaxAttempts != 10 || d.Headers["meta-trace"] != m.trace() {
		t.Errorf("task %s changed on the way:\n got %+v\nwant %+v", d.ID, d.Message, m)
	}
	if !m.runAt.IsZero() && !d.RunAt.Truncate(time.Millisecond).Equal(m.runAt) {
		t.Errorf("task %s runs at %v on the target, want %v", d.ID, d.RunAt, m.runAt)
	}
	if dead {
		dl := d.DeadLetter
		if dl == nil || dl.Reason != broker.ReasonPermanent || !strings.Contains(dl.Error, fmt.Sprintf("poison %d", m.n)) ||
			len(dl.Attempts) == 0 || dl.Attempts[len(dl.Attempts)-1].Class != "permanent" || dl.Attempts[len(dl.Attempts)-1].Worker == "" {
			t.Errorf("dead letter %s lost its reason or history: %+v", d.ID, dl)
		}
	}
}
