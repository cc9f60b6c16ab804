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

// cappedDriver wraps a driver, caps its receives at batch messages (as SQS
// caps them at ten) and counts the receives of one lane: how many are in
// flight at once, what they ask for, and how long they may wait.
type cappedDriver struct {
	broker.Driver
	batch    int
	ordering bool
	lane     string
	hold     bool // hold a receive (after the first) until another is in flight

	mu        sync.Mutex
	calls     int
	inflight  int
	maxFlight int
	asked     int // messages asked for by receives in flight
	maxAsked  int
	solo      int // receives in a row that started with no other in flight
	zeroWait  int // receives that asked not to wait
	joined    chan struct{}
	joinOnce  sync.Once
}

func (w *cappedDriver) Capabilities() broker.Capabilities {
	c := w.Driver.Capabilities()
	c.MaxBatch = w.batch
	c.Ordering = w.ordering // the embedded broker orders natively; SQS standard queues do not
	return c
}

func (w *cappedDriver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	if req.Lane != w.lane || req.DeadLetters {
		return w.Driver.Receive(ctx, req)
	}
	w.mu.Lock()
	n := w.calls
	w.calls++
	w.inflight++
	w.maxFlight = max(w.maxFlight, w.inflight)
	w.asked += req.Max
	w.maxAsked = max(w.maxAsked, w.asked)
	if w.inflight == 1 {
		w.solo++
	} else {
		w.solo = 0
		w.joinOnce.Do(func() { close(w.joined) })
	}
	if req.Wait <= 0 {
		w.zeroWait++
	}
	hold := w.hold && n > 0
	w.mu.Unlock()
	ds, err := w.Driver.Receive(ctx, req)
	if hold {
		// Without a fan-out no other receive of the lane can start while
		// this one is held: the bound ends the holding and the test fails.
		select {
		case <-w.joined:
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			w.mu.Lock()
			w.hold = false
			w.mu.Unlock()
		}
	}
	w.mu.Lock()
	w.inflight--
	w.asked -= req.Max
	w.mu.Unlock()
	return ds, err
}

func (w *cappedDriver) snapshot() (calls, maxFlight, maxAsked, solo, zeroWait int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls, w.maxFlight, w.maxAsked, w.solo, w.zeroWait
}

// runCapped publishes a backlog of n tasks to the interactive lane of a broker whose
// receives w caps, runs them through a scheduler (Prefetch 80: room for
// eight batches of ten) and waits until all have run.
func runCapped(t *testing.T, w *cappedDriver, n int) *scheduler.Scheduler {
	t.Helper()
	ctx := context.Background()
	mem, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Driver, w.lane, w.joined = mem.Driver(), "interactive", make(chan struct{})
	b, err := broker.New(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	// A backlog: enqueued a minute ago (fanout.go starts receivers only
	// for messages that waited).
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = &broker.Message{Kind: "k", Lane: "interactive", EnqueuedAt: time.Now().Add(-time.Minute)}
	}
	if _, err := b.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(b, &scheduler.Config{Slots: 4, Prefetch: 80, PollWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	done := make(chan struct{})
	if err := s.Handle("k", func(ctx context.Context, j *scheduler.Job) ([]byte, error) {
		if ran.Add(1) == int64(n) {
			close(done)
		}
		return nil, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%d of %d tasks ran", ran.Load(), n)
	}
	return s
}

// TestFetch_FanOut: on a broker that caps a receive at ten messages while
// the lane's buffer holds 80, a backlog is received by several receives
// at once, never asking together for more than the buffer holds; once the
// queue is empty, the lane is back to one receive at a time, each waiting
// for work (no busy loop).
func TestFetch_FanOut(t *testing.T) {
	t.Parallel()
	w := &cappedDriver{batch: 10, hold: true}
	runCapped(t, w, 600)
	calls, maxFlight, maxAsked, _, _ := w.snapshot()
	if maxFlight < 2 {
		t.Fatalf("at most %d receive of the lane in flight over %d receives: no fan-out", maxFlight, calls)
	}
	if maxAsked > 80 {
		t.Fatalf("receives in flight asked for %d messages together, beyond Prefetch 80", maxAsked)
	}
	// The queue is empty now: wait for twenty receives in a row that ran
	// alone (counted, not timed: the bound only stops a broken build).
	w.mu.Lock()
	w.zeroWait = 0
	w.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		calls, _, _, solo, zeroWait := w.snapshot()
		if zeroWait > 0 {
			t.Fatalf("%d receives of an empty queue asked not to wait", zeroWait)
		}
		if solo >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the queue emptied, %d receives, last %d alone: the extra receivers did not stop", calls, solo)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFetch_NoFanOutWhenOrdered: on a broker that orders messages itself
// (SQS FIFO queues), a lane keeps to one receive at a time.
func TestFetch_NoFanOutWhenOrdered(t *testing.T) {
	t.Parallel()
	w := &cappedDriver{batch: 10, ordering: true}
	runCapped(t, w, 300)
	if calls, maxFlight, _, _, _ := w.snapshot(); maxFlight != 1 {
		t.Fatalf("%d receives of an ordered lane in flight at once (over %d receives), want 1", maxFlight, calls)
	}
}
