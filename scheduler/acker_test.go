package scheduler_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// gatedAckDriver wraps a driver: its acks wait for a gate (a broker slower
// than the handlers), and it counts acks and returns per delivery ID.
type gatedAckDriver struct {
	broker.Driver
	gate chan struct{}

	mu       sync.Mutex
	acked    map[string]int
	released map[string]int
	calls    int
	maxBatch int
}

func (w *gatedAckDriver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	select {
	case <-w.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.mu.Lock()
	w.calls++
	w.maxBatch = max(w.maxBatch, len(ds))
	for _, d := range ds {
		w.acked[d.ID]++
	}
	w.mu.Unlock()
	return w.Driver.Ack(ctx, ds)
}

func (w *gatedAckDriver) Release(ctx context.Context, d *broker.Delivery, delay time.Duration) error {
	w.mu.Lock()
	w.released[d.ID]++
	w.mu.Unlock()
	return w.Driver.(broker.Releaser).Release(ctx, d, delay)
}

// TestAcker_FullListAndStop: the broker's acks stall while handlers keep
// finishing, so the acker's list fills to its bound (workers then wait
// for room), and the scheduler is stopped in that state; then the acks
// go through. Every task that ran is acked exactly once, none is acked
// without having run, an ack never carries more than a batch, and no more
// handlers finish than the list, the batch in flight and the slots hold.
func TestAcker_FullListAndStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &gatedAckDriver{Driver: mem.Driver(), gate: make(chan struct{}), acked: map[string]int{}, released: map[string]int{}}
	b, err := broker.New(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	const n, slots = 1500, 8
	const bound = 100 + 400 + slots // a batch in flight, ackMaxPending, a worker per slot
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = &broker.Message{Kind: "k", Lane: "interactive"}
	}
	if _, err := b.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(b, &scheduler.Config{Slots: slots, Prefetch: 64, Lease: time.Minute, PollWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]int{}
	var nran atomic.Int64
	if err := s.Handle("k", func(ctx context.Context, j *scheduler.Job) ([]byte, error) {
		mu.Lock()
		ran[j.ID]++
		mu.Unlock()
		nran.Add(1)
		return nil, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Wait until the list is about full: a batch taken (its ack stalled;
	// it holds what came in the first linger, often less than 100) and
	// up to ackMaxPending waiting behind it.
	for deadline := time.Now().Add(time.Minute); nran.Load() < 400; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d handlers ran with acks stalled, want at least 400", nran.Load())
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	// Stop is waiting for the workers, which wait for room in the list.
	time.Sleep(50 * time.Millisecond) // only lets Stop reach its wait; nothing depends on it
	if got := nran.Load(); got > bound {
		t.Errorf("%d handlers finished with acks stalled, want at most %d (the list's bound)", got, bound)
	}
	close(w.gate)
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Stop did not return after the acks went through")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	for id, k := range ran {
		if k != 1 {
			t.Errorf("%s ran %d times", id, k)
		}
		if a := w.acked[id]; a != 1 {
			t.Errorf("%s ran and was acked %d times", id, a)
		}
		if w.released[id] != 0 {
			t.Errorf("%s ran and was also returned", id)
		}
	}
	for id, a := range w.acked {
		if ran[id] == 0 {
			t.Errorf("%s acked %d times without running", id, a)
		}
	}
	if w.maxBatch > 100 {
		t.Errorf("an ack carried %d deliveries, want at most a batch (100)", w.maxBatch)
	}
	st, err := b.Stats(ctx, "interactive")
	if err != nil {
		t.Fatal(err)
	}
	if left := int(st.Ready + st.InFlight + st.Delayed); left != n-len(ran) {
		t.Errorf("%d ran and %d left in the queue (%+v), want %d in all", len(ran), left, st, n)
	}
	t.Logf("%d ran, %d returned, %d ack calls, largest %d", len(ran), len(w.released), w.calls, w.maxBatch)
}
