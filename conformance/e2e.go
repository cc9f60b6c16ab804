package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite" // the default ledger for the end-to-end cases
	"github.com/switchyard-dev/switchyard/scheduler"
)

// The end-to-end layer runs broker, ledger and runtime together and checks
// contract points 5, 7, 8, 10 and 11 as a user sees them.
//
//	conformance.RunE2E(t, maker)
//
// Harness.LedgerDSN chooses the ledger; empty means a fresh SQLite file per
// case.

// E2ECases is the end-to-end suite, in the order RunE2E runs it.
var E2ECases = []Case{
	{"DuplicateDelivery", TestE2EDuplicateDelivery},
	{"StepAfterCrash", TestE2EStepAfterCrash},
	{"EffectAfterCrash", TestE2EEffectAfterCrash},
	{"CopyDuringEffect", TestE2ECopyDuringEffect},
	{"CopyDuringEffectCrash", TestE2ECopyDuringEffectCrash},
	{"AttemptsExhausted", TestE2EAttemptsExhausted},
	{"PermanentError", TestE2EPermanentError},
	{"BadInput", TestE2EBadInput},
	{"Snooze", TestE2ESnooze},
	{"GracefulStop", TestE2EGracefulStop},
	{"StopReturnsBuffered", TestE2EStopReturnsBuffered},
	{"Ordering", TestE2EOrdering},
	{"CancelQueued", TestE2ECancelQueued},
	{"CancelRunning", TestE2ECancelRunning},
	{"CancelKilledWorker", TestE2ECancelKilledWorker},
	{"WaitResult", TestE2EWaitResult},
}

// RunE2E runs every end-to-end case in parallel subtests, each with a fresh
// harness.
func RunE2E(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	if maybeChild() {
		return
	}
	runCases(t, "end-to-end cases", E2ECases, newHarness)
}

// e2eArgs are the arguments of every end-to-end task.
type e2eArgs struct {
	Scenario string `json:"scenario"`
	N        int    `json:"n"`
	Key      string `json:"key,omitempty"`
}

func (e2eArgs) Kind() string { return "conformance.e2e" }

// env is one case's broker, ledger, client and server.
type env struct {
	t      testing.TB
	h      *Harness
	b      *broker.Broker
	L      ledger.Ledger
	client *switchyard.Client
	srv    *switchyard.Server
	dsn    string
}

func ledgerDSN(t testing.TB, h *Harness) string {
	if h.LedgerDSN != "" {
		return h.LedgerDSN
	}
	return "sqlite://" + filepath.Join(t.TempDir(), "ledger.db") + "?synchronous=normal"
}

func openLedger(t testing.TB, dsn string) ledger.Ledger {
	t.Helper()
	L, err := ledger.Open(ctxFor(t, 30*time.Second), dsn)
	if err != nil {
		t.Fatalf("open ledger: %v", err)
	}
	t.Cleanup(func() { L.Close() })
	return L
}

// newEnv opens the case's broker and ledger and a server with short leases
// and fast retries. The server is not started.
func newEnv(t testing.TB, h *Harness, dsn string, cfg *scheduler.Config) *env {
	t.Helper()
	if dsn == "" {
		dsn = ledgerDSN(t, h)
	}
	L := openLedger(t, dsn)
	opts := *h.Options.WithDefaults()
	opts.Dedup = L
	b := Open(t, h, &opts)
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	if cfg == nil {
		cfg = &scheduler.Config{}
	}
	cfg.Ledger = L
	if cfg.Lease == 0 {
		cfg.Lease = 2 * time.Second
	}
	if cfg.PollWait == 0 {
		cfg.PollWait = 100 * time.Millisecond
	}
	if cfg.Retry.Base == 0 {
		cfg.Retry = scheduler.RetryPolicy{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: cfg.Retry.MaxAttempts}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := switchyard.NewServer(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, h: h, b: b, L: L, client: c, srv: srv, dsn: dsn}
}

func (e *env) start() {
	e.t.Helper()
	if err := e.srv.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.srv.StopAndCancel(ctx)
	})
}

func (e *env) enqueue(args switchyard.TaskArgs, opts *switchyard.EnqueueOpts) string {
	e.t.Helper()
	if opts == nil {
		opts = &switchyard.EnqueueOpts{Lane: "interactive"}
	}
	r, err := e.client.Enqueue(ctxFor(e.t, 30*time.Second), args, opts)
	if err != nil {
		e.t.Fatalf("enqueue: %v", err)
	}
	return r.ID
}

