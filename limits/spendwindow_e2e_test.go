package limits_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	opto "github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/providerbatch"
	"github.com/switchyard-dev/switchyard/providerbatch/fakeprovider"
	pbopenai "github.com/switchyard-dev/switchyard/providerbatch/openai"
	"github.com/switchyard-dev/switchyard/providerbatch/sqlstore"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/spend"
)

// A run over a per-tenant daily cap, end to end: tasks of tenant acme call
// the (fake) provider directly through the OpenAI SDK under a window of
// $0.003075 per UTC day (7.5 calls at $0.00041 each), on a real Server with
// the SQLite ledger holding the window's reservations. Seven calls are
// made, the rest are dead-lettered with reason budget_exceeded and the
// window's text (also on each task's event log); the tenant's settled
// spend stops at the cap within one call's price; another tenant is not
// capped; and the spend recorded reconciles exactly with the usage the
// provider reported.
func TestSpendWindow_EndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	st, err := sqlstore.OpenSQLite(ctx, r.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fake := fakeprovider.New()
	t.Cleanup(fake.Close)
	prov := pbopenai.New(oai.NewClient(opto.WithBaseURL(fake.URL+"/v1/"), opto.WithAPIKey("test"), opto.WithMaxRetries(0)))
	const model = "test-model"
	prices, err := spend.NewTable(map[string]spend.Price{"openai/" + model: {Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	price, _ := prices.Price("openai", model)
	perCall := price.Cost(spend.Usage{Input: 100, Output: 16}, spend.Direct) // 400-character prompts: 100 tokens in, 16 out
	if perCall != 410 {
		t.Fatalf("per-call price %d micros, want 410", perCall)
	}
	window := spend.Window{Tenant: "acme", Period: 24 * time.Hour, Cap: perCall*7 + perCall/2}
	reg := prometheus.NewRegistry()
	metrics, err := providerbatch.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	meter, err := limits.NewMeter(limits.MeterConfig{Store: limits.NewMemoryStore(nil), Ledger: r.L, Spend: st, Windows: []spend.Window{window},
		SpendObserver: metrics})
	if err != nil {
		t.Fatal(err)
	}
	switchyard.Register(r.srv, func(ctx context.Context, task *switchyard.Task[callArgs]) error {
		run, err := meter.StartJob(ctx, task.Job, limits.Budget{})
		if err != nil {
			return limits.Result(err)
		}
		// A distinct 200-character system prompt per task (no cache hits)
		// and a 200-character question: the estimate is exact.
		sys := fmt.Sprintf("%-200s", fmt.Sprintf("system prompt of task %d", task.Args.N))
		q := fmt.Sprintf("%-200s", fmt.Sprintf("question %d", task.Args.N))
		body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 16, "messages": []any{
			map[string]any{"role": "system", "content": sys}, map[string]any{"role": "user", "content": q}}})
		est := price.Cost(spend.Usage{Input: 100, Output: 16}, spend.Direct)
		c := limits.Call{Kind: limits.ModelCall, Key: limits.Key{Provider: "openai", Model: model}, Tokens: 116, Spend: float64(est) / 1e6}
		if err := run.Begin(ctx, c); err != nil {
			return limits.Result(err)
		}
		res, err := prov.Call(ctx, providerbatch.Item{CustomID: task.Job.ID, Model: model, Params: body})
		if err == nil && res.Err != nil {
			err = scheduler.Permanent(res.Err)
		}
		if err != nil {
			_ = run.End(ctx, c, 0, 0)
			return err
		}
		return limits.Result(run.EndSpend(ctx, c, res.Usage, price.Cost(res.Usage, spend.Direct)))
	}, nil)
	r.start()
	tenants := map[string]string{}
	for i := 0; i < 15; i++ {
		tenant := "acme"
		if i%5 == 4 {
			tenant = "globex" // 3 tasks
		}
		res, err := r.client.Enqueue(ctx, callArgs{N: i}, &switchyard.EnqueueOpts{Tenant: tenant, MaxAttempts: 3})
		if err != nil {
			t.Fatal(err)
		}
		tenants[res.ID] = tenant
	}
	ok := map[string]int{}
	for _, e := range r.wait(15) {
		tenant := tenants[e.TaskID]
		switch e.Type {
		case scheduler.EventSucceeded:
			ok[tenant]++
		case scheduler.EventDead:
			if tenant != "acme" || e.Reason != broker.ReasonBudget || !strings.Contains(e.Err.Error(), `spend cap: tenant "acme"`) {
				t.Errorf("task %s of %s dead: %s %v", e.TaskID, tenant, e.Reason, e.Err)
				continue
			}
			evs, err := r.L.Events(ctx, e.TaskID)
			if err != nil {
				t.Fatal(err)
			}
			shown := false
			for _, ev := range evs {
				shown = shown || (ev.Reason == limits.EventSpendCap && strings.Contains(ev.Detail, "refused"))
			}
			if !shown {
				t.Errorf("task %s: no %s event on its log", e.TaskID, limits.EventSpendCap)
			}
		default:
			t.Errorf("task %s ended %s", e.TaskID, e.Type)
		}
	}
	if ok["acme"] != 7 || ok["globex"] != 3 {
		t.Fatalf("completed %v, want acme 7 (the cap holds 7.5 calls) and globex 3", ok)
	}
	rows, err := st.Spend(ctx, sqlstore.SpendQuery{By: []string{"tenant", "state"}})
	if err != nil {
		t.Fatal(err)
	}
	var total spend.Micros
	var calls int64
	for _, row := range rows {
		if row.Group["state"] != "settled" {
			t.Errorf("a %s reservation is left: %+v", row.Group["state"], row)
		}
		if row.Group["tenant"] == "acme" {
			if row.Cost > window.Cap || window.Cap-row.Cost >= perCall {
				t.Errorf("acme settled %s under a cap of %s: not within one call (%s)", row.Cost, window.Cap, perCall)
			}
			t.Logf("acme: %d calls, %s settled of a %s cap (one call %s)", row.Calls, row.Cost, window.Cap, perCall)
		}
		total += row.Cost
		calls += row.Calls
	}
	billed := fake.Billed()["direct/"+model]
	want := price.Cost(spend.Usage{Input: billed.Input, CachedInput: billed.CachedInput, Output: billed.Output}, spend.Direct)
	if calls != 10 || total != want {
		t.Fatalf("recorded %d calls costing %s; the provider billed %+v = %s", calls, total, billed, want)
	}
	// The same figures in Prometheus, as direct spend.
	if v := counterOf(t, reg, "switchyard_spend_micros_total", "acme"); v != 2870 {
		t.Errorf("switchyard_spend_micros_total{tenant=acme} = %v, want 2870", v)
	}
	if v := counterOf(t, reg, "switchyard_spend_refused_total", "acme"); v != 5 {
		t.Errorf("switchyard_spend_refused_total{tenant=acme} = %v, want 5", v)
	}
}

// counterOf sums the series of counter name whose tenant label is tenant
// (failing when one has another mode than direct).
func counterOf(t *testing.T, reg *prometheus.Registry, name, tenant string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["tenant"] != tenant {
				continue
			}
			if mode, ok := labels["mode"]; ok && mode != "direct" {
				t.Errorf("%s%v: mode %s, want direct", name, labels, mode)
			}
			sum, found = sum+m.GetCounter().GetValue(), true
		}
	}
	if !found {
		t.Fatalf("no %s{tenant=%s}", name, tenant)
	}
	return sum
}

