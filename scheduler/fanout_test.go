package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/switchyard-dev/switchyard/adapters/embedded" // mem://
	"github.com/switchyard-dev/switchyard/broker"
)

func TestFanOut(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		room, capped int
		wide         bool
		want         int
	}{
		{128, 10, false, 1}, // the last receive was not full
		{128, 0, true, 1},   // no cap: one receive takes the room
		{10, 10, true, 1},   // room for one batch only
		{25, 10, true, 3},
		{128, 10, true, maxFanOut},
	} {
		if got := fanOut(c.room, c.capped, c.wide); got != c.want {
			t.Errorf("fanOut(%d, %d, %v) = %d, want %d", c.room, c.capped, c.wide, got, c.want)
		}
	}
}

// cappedDriver is the embedded broker with SQS's receive shape: at most
// ten messages per receive, each receive taking a round trip (slow). It
// records how many receives of the batch lane were in flight at once (each
// lane has its own fetch loop).
type cappedDriver struct {
	broker.Driver
	slow time.Duration

	mu       sync.Mutex
	inFlight int
	most     int
	calls    int
}

func (d *cappedDriver) Capabilities() broker.Capabilities {
	c := d.Driver.Capabilities()
	c.MaxBatch = 10
	return c
}

func (d *cappedDriver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	if req.Lane != "batch" {
		return d.Driver.Receive(ctx, req)
	}
	d.mu.Lock()
	d.inFlight++
	d.calls++
	d.most = max(d.most, d.inFlight)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.inFlight--
		d.mu.Unlock()
	}()
	if req.Max > 10 {
		panic("receive above MaxBatch")
	}
	time.Sleep(d.slow)
	return d.Driver.Receive(ctx, req)
}

// TestFetch_FansOutOverCappedReceives: on a broker whose receives return
// at most MaxBatch messages, a lane with a backlog runs several receives
// at once instead of one small batch per round trip; every task runs
// once. Without the fan-out no two receives of the lane overlap.
func TestFetch_FansOutOverCappedReceives(t *testing.T) {
	ctx := context.Background()
	inner, err := broker.Open(ctx, "mem://fanout-"+time.Now().Format("150405.000000000"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	d := &cappedDriver{Driver: inner.Driver(), slow: 20 * time.Millisecond}
	b, err := broker.New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = &broker.Message{Lane: "batch", Kind: "k", Body: []byte("{}")}
	}
	rs, err := b.Publish(ctx, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}

	s, err := New(b, &Config{Slots: 64, Prefetch: 128, PollWait: 50 * time.Millisecond, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	var done atomic.Int32
	all := make(chan struct{})
	if err := s.Handle("k", func(ctx context.Context, j *Job) ([]byte, error) {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		if done.Add(1) == n {
			close(all)
		}
		return nil, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%d of %d tasks ran", done.Load(), n)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, c := range runs {
		if c != 1 {
			t.Errorf("task %s ran %d times", id, c)
		}
	}
	if len(runs) != n {
		t.Errorf("%d distinct tasks ran, want %d", len(runs), n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.most < 2 {
		t.Errorf("at most %d receives in flight over %d calls: the lane never fanned out", d.most, d.calls)
	}
}