// waitState waits until the task reaches one of the states.
func (e *env) waitState(id string, timeout time.Duration, states ...ledger.State) *ledger.Task {
	e.t.Helper()
	var last *ledger.Task
	eventually(e.t, timeout, func() string {
		t, err := e.L.Get(ctxFor(e.t, 10*time.Second), id)
		if err != nil {
			return "get: " + err.Error()
		}
		last = t
		for _, s := range states {
			if t.State == s {
				return ""
			}
		}
		return fmt.Sprintf("task %s is %s (attempt %d, last error %q), want %v", id, t.State, t.Attempt, t.LastError, states)
	})
	return last
}

// waitDrained waits until the lane holds nothing live.
func (e *env) waitDrained(lane string, timeout time.Duration) {
	e.t.Helper()
	eventually(e.t, timeout, func() string {
		s := stats(e.t, e.b, lane)
		if s.Ready+s.InFlight+s.Delayed != 0 {
			return "lane not drained: " + statsString(s)
		}
		return ""
	})
}

type counter struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counter) add(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
	return c.m[k]
}

func (c *counter) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

// TestE2EDuplicateDelivery: the same task delivered three times at once
// runs its step and its effect once (point 7).
func TestE2EDuplicateDelivery(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", nil)
	var steps, effects counter
	_ = switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		if _, err := switchyard.Step(ctx, "compute", func(ctx context.Context) (int, error) {
			steps.add(tk.ID)
			time.Sleep(300 * time.Millisecond) // let the copies arrive while this runs
			return 42, nil
		}); err != nil {
			return err
		}
		_, err := switchyard.Effect(ctx, "send", func(ctx context.Context) (bool, error) {
			effects.add(tk.ID)
			return true, nil
		}, nil)
		return err
	}, nil)
	id := e.enqueue(e2eArgs{Scenario: "dup"}, nil)
	body, _ := json.Marshal(e2eArgs{Scenario: "dup"})
	for i := 0; i < 2; i++ { // the broker delivering the same task again
		publish(t, e.b, &broker.Message{ID: id, Lane: "interactive", Kind: "conformance.e2e", Body: body})
	}
	e.start()
	e.waitState(id, 30*time.Second, ledger.Completed)
	e.waitDrained("interactive", 30*time.Second)
	if n := steps.get(id); n != 1 {
		t.Errorf("step computed %d times for three deliveries, want 1", n)
	}
	if n := effects.get(id); n != 1 {
		t.Errorf("effect performed %d times for three deliveries, want 1", n)
	}
}

// crashChildE2E runs the child side of the crash cases: a server whose
// handler does one step or effect, reports it on stdout and then hangs
// until it is killed.
func crashChildE2E(mode string) int {
	ctx := context.Background()
	L, err := ledger.Open(ctx, os.Getenv(childLedgerEnv))
	if err != nil {
		fmt.Printf("ERROR ledger: %v\n", err)
		return 2
	}
	b, err := broker.Open(ctx, os.Getenv(childURLEnv), &broker.Options{Dedup: L})
	if err != nil {
		fmt.Printf("ERROR broker: %v\n", err)
		return 2
	}
	srv, err := switchyard.NewServer(b, &scheduler.Config{Ledger: L, Lease: 2 * time.Second, PollWait: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Printf("ERROR server: %v\n", err)
		return 2
	}
	file := os.Getenv(childFileEnv)
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		switch mode {
		case "e2e-step":
			if _, err := switchyard.Step(ctx, "compute", func(ctx context.Context) (string, error) {
				return "computed", appendLine(file, "computed "+tk.ID)
			}); err != nil {
				return err
			}
			fmt.Println("STEP_DONE " + tk.ID)
		case "e2e-effect":
			_, _ = switchyard.Effect(ctx, "email", func(ctx context.Context) (bool, error) {
				if err := appendLine(file, "sent "+tk.ID); err != nil {
					return false, err
				}
				fmt.Println("EFFECT_DONE " + tk.ID)
				time.Sleep(time.Hour) // killed between doing and recording
				return true, nil
			}, nil)
		}
		time.Sleep(time.Hour) // killed before the ack
		return nil
	}, nil)
	if err := srv.Start(ctx); err != nil {
		fmt.Printf("ERROR start: %v\n", err)
		return 2
	}
	time.Sleep(time.Hour)
	return 3
}

const (
	childLedgerEnv = "SWITCHYARD_CONFORMANCE_LEDGER"
	childFileEnv   = "SWITCHYARD_CONFORMANCE_FILE"
)

var appendMu sync.Mutex

