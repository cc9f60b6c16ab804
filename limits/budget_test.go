package limits_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/limits/limitstest"
)

func newMeter(t *testing.T) (*limits.Meter, *limitstest.Clock) {
	t.Helper()
	clk := limitstest.NewClock()
	m, err := limits.NewMeter(limits.MeterConfig{Store: limits.NewMemoryStore(clk.Now), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return m, clk
}

func wantBudget(t *testing.T, err error, field string) {
	t.Helper()
	var be *limits.BudgetError
	if !errors.As(err, &be) || be.Limit != field || !errors.Is(err, limits.ErrBudgetExceeded) {
		t.Fatalf("got %v, want a budget error on %s", err, field)
	}
}

func TestRun_TokensAndSpendAcrossAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, _ := newMeter(t)
	b := limits.Budget{MaxTokens: 1000, MaxSpend: 0.05, MaxToolCalls: 2}
	model := limits.Call{Kind: limits.ModelCall, Key: limits.Key{Model: "m"}, Tokens: 300, Spend: 0.01}

	// Attempt 1: two calls of 300 estimated, 400 actual each.
	run, err := m.Start(ctx, "t1", "acme", "agent", b)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := run.Begin(ctx, model); err != nil {
			t.Fatal(err)
		}
		if err := run.End(ctx, model, 400, 0.02); err != nil {
			t.Fatal(err)
		}
	}
	// Attempt 2 (a retry) reuses the totals: 800 used, an estimate of 300
	// would cross 1000, so the call is refused before it is made.
	run, err = m.Start(ctx, "t1", "acme", "agent", b)
	if err != nil {
		t.Fatal(err)
	}
	wantBudget(t, run.Begin(ctx, model), limits.FieldTokens)
	small := limits.Call{Kind: limits.ModelCall, Key: limits.Key{Model: "m"}, Tokens: 100, Spend: 0.005}
	if err := run.Begin(ctx, small); err != nil {
		t.Fatal(err)
	}
	// The actual count crosses both; the call is recorded and the run stops.
	err = run.End(ctx, small, 250, 0.02)
	wantBudget(t, err, limits.FieldTokens)
	u, _ := run.Usage(ctx)
	if u.ModelCalls != 3 || u.Tokens != 1050 {
		t.Fatalf("usage %+v", u)
	}
	tool := limits.Call{Kind: limits.ToolCall, Key: limits.Key{Tool: "search"}}
	run2, _ := m.Start(ctx, "t2", "acme", "agent", b)
	for i := 0; i < 2; i++ {
		if err := run2.Begin(ctx, tool); err != nil {
			t.Fatal(err)
		}
		_ = run2.End(ctx, tool, 0, 0)
	}
	wantBudget(t, run2.Begin(ctx, tool), limits.FieldToolCalls)
	run3, _ := m.Start(ctx, "t3", "acme", "agent", limits.Budget{MaxSpend: 0.05})
	if err := run3.Begin(ctx, limits.Call{Spend: 0.05}); err != nil {
		t.Fatalf("an estimate exactly at the spend limit: %v", err)
	}
	wantBudget(t, run3.End(ctx, limits.Call{}, 10, 0.051), limits.FieldSpend)

	rows, err := m.Store().Sum(ctx, limits.Query{By: []limits.Field{limits.Tenant, limits.Kind}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Usage.ModelCalls != 4 || rows[0].Usage.ToolCalls != 2 || rows[0].Usage.Tokens != 1060 {
		t.Fatalf("Sum by tenant and kind = %+v", rows)
	}
}

func TestRun_WallClockSpansRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, clk := newMeter(t)
	b := limits.Budget{WallClock: time.Minute}
	run, err := m.Start(ctx, "t1", "", "agent", b)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(40 * time.Second)
	if got := run.Remaining(); got != 20*time.Second {
		t.Fatalf("Remaining = %s", got)
	}
	// A retry 40 s later has 20 s left, not a fresh minute.
	run, err = m.Start(ctx, "t1", "", "agent", b)
	if err != nil {
		t.Fatal(err)
	}
	if !run.FirstStart().Equal(clk.Now().Add(-40 * time.Second)) {
		t.Fatalf("FirstStart %v", run.FirstStart())
	}
	clk.Advance(21 * time.Second)
	wantBudget(t, run.Begin(ctx, limits.Call{}), limits.FieldWallClock)
	_, err = m.Start(ctx, "t1", "", "agent", b)
	wantBudget(t, err, limits.FieldWallClock)
}

func TestResult_Mapping(t *testing.T) {
	t.Parallel()
	be := &limits.BudgetError{TaskID: "t", Limit: limits.FieldSpend, Used: "2", Max: "1"}
	if err := limits.Result(be); !isPermanent(err) || !errors.Is(err, limits.ErrBudgetExceeded) {
		t.Fatalf("Result(budget) = %v, want permanent and still a budget error", err)
	}
	if err := limits.Result(limits.ErrTooLarge); !isPermanent(err) {
		t.Fatalf("Result(too large) = %v, want permanent", err)
	}
	other := errors.New("boom")
	if limits.Result(other) != other || limits.Result(nil) != nil {
		t.Fatal("Result changed an unrelated error")
	}
	for _, err := range []error{&limits.WaitError{Wait: time.Second}, &limits.OpenError{Dependency: "d", RetryIn: time.Second},
		&limits.ThrottledError{RetryAfter: time.Second, Err: other}} {
		got := limits.Result(err)
		if got == err || isPermanent(got) || errors.Is(got, limits.ErrLimited) {
			t.Fatalf("Result(%v) = %v, want a snooze", err, got)
		}
	}
	for i := 0; i < 100; i++ {
		if j := limits.Jitter(time.Second); j < time.Second || j > 1200*time.Millisecond {
			t.Fatalf("Jitter(1s) = %s", j)
		}
	}
	if j := limits.Jitter(0); j < limits.MinSnooze {
		t.Fatalf("Jitter(0) = %s", j)
	}
}
