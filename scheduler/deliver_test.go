package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// TestScheduler_RunDelivery: a scheduler that was never started runs a
// delivery received by its caller to its end — a failure is nacked for a
// retry, the retry completes and is acked, the ledger records both
// attempts — and refuses a delivery of a lane it does not serve.
func TestScheduler_RunDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b := scheduler.OpenTestEnv(t, conformance.Namespace(t))
	s, err := scheduler.New(b, &scheduler.Config{Ledger: L, Retry: scheduler.RetryPolicy{Base: time.Millisecond, Jitter: scheduler.NoJitter}})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	if err := s.Handle("k", func(ctx context.Context, j *scheduler.Job) ([]byte, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("flaky")
		}
		return []byte(`"ok"`), nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishOne(ctx, &broker.Message{ID: "t1", Kind: "k", Lane: "interactive"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; calls < 2; i++ {
		if i == 50 {
			t.Fatalf("the task ran %d times in 50 receives", calls)
		}
		ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "interactive", Max: 1, Lease: time.Minute, Wait: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := s.RunDelivery(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	tk, err := L.Get(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	as, _ := L.Attempts(ctx, "t1")
	if tk.State != ledger.Completed || len(as) != 2 {
		t.Fatalf("task %s with %d attempts, want completed with 2", tk.State, len(as))
	}
	if st, _ := b.Stats(ctx, "interactive"); st.Ready+st.InFlight+st.Delayed != 0 {
		t.Fatalf("the lane still holds %+v", st)
	}
	err = s.RunDelivery(ctx, &broker.Delivery{Message: broker.Message{ID: "x", Kind: "k", Lane: "nope"}})
	if !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("RunDelivery of an unserved lane = %v, want ErrInvalid", err)
	}
}