func appendLine(path, line string) error {
	appendMu.Lock()
	defer appendMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readLines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	text := strings.TrimSpace(string(b))
	if text == "" {
		return nil
	}
	return strings.Split(text, "\n")
}

// killChildAt starts the child in mode, waits for it to print want, then
// kills it with SIGKILL.
func killChildAt(t *testing.T, h *Harness, e *env, mode, want, file string) {
	t.Helper()
	kill := startChildAt(t, h, e, mode, want, file)
	kill()
}

// startChildAt starts the child in mode and waits for it to print want.
// It returns the function that kills the child with SIGKILL (also run at
// cleanup, in case the test stops first).
func startChildAt(t *testing.T, h *Harness, e *env, mode, want, file string) (kill func()) {
	t.Helper()
	h.require(t, CanOutliveProcess)
	noSpawnFromChild(t)
	top := strings.SplitN(t.Name(), "/", 2)[0]
	cmd := exec.Command(os.Args[0], "-test.run=^"+top+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childURLEnv+"="+h.URL, childLedgerEnv+"="+e.dsn, childFileEnv+"="+file)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, want) || strings.HasPrefix(l, "ERROR") {
				lines <- l
				break
			}
		}
		io.Copy(io.Discard, out)
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok || strings.HasPrefix(l, "ERROR") {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("child failed before %s: %q", want, l)
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child did not reach %s within 60s", want)
	}
	var once sync.Once
	kill = func() {
		once.Do(func() {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Error(err)
			}
			_ = cmd.Wait()
		})
	}
	t.Cleanup(kill)
	return kill
}

// TestE2EStepAfterCrash: a worker SIGKILLed after a step completed but
// before the ack; the redelivered task does not recompute the step (points
// 7, 10).
func TestE2EStepAfterCrash(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", nil)
	file := filepath.Join(t.TempDir(), "computed.log")
	id := e.enqueue(e2eArgs{Scenario: "step-crash"}, nil)
	killChildAt(t, h, e, "e2e-step", "STEP_DONE", file)
	_ = switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		out, err := switchyard.Step(ctx, "compute", func(ctx context.Context) (string, error) {
			return "recomputed", appendLine(file, "computed "+tk.ID)
		})
		if err == nil && out != "computed" {
			return switchyard.Permanent(fmt.Errorf("step output %q, want the stored %q", out, "computed"))
		}
		return err
	}, nil)
	e.start()
	task := e.waitState(id, 60*time.Second, ledger.Completed, ledger.Dead)
	if task.State != ledger.Completed {
		t.Fatalf("task ended %s: %s", task.State, task.LastError)
	}
	if lines := readLines(t, file); len(lines) != 1 {
		t.Errorf("step computed %d times (%v), want 1", len(lines), lines)
	}
	if task.Attempt < 2 {
		t.Errorf("ledger attempt %d after a crash, want ≥ 2", task.Attempt)
	}
	as, err := e.L.Attempts(ctxFor(t, 10*time.Second), id)
	if err != nil || len(as) < 2 {
		t.Errorf("attempt records %d (%v), want ≥ 2: the crashed one and the one that finished", len(as), err)
	}
}

// TestE2EEffectAfterCrash: a worker SIGKILLed between doing an effect and
// recording it; the next attempt calls the reconcile function, which finds
// the effect done, so it is not repeated (points 7, 10).
func TestE2EEffectAfterCrash(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", nil)
	file := filepath.Join(t.TempDir(), "sent.log")
	id := e.enqueue(e2eArgs{Scenario: "effect-crash"}, nil)
	killChildAt(t, h, e, "e2e-effect", "EFFECT_DONE", file)
	var reconciled atomic.Int32
	_ = switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		return sendEmailOnce(ctx, t, file, tk.ID, &reconciled)
	}, nil)
	e.start()
	task := e.waitState(id, 60*time.Second, ledger.Completed, ledger.Dead)
	if task.State != ledger.Completed {
		t.Fatalf("task ended %s: %s", task.State, task.LastError)
	}
	if reconciled.Load() == 0 {
		t.Error("the effect left unknown by the crash was not reconciled")
	}
	if lines := readLines(t, file); len(lines) != 1 {
		t.Errorf("effect performed %d times (%v), want 1", len(lines), lines)
	}
	effs, err := e.L.Effects(ctxFor(t, 10*time.Second), id)
	if err != nil || len(effs) != 1 || effs[0].State != ledger.EffectConfirmed {
		t.Errorf("effects %+v (%v), want one confirmed", effs, err)
	}
}

