package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// slowBatchAckDriver wraps a driver: an ack of more than one delivery
// waits until its context ends (a broker that stalls on the batch); an ack
// of one goes through, and is counted.
type slowBatchAckDriver struct {
	broker.Driver
	mu    sync.Mutex
	acked map[string]int
}

func (w *slowBatchAckDriver) Ack(ctx context.Context, ds []*broker.Delivery) error {
	if len(ds) > 1 {
		<-ctx.Done()
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	w.mu.Lock()
	w.acked[ds[0].ID]++
	w.mu.Unlock()
	return w.Driver.Ack(ctx, ds)
}

// TestAcker_RetriesAfterBatchTimeout: a batched ack that runs out of its
// bound (opTimeout) is retried one delivery at a time with a bound of its
// own, so every delivery is acked once; with the batch's expired context
// each retry failed at once and every delivery came back after its lease.
func TestAcker_RetriesAfterBatchTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem, err := broker.Open(ctx, "mem://acker-timeout-"+time.Now().Format("150405.000000000"), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &slowBatchAckDriver{Driver: mem.Driver(), acked: map[string]int{}}
	b, err := broker.New(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s, err := New(b, &Config{Slots: 8, Lease: time.Minute, PollWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.opTimeout = 200 * time.Millisecond
	const n = 5
	for i := 0; i < n; i++ {
		if _, err := b.PublishOne(ctx, &broker.Message{Kind: "k", Lane: "interactive"}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "interactive", Max: n, Lease: time.Minute})
	if err != nil || len(ds) != n {
		t.Fatalf("received %d deliveries, error %v; want %d", len(ds), err, n)
	}
	a := &acker{s: s}
	a.flush(ds)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range ds {
		if w.acked[d.ID] != 1 {
			t.Errorf("delivery %s acked %d times after the batch timed out, want once", d.ID, w.acked[d.ID])
		}
	}
	// Acked, not leased: nothing comes back (the lease is a minute).
	if st, err := b.Stats(ctx, "interactive"); err != nil {
		t.Fatal(err)
	} else if st.Ready+st.InFlight != 0 {
		t.Errorf("after the acks the lane holds %d ready and %d in flight, want none", st.Ready, st.InFlight)
	}
}
