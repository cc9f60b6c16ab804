package limits_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/scheduler"
)

func TestFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ok := func(s string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return s, nil }
	}
	fail := func(err error) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return "", err }
	}
	v, used, err := limits.Fallback(ctx, nil, limits.Route[string]{"big", fail(&limits.OpenError{Dependency: "big", RetryIn: time.Second})}, limits.Route[string]{"small", ok("answer")})
	if err != nil || v != "answer" || used != "small" {
		t.Fatalf("open breaker on the primary: %q %q %v", v, used, err)
	}
	v, used, _ = limits.Fallback(ctx, nil, limits.Route[string]{"big", ok("primary")}, limits.Route[string]{"small", ok("x")})
	if v != "primary" || used != "big" {
		t.Fatalf("healthy primary: %q %q", v, used)
	}
	called := false
	_, _, err = limits.Fallback(ctx, nil, limits.Route[string]{"big", fail(scheduler.Permanent(errors.New("400: prompt too long")))},
		limits.Route[string]{"small", func(context.Context) (string, error) { called = true; return "", nil }})
	if called || !scheduler.IsPermanent(err) {
		t.Fatalf("a permanent error fell back (called=%v) or lost its class: %v", called, err)
	}
	_, _, err = limits.Fallback(ctx, nil, limits.Route[string]{"big", fail(errors.New("503"))}, limits.Route[string]{"small", fail(&limits.WaitError{Wait: time.Second})})
	if !errors.Is(err, limits.ErrLimited) {
		t.Fatalf("every route failed: %v, want the last route's control error", err)
	}
	if _, _, err := limits.Fallback[string](ctx, nil); err == nil {
		t.Fatal("no routes accepted")
	}
}