// sendEmailOnce is the crash cases' effect: it appends "sent <id>" to
// file, and its reconcile function (counted in reconciled) finds that line.
func sendEmailOnce(ctx context.Context, t *testing.T, file, id string, reconciled *atomic.Int32) error {
	_, err := switchyard.Effect(ctx, "email", func(ctx context.Context) (bool, error) {
		return true, appendLine(file, "sent "+id)
	}, &switchyard.EffectOpts{Reconcile: func(ctx context.Context) (bool, []byte, error) {
		reconciled.Add(1)
		for _, l := range readLines(t, file) {
			if l == "sent "+id {
				return true, []byte("true"), nil
			}
		}
		return false, nil, nil
	}})
	return err
}

// TestE2EAttemptsExhausted: a task that keeps failing is dead-lettered after
// its attempt limit with every attempt recorded (point 5).
func TestE2EAttemptsExhausted(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", &scheduler.Config{Retry: scheduler.RetryPolicy{MaxAttempts: 3}})
	var runs atomic.Int32
	_ = switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		runs.Add(1)
		return fmt.Errorf("upstream timeout on attempt %d", tk.Attempt)
	}, nil)
	id := e.enqueue(e2eArgs{Scenario: "exhaust"}, nil)
	e.start()
	task := e.waitState(id, 30*time.Second, ledger.Dead)
	if runs.Load() != 3 {
		t.Errorf("handler ran %d times, want 3", runs.Load())
	}
	as, err := e.L.Attempts(ctxFor(t, 10*time.Second), id)
	if err != nil || len(as) != 3 {
		t.Fatalf("ledger attempts = %d (%v), want 3", len(as), err)
	}
	for i, a := range as {
		if a.Number != i+1 || !strings.Contains(a.Error, "upstream timeout") || a.Worker == "" {
			t.Errorf("attempt %d = %+v", i+1, a)
		}
	}
	if !strings.Contains(task.LastError, "upstream timeout on attempt 3") {
		t.Errorf("last error %q", task.LastError)
	}
	dead := receiveDead(t, e.b, "interactive", 1, 15*time.Second)
	if len(dead) != 1 || dead[0].ID != id {
		t.Fatalf("dead-letter queue holds %d messages, want task %s", len(dead), id)
	}
	dl := dead[0].DeadLetter
	if dl.Reason != broker.ReasonMaxAttempts || len(dl.Attempts) != 3 {
		t.Errorf("dead letter reason %s with %d attempts, want %s with 3", dl.Reason, len(dl.Attempts), broker.ReasonMaxAttempts)
	}
}

// TestE2EPermanentError: a permanent error dead-letters at once, without a
// retry (point 5).
func TestE2EPermanentError(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", nil)
	var runs atomic.Int32
	_ = switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		runs.Add(1)
		return switchyard.Permanent(errors.New("invoice 17 does not exist"))
	}, nil)
	id := e.enqueue(e2eArgs{Scenario: "permanent"}, nil)
	e.start()
	e.waitState(id, 30*time.Second, ledger.Dead)
	dead := receiveDead(t, e.b, "interactive", 1, 15*time.Second)
	if len(dead) != 1 || dead[0].DeadLetter.Reason != broker.ReasonPermanent || !strings.Contains(dead[0].DeadLetter.Error, "invoice 17") {
		t.Fatalf("dead letters %d, want one with reason %s and the error", len(dead), broker.ReasonPermanent)
	}
	time.Sleep(300 * time.Millisecond)
	if runs.Load() != 1 {
		t.Errorf("handler ran %d times, want 1", runs.Load())
	}
}

// TestE2EBadInput: arguments that do not decode and kinds nobody handles
// are dead-lettered with their reasons and never retried (point 11).
func TestE2EBadInput(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", nil)
	var runs atomic.Int32
	_ = switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		runs.Add(1)
		return nil
	}, nil)
	bad := publish(t, e.b,
		&broker.Message{Lane: "interactive", Kind: "conformance.e2e", Body: []byte(`{"scenario": 7`)},
		&broker.Message{Lane: "interactive", Kind: "nobody.handles.this", Body: []byte(`{}`)})
	e.start()
	dead := receiveDead(t, e.b, "interactive", 2, 30*time.Second)
	reasons := map[string]broker.Reason{}
	for _, d := range dead {
		reasons[d.ID] = d.DeadLetter.Reason
	}
	if reasons[bad[0].ID] != broker.ReasonUndecodable || reasons[bad[1].ID] != broker.ReasonUnknownKind {
		t.Fatalf("dead-letter reasons %v, want %s for the bad args and %s for the unknown kind", reasons, broker.ReasonUndecodable, broker.ReasonUnknownKind)
	}
	for _, d := range dead {
		if len(d.DeadLetter.Attempts) > 1 {
			t.Errorf("bad input %s was tried %d times", d.ID, len(d.DeadLetter.Attempts))
		}
	}
	if runs.Load() != 0 {
		t.Errorf("the handler ran %d times for input it cannot take", runs.Load())
	}
}

