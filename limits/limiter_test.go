package limits_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/limits/limitstest"
	"github.com/switchyard-dev/switchyard/scheduler"
)

func isPermanent(err error) bool { return scheduler.IsPermanent(err) }

func TestNew_Invalid(t *testing.T) {
	t.Parallel()
	st := limits.NewMemoryStore(nil)
	for name, cfg := range map[string]limits.Config{
		"no store":      {},
		"no name":       {Store: st, Rules: []limits.Rule{{}}},
		"duplicate":     {Store: st, Rules: []limits.Rule{{Name: "a"}, {Name: "a"}}},
		"bad field":     {Store: st, Rules: []limits.Rule{{Name: "a", By: []limits.Field{"colour"}}}},
		"negative":      {Store: st, Rules: []limits.Rule{{Name: "a", Limit: limits.Limit{Requests: -1}}}},
		"reserved >= 1": {Store: st, Rules: []limits.Rule{{Name: "a", Limit: limits.Limit{Requests: 1, Reserved: 1}}}},
	} {
		if _, err := limits.New(cfg); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: New = %v, want ErrInvalid", name, err)
		}
	}
	l, _ := limits.New(limits.Config{Store: st})
	if _, err := l.Reserve(context.Background(), limits.Request{Tokens: -1}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("negative estimate: %v", err)
	}
}

// Wait sleeps in place for short waits and hands long ones back.
func TestLimiter_WaitInlineOrSnooze(t *testing.T) {
	t.Parallel()
	clk := limitstest.NewClock()
	l, err := limits.New(limits.Config{Store: limits.NewMemoryStore(clk.Now), Sleep: clk.Sleep, MaxInlineWait: 200 * time.Millisecond,
		Rules: []limits.Rule{{Name: "r", Limit: limits.Limit{Requests: 10, Interval: time.Second, BurstRequests: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := clk.Now()
	for i := 0; i < 3; i++ {
		if _, err := l.Wait(ctx, limits.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	if d := clk.Now().Sub(start); d != 200*time.Millisecond {
		t.Fatalf("three calls at 10/s with burst 1 took %s of clock, want 200ms", d)
	}
	if err := l.Throttle(ctx, limits.Key{}, time.Second); err != nil {
		t.Fatal(err)
	}
	_, err = l.Wait(ctx, limits.Request{})
	var we *limits.WaitError
	if !errors.As(err, &we) || we.Wait < time.Second {
		t.Fatalf("Wait during a 1s throttle = %v, want a *WaitError of at least 1s", err)
	}
}

func TestBreakers_PermanentErrorsDoNotTrip(t *testing.T) {
	t.Parallel()
	br := limits.NewBreakers(limits.BreakerConfig{Failures: 2, Open: time.Minute})
	ctx := context.Background()
	bad := func(ctx context.Context) (int, error) { return 0, scheduler.Permanent(errors.New("400 bad request")) }
	for i := 0; i < 5; i++ {
		if _, err := limits.Protect(ctx, br, "api", bad); !isPermanent(err) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if s := br.State("api"); s != "closed" {
		t.Fatalf("permanent errors opened the breaker: %s", s)
	}
	down := func(ctx context.Context) (int, error) { return 0, errors.New("connection refused") }
	for i := 0; i < 2; i++ {
		_, _ = limits.Protect(ctx, br, "api", down)
	}
	_, err := limits.Protect(ctx, br, "api", func(ctx context.Context) (int, error) {
		t.Fatal("called through an open breaker")
		return 0, nil
	})
	var oe *limits.OpenError
	if !errors.As(err, &oe) || oe.RetryIn <= 0 || oe.RetryIn > time.Minute || !errors.Is(err, limits.ErrOpen) {
		t.Fatalf("call through an open breaker: %v", err)
	}
	if v, err := limits.Protect(ctx, br, "other", func(ctx context.Context) (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Fatalf("another dependency: %v, %v", v, err)
	}
}

func BenchmarkMemoryStore_Reserve(b *testing.B) {
	l, err := limits.New(limits.Config{Store: limits.NewMemoryStore(nil), Rules: []limits.Rule{{Name: "bench", By: []limits.Field{limits.Model},
		Limit: limits.Limit{Requests: 1 << 40, Tokens: 1 << 50, Interval: time.Second}}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := limits.Request{Key: limits.Key{Model: "m"}, Tokens: 100}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := l.Reserve(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMemoryStore_ReserveSettle(b *testing.B) {
	l, err := limits.New(limits.Config{Store: limits.NewMemoryStore(nil), Rules: []limits.Rule{{Name: "bench", By: []limits.Field{limits.Model},
		Limit: limits.Limit{Requests: 1 << 40, Tokens: 1 << 50, Interval: time.Second}}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := limits.Request{Key: limits.Key{Model: "m"}, Tokens: 100}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r, err := l.Reserve(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		_ = r.Settle(ctx, 80)
	}
}
