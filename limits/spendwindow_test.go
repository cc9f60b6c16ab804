package limits_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/scheduler"
	"github.com/switchyard-dev/switchyard/spend"
)

// A tenant's daily window refuses the call whose estimate would cross
// it, releases a refused call's reservation, settles to the actual cost
// (freeing what the estimate over-reserved), leaves other tenants alone
// and opens again the next UTC day.
func TestMeter_SpendWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 23, 0, 0, 0, time.UTC)
	clk := func() time.Time { return now }
	st := limits.NewMemoryStore(clk)
	day := spend.Window{Tenant: "acme", Period: 24 * time.Hour, Cap: 1_000}
	meter, err := limits.NewMeter(limits.MeterConfig{Store: st, Spend: st, Windows: []spend.Window{day}, Now: clk})
	if err != nil {
		t.Fatal(err)
	}
	run, err := meter.Start(ctx, "t1", "acme", "k", limits.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	call := limits.Call{Kind: limits.ModelCall, Key: limits.Key{Provider: "p", Model: "m"}, Spend: 0.0004} // 400 micros
	for i := 0; i < 2; i++ {
		if err := run.Begin(ctx, call); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if err := run.EndSpend(ctx, call, spend.Usage{Input: 10, Output: 5}, 300); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.SpendInWindow("acme", day, now); got != 600 {
		t.Fatalf("window holds %d micros after two calls settled at 300, want 600", got)
	}
	// 600 + 400 = 1000 fits exactly; the next one does not.
	if err := run.Begin(ctx, call); err != nil {
		t.Fatalf("a call reaching the cap exactly was refused: %v", err)
	}
	err = run.Begin(ctx, call)
	var se *limits.SpendCapError
	if !errors.As(err, &se) || !errors.Is(err, limits.ErrBudgetExceeded) || !errors.Is(err, spend.ErrCapExceeded) {
		t.Fatalf("Begin over the cap = %v, want a refusing *SpendCapError", err)
	}
	if se.Spent != 1_000 || se.Estimate != 400 || se.RetryIn != time.Hour || !strings.Contains(err.Error(), `tenant "acme"`) {
		t.Fatalf("cap error %+v (%v)", se, err)
	}
	if !scheduler.IsPermanent(limits.Result(err)) {
		t.Fatalf("Result of a refusing window is not a dead letter: %v", limits.Result(err))
	}
	if err := run.End(ctx, call, 0, 0); err != nil { // the third call failed: release its reservation
		t.Fatal(err)
	}
	if got := st.SpendInWindow("acme", day, now); got != 600 {
		t.Fatalf("window holds %d after a released call, want 600", got)
	}
	// Other tenants are not capped by acme's window.
	other, _ := meter.Start(ctx, "t2", "globex", "k", limits.Budget{})
	for i := 0; i < 5; i++ {
		if err := other.Begin(ctx, call); err != nil {
			t.Fatalf("uncapped tenant refused: %v", err)
		}
	}
	// A per-run budget refusal releases the window's reservation.
	small, _ := meter.Start(ctx, "t3", "acme", "k", limits.Budget{MaxModelCalls: 1})
	if err := small.Begin(ctx, call); err != nil {
		t.Fatal(err)
	}
	if err := small.Begin(ctx, limits.Call{Kind: limits.ModelCall, Spend: 0.0001}); !errors.Is(err, limits.ErrBudgetExceeded) {
		t.Fatalf("second call under MaxModelCalls 1: %v", err)
	}
	if got := st.SpendInWindow("acme", day, now); got != 1_000 {
		t.Fatalf("window holds %d, want 1000 (600 settled + 400 reserved; the refused call released)", got)
	}
	// The next UTC day opens a new window.
	now = now.Add(time.Hour)
	if err := run.Begin(ctx, call); err != nil {
		t.Fatalf("a new day's window refused: %v", err)
	}
}

func TestMeter_SpendWindowSnooze(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	clk := func() time.Time { return now }
	st := limits.NewMemoryStore(clk)
	meter, err := limits.NewMeter(limits.MeterConfig{Store: st, Spend: st, Now: clk,
		Windows: []spend.Window{{Period: time.Hour, Cap: 100, Action: spend.Snooze}}})
	if err != nil {
		t.Fatal(err)
	}
	run, _ := meter.Start(ctx, "t1", "", "k", limits.Budget{})
	err = run.Begin(ctx, limits.Call{Kind: limits.ModelCall, Spend: 0.000101})
	var se *limits.SpendCapError
	if !errors.As(err, &se) || errors.Is(err, limits.ErrBudgetExceeded) || se.RetryIn != time.Hour {
		t.Fatalf("Begin = %v, want a snoozing *SpendCapError an hour from the reset", err)
	}
	res := limits.Result(err)
	if scheduler.IsPermanent(res) || !strings.Contains(res.Error(), "snoozed for 1h") {
		t.Fatalf("Result = %v, want a snooze of about an hour", res)
	}
}

func TestMeter_SpendWindowConfig(t *testing.T) {
	t.Parallel()
	st := limits.NewMemoryStore(nil)
	for name, cfg := range map[string]limits.MeterConfig{
		"windows without a spend store": {Store: st, Windows: []spend.Window{{Period: time.Hour, Cap: 1}}},
		"zero cap":                      {Store: st, Spend: st, Windows: []spend.Window{{Period: time.Hour}}},
		"zero period":                   {Store: st, Spend: st, Windows: []spend.Window{{Cap: 1}}},
		"unknown action":                {Store: st, Spend: st, Windows: []spend.Window{{Period: time.Hour, Cap: 1, Action: 7}}},
	} {
		if _, err := limits.NewMeter(cfg); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: NewMeter = %v, want ErrInvalid", name, err)
		}
	}
	for _, v := range []float64{-1, 1e300} {
		if _, err := limits.MicrosOf(v); err == nil {
			t.Errorf("MicrosOf(%v) accepted", v)
		}
	}
	ctx := context.Background()
	meter, _ := limits.NewMeter(limits.MeterConfig{Store: st, Spend: st, Windows: []spend.Window{{Period: time.Hour, Cap: 1000}}})
	run, _ := meter.Start(ctx, "t", "x", "k", limits.Budget{})
	if err := run.Begin(ctx, limits.Call{Kind: limits.ModelCall, Spend: -0.5}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("negative estimate: %v", err)
	}
	c := limits.Call{Kind: limits.ModelCall, Spend: 0.0001}
	if err := run.Begin(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := run.EndSpend(ctx, c, spend.Usage{Input: -1}, 1); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("negative usage: %v", err)
	}
}