// TestE2ESnooze: a snoozed task comes back later without spending an
// attempt.
func TestE2ESnooze(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", nil)
	var seen []int
	var mu sync.Mutex
	_ = switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		mu.Lock()
		seen = append(seen, tk.Attempt)
		n := len(seen)
		mu.Unlock()
		if n <= 2 {
			return switchyard.Snooze(200 * time.Millisecond)
		}
		return nil
	}, nil)
	id := e.enqueue(e2eArgs{Scenario: "snooze"}, nil)
	e.start()
	task := e.waitState(id, 30*time.Second, ledger.Completed)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != 1 || seen[1] != 1 || seen[2] != 1 {
		t.Errorf("attempts seen %v, want [1 1 1]: a snooze spends no attempt", seen)
	}
	if task.Attempt != 1 {
		t.Errorf("ledger attempt %d, want 1", task.Attempt)
	}
}

// TestE2EGracefulStop: stopping a busy server loses nothing: running tasks
// finish, unstarted ones go back, and a new server completes every task
// with its effect once.
func TestE2EGracefulStop(t *testing.T, h *Harness) {
	dsn := ledgerDSN(t, h)
	var effects counter
	handler := func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		select {
		case <-time.After(150 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := switchyard.Effect(ctx, "write", func(ctx context.Context) (bool, error) {
			effects.add(tk.ID)
			return true, nil
		}, nil)
		return err
	}
	first := newEnv(t, h, dsn, &scheduler.Config{Slots: 4})
	_ = switchyard.Register(first.srv, handler, nil)
	var ids []string
	for i := 0; i < 20; i++ {
		ids = append(ids, first.enqueue(e2eArgs{Scenario: "stop", N: i}, &switchyard.EnqueueOpts{Lane: "batch"}))
	}
	if err := first.srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := first.srv.Stop(ctx)
	cancel()
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	second := newEnv(t, h, dsn, &scheduler.Config{Slots: 4})
	_ = switchyard.Register(second.srv, handler, nil)
	second.start()
	for _, id := range ids {
		second.waitState(id, 60*time.Second, ledger.Completed)
	}
	for _, id := range ids {
		if n := effects.get(id); n != 1 {
			t.Errorf("task %s: effect performed %d times, want 1", id, n)
		}
	}
}

// TestE2EOrdering: tasks that share an ordering key start in enqueue order
// and never run at the same time; other keys run in parallel (point 8).
func TestE2EOrdering(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", &scheduler.Config{Slots: 6})
	var mu sync.Mutex
	active, next := map[string]int{}, map[string]int{}
	maxPar := 0
	var errs []string
	_ = switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		mu.Lock()
		active[tk.Args.Key]++
		if active[tk.Args.Key] > 1 {
			errs = append(errs, fmt.Sprintf("key %s ran twice at once", tk.Args.Key))
		}
		if tk.Args.N != next[tk.Args.Key] {
			errs = append(errs, fmt.Sprintf("key %s started %d, want %d", tk.Args.Key, tk.Args.N, next[tk.Args.Key]))
		}
		next[tk.Args.Key] = tk.Args.N + 1
		par := 0
		for _, a := range active {
			if a > 0 {
				par++
			}
		}
		maxPar = max(maxPar, par)
		mu.Unlock()
		time.Sleep(60 * time.Millisecond)
		mu.Lock()
		active[tk.Args.Key]--
		mu.Unlock()
		return nil
	}, nil)
	var ids []string
	for i := 0; i < 5; i++ {
		for k := 0; k < 3; k++ {
			key := fmt.Sprintf("conversation-%d", k)
			ids = append(ids, e.enqueue(e2eArgs{Scenario: "order", N: i, Key: key}, &switchyard.EnqueueOpts{Lane: "interactive", OrderingKey: key}))
		}
	}
	e.start()
	for _, id := range ids {
		e.waitState(id, 60*time.Second, ledger.Completed)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range errs {
		t.Error(s)
	}
	if maxPar < 2 {
		t.Errorf("at most %d keys ran at once; different keys must run in parallel", maxPar)
	}
}
