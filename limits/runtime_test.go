package limits_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type callArgs struct{ N int }

func (callArgs) Kind() string { return "limits.test.call" }

// rig is a real Server and Client on a fresh mem:// broker with a SQLite
// ledger, and an observer that records events.
type rig struct {
	t      *testing.T
	L      ledger.Ledger
	path   string // the SQLite ledger's file
	client *switchyard.Client
	srv    *switchyard.Server

	mu     sync.Mutex
	events []scheduler.Event
	done   chan scheduler.Event // succeeded, dead, cancelled
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	L, err := ledger.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	name := strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name()))
	b, err := broker.Open(ctx, "mem://"+name+fmt.Sprint(time.Now().UnixNano()), &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	r := &rig{t: t, L: L, path: path, done: make(chan scheduler.Event, 100)}
	r.client, err = switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	r.srv, err = switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 20 * time.Millisecond,
		Retry: scheduler.RetryPolicy{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond},
		Observer: func(e scheduler.Event) {
			r.mu.Lock()
			r.events = append(r.events, e)
			r.mu.Unlock()
			switch e.Type {
			case scheduler.EventSucceeded, scheduler.EventDead, scheduler.EventCancelled:
				r.done <- e
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) start() {
	r.t.Helper()
	if err := r.srv.Start(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.srv.Stop(ctx)
	})
}

func (r *rig) enqueue(n, maxAttempts int) []string {
	r.t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		res, err := r.client.Enqueue(context.Background(), callArgs{N: i}, &switchyard.EnqueueOpts{MaxAttempts: maxAttempts, Tenant: "acme"})
		if err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	return ids
}

// wait returns the n final events, failing after 15 s.
func (r *rig) wait(n int) []scheduler.Event {
	r.t.Helper()
	var out []scheduler.Event
	timeout := time.After(15 * time.Second)
	for len(out) < n {
		select {
		case e := <-r.done:
			out = append(out, e)
		case <-timeout:
			r.t.Fatalf("only %d of %d tasks finished in 15s", len(out), n)
		}
	}
	return out
}

func (r *rig) count(typ scheduler.EventType) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// A task that cannot get capacity is snoozed: it spends no attempt (so a
// task allowed one attempt still completes after several snoozes) and the
// limit holds.
func TestLimiter_SnoozeSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	lim, err := limits.New(limits.Config{Store: limits.NewMemoryStore(nil), MaxInlineWait: time.Nanosecond,
		Rules: []limits.Rule{{Name: "model", Limit: limits.Limit{Requests: 10, Interval: time.Second, BurstRequests: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls []time.Time
	var attempts []int
	switchyard.Register(r.srv, func(ctx context.Context, task *switchyard.Task[callArgs]) error {
		res, err := lim.Wait(ctx, limits.Request{Key: limits.Key{Provider: "p", Model: "m"}, Lane: task.Lane})
		if err != nil {
			return limits.Result(err)
		}
		mu.Lock()
		calls = append(calls, time.Now())
		attempts = append(attempts, task.Attempt)
		mu.Unlock()
		return res.Settle(ctx, 0)
	}, nil)
	r.start()
	const n = 5
	r.enqueue(n, 1)
	for _, e := range r.wait(n) {
		if e.Type != scheduler.EventSucceeded {
			t.Fatalf("task %s ended %s (%v)", e.TaskID, e.Type, e.Err)
		}
	}
	snoozes := r.count(scheduler.EventSnoozed)
	if snoozes == 0 {
		t.Fatal("no task was snoozed: the test did not exercise the limit")
	}
	for i, a := range attempts {
		if a != 1 {
			t.Fatalf("call %d ran in attempt %d: snoozes spent attempts", i, a)
		}
	}
	// 10/s with a burst of 1: admissions are 100ms apart. The times here
	// are taken after admission, so scheduling noise on a loaded machine
	// can shorten one gap; the span of all of them cannot be shorter.
	// (The exact check, with an injected clock, is limitstest.)
	if span := calls[len(calls)-1].Sub(calls[0]); span < time.Duration(len(calls)-1)*100*time.Millisecond-20*time.Millisecond {
		t.Fatalf("%d calls within %s under a 10/s limit with burst 1", len(calls), span)
	}
	t.Logf("%d tasks, %d snoozes, every task succeeded in attempt 1 with MaxAttempts 1", n, snoozes)
}

var errDown = errors.New("tool: 503 service unavailable")

// An open breaker delays tasks (snooze, no attempt spent) instead of
// failing them, the flaky dependency is not hammered, and the half-open
// probe closes the breaker.
func TestBreaker_OpenDelaysNotFails(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var healthy atomic.Bool
	var failures, toolCalls atomic.Int32
	var transitions []string
	var tmu sync.Mutex
	br := limits.NewBreakers(limits.BreakerConfig{Failures: 2, Open: 300 * time.Millisecond,
		OnStateChange: func(dep, from, to string) {
			tmu.Lock()
			transitions = append(transitions, from+"→"+to)
			tmu.Unlock()
			if to == "open" {
				// The tool recovers as the breaker opens, so the probe
				// at half-open finds it healthy however late this
				// loaded machine runs it (a timer here once fired
				// after the probe and counted a fourth failure).
				healthy.Store(true)
			}
		}})
	var mu sync.Mutex
	okAttempt := map[string]int{}
	switchyard.Register(r.srv, func(ctx context.Context, task *switchyard.Task[callArgs]) error {
		_, err := limits.Protect(ctx, br, "tool:search", func(ctx context.Context) (string, error) {
			toolCalls.Add(1)
			if !healthy.Load() {
				failures.Add(1)
				return "", errDown
			}
			return "ok", nil
		})
		if err != nil {
			return limits.Result(err)
		}
		mu.Lock()
		okAttempt[task.ID] = task.Attempt
		mu.Unlock()
		return nil
	}, nil)
	r.start()
	const n = 6
	r.enqueue(n, 3)
	for _, e := range r.wait(n) {
		if e.Type != scheduler.EventSucceeded {
			t.Fatalf("task %s ended %s (%v): an open breaker must delay, not fail", e.TaskID, e.Type, e.Err)
		}
	}
	// Two failures open the breaker; a call already in flight when it
	// opens may fail too, but the rest must be held back.
	f := int(failures.Load())
	if f < 2 || f > 3 {
		t.Fatalf("the failing tool was called %d times while down; the breaker should stop it after 2 (3 with one in flight)", f)
	}
	snoozes := r.count(scheduler.EventSnoozed)
	if snoozes == 0 {
		t.Fatal("no task was snoozed by the open breaker")
	}
	first := 0
	for _, a := range okAttempt {
		if a == 1 {
			first++
		}
	}
	// Only the tasks that hit one of the failures spent an attempt.
	if first < n-f {
		t.Fatalf("only %d of %d tasks succeeded in attempt 1; snoozes behind the breaker must not spend attempts", first, n)
	}
	tmu.Lock()
	defer tmu.Unlock()
	got := strings.Join(transitions, ",")
	if !strings.HasPrefix(got, "closed→open,open→half-open,") || !strings.HasSuffix(got, "half-open→closed") {
		t.Fatalf("breaker transitions %s, want it opened, probed and closed", got)
	}
	if s := br.State("tool:search"); s != "closed" {
		t.Fatalf("breaker %s after recovery", s)
	}
	t.Logf("tool calls %d (failures %d), snoozes %d, breaker %v", toolCalls.Load(), failures.Load(), snoozes, transitions)
}

// A budget is spent across retries: the run crossing MaxModelCalls in its
// second attempt is dead-lettered with a budget error, the ledger shows
// the usage and the stop, and LedgerUsage sums it.
func TestBudget_StopsAcrossRetries(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	meter, err := limits.NewMeter(limits.MeterConfig{Store: limits.NewMemoryStore(nil), Ledger: r.L})
	if err != nil {
		t.Fatal(err)
	}
	budget := limits.Budget{MaxModelCalls: 3, MaxSpend: 1}
	var calls atomic.Int32
	switchyard.Register(r.srv, func(ctx context.Context, task *switchyard.Task[callArgs]) error {
		run, err := meter.StartJob(ctx, task.Job, budget)
		if err != nil {
			return limits.Result(err)
		}
		for i := 0; i < 2; i++ {
			c := limits.Call{Kind: limits.ModelCall, Key: limits.Key{Provider: "p", Model: "m"}, Tokens: 100, Spend: 0.01}
			if err := run.Begin(ctx, c); err != nil {
				return limits.Result(err)
			}
			calls.Add(1)
			if err := run.End(ctx, c, 80, 0.008); err != nil {
				return limits.Result(err)
			}
		}
		return errors.New("model answer did not parse") // transient: retried
	}, nil)
	r.start()
	ids := r.enqueue(1, 5)
	ev := r.wait(1)[0]
	if ev.Type != scheduler.EventDead {
		t.Fatalf("task ended %s, want dead", ev.Type)
	}
	if ev.Reason != broker.ReasonBudget {
		t.Fatalf("dead-letter reason %s, want %s", ev.Reason, broker.ReasonBudget)
	}
	if !strings.Contains(ev.Err.Error(), "budget exceeded: max_model_calls") {
		t.Fatalf("dead-letter error %q does not name the budget", ev.Err)
	}
	if c := calls.Load(); c != 3 {
		t.Fatalf("%d model calls made under a budget of 3", c)
	}
	ctx := context.Background()
	task, err := r.L.Get(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if task.State != ledger.Dead || task.Attempt != 2 {
		t.Fatalf("ledger: state %s attempt %d, want dead in attempt 2", task.State, task.Attempt)
	}
	evs, _ := r.L.Events(ctx, ids[0])
	var usage, stopped int
	for _, e := range evs {
		switch e.Reason {
		case limits.EventUsage:
			usage++
		case limits.EventBudgetExceeded:
			if e.To == "" { // the meter's record; the runtime's move to dead carries the same reason code
				stopped++
			} else if e.To != ledger.Dead {
				t.Errorf("budget_exceeded transition to %s, want dead", e.To)
			}
		}
	}
	if usage != 3 || stopped != 1 {
		t.Fatalf("ledger events: %d usage, %d budget_exceeded records; want 3 and 1", usage, stopped)
	}
	u, _ := meter.Store().TaskUsage(ctx, ids[0])
	if u.ModelCalls != 3 || u.Tokens != 240 {
		t.Fatalf("task usage %+v", u)
	}
	rows, err := limits.LedgerUsage(ctx, r.L, ledger.Filter{Tenant: "acme"}, limits.Query{By: []limits.Field{limits.Tenant, limits.Model}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Key.Tenant != "acme" || rows[0].Usage.ModelCalls != 3 || rows[0].Usage.Tokens != 240 {
		t.Fatalf("LedgerUsage = %+v", rows)
	}
}
