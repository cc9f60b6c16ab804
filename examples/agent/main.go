// Agent runs agent-like research tasks under Switchyard's AI-workload
// controls (package limits) on the embedded broker with a SQLite ledger,
// and prints what each control did:
//
//   - a token- and request-limited fake model: calls reserve capacity
//     before they are made and settle to the actual count after; a task
//     that cannot get capacity is snoozed without spending an attempt;
//
//   - a 429 with Retry-After from the model backs the key off for every
//     task (adaptive throttling);
//
//   - a flaky search tool behind a circuit breaker: after two failures
//     the breaker opens and tasks wait (snoozed, not failed) until a
//     half-open probe succeeds;
//
//   - fallback from the big model to the small one when the big one is
//     overloaded;
//
//   - per-run budgets: a free-tier task whose next call would cross its
//     spend budget is stopped and dead-lettered with the reason;
//
//   - accounting: tokens, calls and spend per tenant and model.
//
//     go run ./examples/agent
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/embedded" // embedded://
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite" // sqlite://
	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Research is an agent task: plan, search, synthesize.
type Research struct{ Topic string }

func (Research) Kind() string { return "agent.research" }

var start = time.Now()

func say(format string, args ...any) {
	fmt.Printf("%6.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

// --- the fake world -------------------------------------------------------

// rateLimited is the fake provider's 429.
type rateLimited struct{ retryAfter time.Duration }

func (e *rateLimited) Error() string {
	return fmt.Sprintf("429 Too Many Requests (retry after %s)", e.retryAfter)
}

// fakeModel answers with a token count; it throttles once and the big
// model is overloaded once.
type fakeModel struct {
	calls      atomic.Int32
	throttled  atomic.Bool
	overloaded atomic.Bool
}

func (m *fakeModel) complete(ctx context.Context, model string, maxTokens int64) (int64, error) {
	n := m.calls.Add(1)
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(15 * time.Millisecond):
	}
	if n == 3 && m.throttled.CompareAndSwap(false, true) {
		return 0, &rateLimited{retryAfter: 300 * time.Millisecond}
	}
	if model == "big" && n >= 6 && m.overloaded.CompareAndSwap(false, true) {
		return 0, errors.New("503 model overloaded")
	}
	return maxTokens * 3 / 4, nil // the answer used three quarters of the estimate
}

// price per token, USD.
var price = map[string]float64{"big": 10e-6, "small": 1e-6}

// search is a tool that fails its first three calls.
type search struct{ calls atomic.Int32 }

func (s *search) query(ctx context.Context, topic string) (string, error) {
	if s.calls.Add(1) <= 3 {
		return "", errors.New("search: 503 service unavailable")
	}
	return "3 sources on " + topic, nil
}

// --- the agent ------------------------------------------------------------

type agent struct {
	lim      *limits.Limiter
	breakers *limits.Breakers
	meter    *limits.Meter
	model    *fakeModel
	tool     *search
}

// callModel makes one model call under the limiter and the run's budget.
func (a *agent) callModel(ctx context.Context, run *limits.Run, t *switchyard.Task[Research], model string, est int64) (int64, error) {
	key := limits.Key{Provider: "fakeai", Model: model, Tenant: t.Tenant, Kind: t.Job.Kind}
	call := limits.Call{Kind: limits.ModelCall, Key: key, Tokens: est, Spend: float64(est) * price[model]}
	// The budget first (a call it refuses is not worth waiting for), then
	// rate-limit capacity, then the budget's atomic count.
	if err := run.Check(ctx, call); err != nil {
		return 0, err
	}
	res, err := a.lim.Wait(ctx, limits.Request{Key: key, Tokens: est, Lane: t.Lane})
	var we *limits.WaitError
	if errors.As(err, &we) {
		say("limiter   %-18s %s: no capacity for %d tokens, snoozing %s", t.Args.Topic, model, est, we.Wait.Round(time.Millisecond))
	}
	if err != nil {
		return 0, err
	}
	if err := run.Begin(ctx, call); err != nil {
		_ = res.Cancel(ctx)
		return 0, err
	}
	used, err := a.model.complete(ctx, model, est)
	var rl *rateLimited
	if errors.As(err, &rl) {
		_ = res.Cancel(ctx)
		say("throttle  %-18s %s answered 429: key backs off %s for every task", t.Args.Topic, model, rl.retryAfter)
		return 0, a.lim.Throttled(ctx, key, rl.retryAfter, err)
	}
	if err != nil {
		_ = res.Cancel(ctx)
		say("model     %-18s %s failed: %v", t.Args.Topic, model, err)
		return 0, err
	}
	if err := res.Settle(ctx, used); err != nil {
		return 0, err
	}
	say("model     %-18s %s: reserved %d tokens, used %d (refunded %d)", t.Args.Topic, model, est, used, est-used)
	return used, run.End(ctx, call, used, float64(used)*price[model])
}

func (a *agent) handle(ctx context.Context, t *switchyard.Task[Research]) error {
	budget := limits.Budget{WallClock: 20 * time.Second, MaxModelCalls: 5, MaxToolCalls: 3, MaxTokens: 5000, MaxSpend: 0.05}
	if t.Tenant == "free-tier" {
		budget.MaxSpend = 0.003
	}
	run, err := a.meter.StartJob(ctx, t.Job, budget)
	if err != nil {
		return limits.Result(err)
	}
	if _, err := switchyard.Step(ctx, "plan", func(ctx context.Context) (int64, error) {
		return a.callModel(ctx, run, t, "big", 200)
	}); err != nil {
		return limits.Result(err)
	}
	if _, err := switchyard.Step(ctx, "search", func(ctx context.Context) (string, error) {
		return limits.Protect(ctx, a.breakers, "tool:search", func(ctx context.Context) (string, error) {
			c := limits.Call{Kind: limits.ToolCall, Key: limits.Key{Tool: "search"}}
			if err := run.Begin(ctx, c); err != nil {
				return "", err
			}
			out, err := a.tool.query(ctx, t.Args.Topic)
			if err != nil {
				say("tool      %-18s search failed (attempt %d): %v", t.Args.Topic, t.Attempt, err)
			}
			return out, errors.Join(err, run.End(ctx, c, 0, 0))
		})
	}); err != nil {
		if errors.Is(err, limits.ErrOpen) {
			say("breaker   %-18s %v: snoozing", t.Args.Topic, err)
		}
		return limits.Result(err)
	}
	used, err := switchyard.Step(ctx, "synthesize", func(ctx context.Context) (string, error) {
		var bigErr error
		_, name, err := limits.Fallback(ctx, nil,
			limits.Route[int64]{Name: "big", Call: func(ctx context.Context) (int64, error) {
				n, err := a.callModel(ctx, run, t, "big", 400)
				bigErr = err
				return n, err
			}},
			limits.Route[int64]{Name: "small", Call: func(ctx context.Context) (int64, error) { return a.callModel(ctx, run, t, "small", 400) }})
		if err == nil && name != "big" {
			say("fallback  %-18s big model: %v; answered by %s", t.Args.Topic, bigErr, name)
		}
		return name, err
	})
	if err != nil {
		if errors.Is(err, limits.ErrBudgetExceeded) {
			say("budget    %-18s %v", t.Args.Topic, err)
		}
		return limits.Result(err)
	}
	say("done      %-18s synthesized by %s model", t.Args.Topic, used)
	return nil
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "switchyard-agent-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "ledger.db"))
	if err != nil {
		return err
	}
	defer L.Close()
	b, err := broker.Open(ctx, "embedded://"+filepath.Join(dir, "queue.db"), &broker.Options{Dedup: L})
	if err != nil {
		return err
	}
	defer b.Close()

	// One store for the limits and the accounting (redisstore.Store to
	// share them across worker processes).
	store := limits.NewMemoryStore(nil)
	lim, err := limits.New(limits.Config{Store: store, MaxInlineWait: 50 * time.Millisecond, Rules: []limits.Rule{{
		Name: "fakeai", Match: limits.Key{Provider: "fakeai"}, By: []limits.Field{limits.Model},
		Limit: limits.Limit{Requests: 20, Tokens: 1500, Interval: time.Second, BurstTokens: 700, Reserved: 0.2},
	}}})
	if err != nil {
		return err
	}
	meter, err := limits.NewMeter(limits.MeterConfig{Store: store, Ledger: L})
	if err != nil {
		return err
	}
	a := &agent{lim: lim, meter: meter, model: &fakeModel{}, tool: &search{},
		breakers: limits.NewBreakers(limits.BreakerConfig{Failures: 2, Open: 400 * time.Millisecond,
			OnStateChange: func(dep, from, to string) { say("breaker   %-18s %s → %s", dep, from, to) }})}

	var (
		mu       sync.Mutex
		snoozes  int
		finished = make(chan scheduler.Event, 16)
	)
	client, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		return err
	}
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 20 * time.Millisecond, Slots: 4,
		Retry: scheduler.RetryPolicy{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond},
		Observer: func(e scheduler.Event) {
			switch e.Type {
			case scheduler.EventSnoozed:
				mu.Lock()
				snoozes++
				mu.Unlock()
			case scheduler.EventRetried:
				say("runtime   task %s attempt %d failed, retrying: %v", e.TaskID[:8], e.Attempt, e.Err)
			case scheduler.EventSucceeded, scheduler.EventDead:
				finished <- e
			}
		}})
	if err != nil {
		return err
	}
	if err := switchyard.Register(srv, a.handle, nil); err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = srv.Stop(sctx)
	}()

	tasks := []struct{ topic, tenant, lane string }{
		{"battery chemistry", "acme", "batch"},
		{"tidal power", "acme", "batch"},
		{"grid storage", "globex", "interactive"},
		{"solar recycling", "free-tier", "batch"},
	}
	for _, tk := range tasks {
		if _, err := client.Enqueue(ctx, Research{Topic: tk.topic}, &switchyard.EnqueueOpts{Tenant: tk.tenant, Lane: tk.lane, MaxAttempts: 4}); err != nil {
			return err
		}
	}
	timeout := time.After(20 * time.Second)
	for range tasks {
		select {
		case e := <-finished:
			if e.Type == scheduler.EventDead {
				say("runtime   task %s dead-lettered (%s): %v", e.TaskID[:8], e.Reason, e.Err)
			}
		case <-timeout:
			return errors.New("tasks did not finish in 20s")
		}
	}

	fmt.Println()
	mu.Lock()
	fmt.Printf("snoozes (no attempt spent): %d; model calls seen by the provider: %d; search calls: %d\n", snoozes, a.model.calls.Load(), a.tool.calls.Load())
	mu.Unlock()
	fmt.Println("accounting by tenant and model (limits store):")
	rows, err := store.Sum(ctx, limits.Query{By: []limits.Field{limits.Tenant, limits.Model, limits.Tool}})
	if err != nil {
		return err
	}
	for _, r := range rows {
		what := r.Key.Model
		if r.Key.Tool != "" {
			what = "tool:" + r.Key.Tool
		}
		fmt.Printf("  %-10s %-12s model_calls=%d tool_calls=%d tokens=%-5d spend=$%.4f\n", r.Key.Tenant, what, r.Usage.ModelCalls, r.Usage.ToolCalls, r.Usage.Tokens, r.Usage.Spend)
	}
	rows, err = limits.LedgerUsage(ctx, L, ledger.Filter{}, limits.Query{By: []limits.Field{limits.Tenant}})
	if err != nil {
		return err
	}
	fmt.Println("the same from the ledger's usage events, by tenant:")
	for _, r := range rows {
		fmt.Printf("  %-10s %s\n", r.Key.Tenant, r.Usage)
	}
	return nil
}