// A window with Action spend.Snooze, on a real Server: the call over the
// cap snoozes its task until the window resets (no attempt spent, not
// dead-lettered), and the task's event log says why.
func TestSpendWindow_SnoozeOnServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	st := limits.NewMemoryStore(nil)
	meter, err := limits.NewMeter(limits.MeterConfig{Store: st, Spend: st, Ledger: r.L,
		Windows: []spend.Window{{Period: 24 * time.Hour, Cap: 1_000, Action: spend.Snooze}}})
	if err != nil {
		t.Fatal(err)
	}
	switchyard.Register(r.srv, func(ctx context.Context, task *switchyard.Task[callArgs]) error {
		run, err := meter.StartJob(ctx, task.Job, limits.Budget{})
		if err != nil {
			return limits.Result(err)
		}
		c := limits.Call{Kind: limits.ModelCall, Key: limits.Key{Provider: "p", Model: "m"}, Spend: 0.0006}
		if err := run.Begin(ctx, c); err != nil {
			return limits.Result(err)
		}
		return limits.Result(run.EndSpend(ctx, c, spend.Usage{Input: 10}, 600))
	}, nil)
	r.start()
	ids := r.enqueue(2, 1)
	if e := r.wait(1)[0]; e.Type != scheduler.EventSucceeded {
		t.Fatalf("first task ended %s, want succeeded", e.Type)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.count(scheduler.EventSnoozed) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the task over the cap was never snoozed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var snoozed string
	for _, id := range ids {
		evs, err := r.L.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Reason == limits.EventSpendCap {
				snoozed = id
				if !strings.Contains(ev.Detail, "snoozed until the window resets") {
					t.Errorf("spend_cap event %q", ev.Detail)
				}
			}
		}
	}
	if snoozed == "" {
		t.Fatal("no spend_cap event on either task")
	}
	tk, err := r.L.Get(ctx, snoozed)
	if err != nil {
		t.Fatal(err)
	}
	if tk.State == ledger.Dead || tk.State == ledger.Failed {
		t.Fatalf("the snoozed task is %s", tk.State)
	}
	if r.count(scheduler.EventDead) != 0 {
		t.Fatal("a task was dead-lettered")
	}
}
