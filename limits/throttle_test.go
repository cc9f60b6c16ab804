package limits_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// A 429 with Retry-After reported by one task backs the key off for every
// task: nobody calls the provider again before it, and the tasks are
// snoozed (no attempt spent), not failed.
func TestThrottle_BacksOffEveryTask(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	lim, err := limits.New(limits.Config{Store: limits.NewMemoryStore(nil),
		Rules: []limits.Rule{{Name: "provider", By: []limits.Field{limits.Provider}, Limit: limits.Limit{Requests: 1000, Interval: time.Second, BurstRequests: 5}}}})
	if err != nil {
		t.Fatal(err)
	}
	const retryAfter = 300 * time.Millisecond
	var (
		mu        sync.Mutex
		throttled time.Time
		calls     []time.Time
		attempts  []int
	)
	key := limits.Key{Provider: "p", Model: "m"}
	switchyard.Register(r.srv, func(ctx context.Context, task *switchyard.Task[callArgs]) error {
		res, err := lim.Wait(ctx, limits.Request{Key: key, Tokens: 10})
		if err != nil {
			return limits.Result(err)
		}
		mu.Lock()
		now := time.Now()
		calls = append(calls, now)
		first := throttled.IsZero()
		if first {
			throttled = now
		}
		mu.Unlock()
		if first { // the provider's answer to the first call
			_ = res.Cancel(ctx)
			return limits.Result(lim.Throttled(ctx, key, retryAfter, errors.New("429 Too Many Requests")))
		}
		mu.Lock()
		attempts = append(attempts, task.Attempt)
		mu.Unlock()
		return res.Settle(ctx, 10)
	}, nil)
	r.start()
	const n = 4
	r.enqueue(n, 1)
	for _, e := range r.wait(n) {
		if e.Type != scheduler.EventSucceeded {
			t.Fatalf("task %s ended %s (%v)", e.TaskID, e.Type, e.Err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range calls[1:] {
		if d := c.Sub(throttled); d < retryAfter {
			t.Fatalf("a call %s after the 429, before its Retry-After of %s", d, retryAfter)
		}
	}
	for _, a := range attempts {
		if a != 1 {
			t.Fatalf("a task ran in attempt %d: the throttle spent attempts", a)
		}
	}
	if r.count(scheduler.EventSnoozed) == 0 {
		t.Fatal("no task was snoozed")
	}
}
