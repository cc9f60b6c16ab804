package scheduler

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestRun_SettlesAfterLongHandler: the bound on the runtime's own calls
// about a task (opTimeout) counts from the handler's return, not from its
// start. A handler that ran longer than the bound still gets its outcome
// recorded in the ledger and its message acked or retried. (The bound used
// to start before the handler: after a handler longer than 30 s, the
// ledger write and the nack failed with an expired context, so the ledger
// said running and a failed task was not retried until its lease ran out.)
func TestRun_SettlesAfterLongHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b := OpenTestEnv(t, "settle-long-"+time.Now().Format("150405.000000000"))
	s, err := New(b, &Config{Ledger: L, Slots: 4, Lease: 10 * time.Second, PollWait: 50 * time.Millisecond,
		Retry: RetryPolicy{Base: time.Millisecond, Max: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	// The bound must hold the settling itself (a ledger write and an ack
	// or nack): at 100 ms, a load of 13 on two cores made the nack miss
	// it ("nack: context deadline exceeded"), and the task then waited
	// for its lease. A handler longer than the bound is all the test needs.
	s.opTimeout = time.Second
	const long = 1500 * time.Millisecond // one and a half bounds
	var runs atomic.Int32
	if err := s.Handle("k.ok", func(ctx context.Context, j *Job) ([]byte, error) {
		time.Sleep(long)
		return nil, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Handle("k.retry", func(ctx context.Context, j *Job) ([]byte, error) {
		if runs.Add(1) == 1 {
			time.Sleep(long)
			return nil, errors.New("first attempt fails")
		}
		return nil, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*broker.Message{
		{ID: "long-ok", Lane: "batch", Kind: "k.ok", Body: []byte(`{}`)},
		{ID: "long-retry", Lane: "batch", Kind: "k.retry", Body: []byte(`{}`), MaxAttempts: 3},
	} {
		if _, _, err := L.Create(ctx, &ledger.Task{ID: m.ID, Kind: m.Kind, Lane: m.Lane, Args: m.Body, MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.PublishOne(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	for _, id := range []string{"long-ok", "long-retry"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			lt, err := L.Get(ctx, id)
			if err == nil && lt.State == ledger.Completed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not completed in the ledger within 10s: %+v, %v", id, lt, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("k.retry ran %d times, want 2 (a failed attempt, then its retry)", n)
	}
}
