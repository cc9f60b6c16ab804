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

// lateDriver wraps a driver and, once armed, holds the next receive of
// lane that brings messages until gate is closed. A receive whose context
// ends first drops what it took, as SQS does when the call is cancelled
// while its response is on the way: the messages stay leased to nobody
// until their lease ends.
type lateDriver struct {
	broker.Driver
	lane  string
	gate  chan struct{}
	took  chan int // the held receive's message count
	armed atomic.Bool
	lost  atomic.Int64
}

func (w *lateDriver) Receive(ctx context.Context, req broker.ReceiveRequest) ([]*broker.Delivery, error) {
	ds, err := w.Driver.Receive(ctx, req)
	if req.Lane != w.lane || len(ds) == 0 || !w.armed.CompareAndSwap(true, false) {
		return ds, err
	}
	w.took <- len(ds)
	select {
	case <-w.gate:
		return ds, err
	case <-ctx.Done():
		w.lost.Add(int64(len(ds)))
		return nil, ctx.Err()
	}
}

// stopEnv is a scheduler on a mem broker wrapped by w, whose "k" handler
// blocks until release is closed; started counts the handlers started.
type stopEnv struct {
	b       *broker.Broker
	s       *scheduler.Scheduler
	release chan struct{}
	started chan string // one a handler start, for waitStarted

	mu  sync.Mutex
	ran map[string]int // handler starts by task
}

// runs returns how many times each task's handler started.
func (e *stopEnv) runs() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.ran))
	for id, n := range e.ran {
		out[id] = n
	}
	return out
}

func newStopEnv(t *testing.T, wrap func(broker.Driver) broker.Driver, cfg scheduler.Config) *stopEnv {
	t.Helper()
	mem, err := broker.Open(context.Background(), "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(wrap(mem.Driver()), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s, err := scheduler.New(b, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &stopEnv{b: b, s: s, release: make(chan struct{}), started: make(chan string, 1024), ran: map[string]int{}}
	if err := s.Handle("k", func(ctx context.Context, j *scheduler.Job) ([]byte, error) {
		e.mu.Lock()
		e.ran[j.ID]++
		e.mu.Unlock()
		e.started <- j.ID
		<-e.release
		return nil, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *stopEnv) publish(t *testing.T, n int) []string {
	t.Helper()
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = &broker.Message{Kind: "k", Lane: "interactive"}
	}
	rs, err := e.b.Publish(context.Background(), msgs...)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}

func (e *stopEnv) waitStarted(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-e.started:
		case <-time.After(30 * time.Second):
			t.Fatalf("fewer than %d handlers started", n)
		}
	}
}

// available receives what the lane offers now (the stopped scheduler's
// leases were a minute: what it did not give back is not there) and
// checks each comes on its first attempt.
func (e *stopEnv) available(t *testing.T, want int) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		ds, err := e.b.Receive(context.Background(), broker.ReceiveRequest{Lane: "interactive", Max: 100, Lease: time.Minute, Wait: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Attempt != 1 {
				t.Errorf("task %s came back on attempt %d, want 1: it never started", d.ID, d.Attempt)
			}
			got[d.ID] = true
		}
	}
	if len(got) != want {
		t.Fatalf("%d tasks came back after Stop, want %d", len(got), want)
	}
	return got
}

// TestStop_ReceiveInFlight: a receive in flight when Stop begins, which
// brings messages after Stop has taken the buffer, is not cancelled: Stop
// gives its messages back at once, unspent, with the buffered ones.
func TestStop_ReceiveInFlight(t *testing.T) {
	t.Parallel()
	w := &lateDriver{lane: "interactive", gate: make(chan struct{}), took: make(chan int, 1)}
	var gateOnce sync.Once
	cfg := scheduler.Config{Slots: 4, Prefetch: 8, Lease: time.Minute, PollWait: 50 * time.Millisecond,
		Observer: func(ev scheduler.Event) {
			if ev.Type == scheduler.EventReturned {
				// Stop has taken the buffer: the held receive returns now.
				gateOnce.Do(func() { close(w.gate) })
			}
		}}
	e := newStopEnv(t, func(d broker.Driver) broker.Driver { w.Driver = d; return w }, cfg)
	e.publish(t, 6)
	if err := e.s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Interactive takes three of the four slots (two reserved, one
	// shared); the other three wait in the buffer, below its low-water
	// mark, so the fetch loop keeps receiving.
	e.waitStarted(t, 3)
	w.armed.Store(true)
	e.publish(t, 2)
	inFlight := <-w.took
	stopped := make(chan error, 1)
	go func() { stopped <- e.s.Stop(context.Background()) }()
	// The running tasks end once the held receive has come back.
	<-w.gate
	close(e.release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n := w.lost.Load(); n > 0 {
		t.Fatalf("Stop cancelled a receive in flight: the %d messages it took stay leased for a minute", n)
	}
	e.available(t, 3+inFlight)
}

// TestStop_HandlerFinishing: Stop racing handlers that finish at that
// moment: every task either ran once and was acked, or comes back at once
// on its first attempt; none is lost or left leased. Many rounds, for the
// race detector and for the interleavings.
func TestStop_HandlerFinishing(t *testing.T) {
	t.Parallel()
	for round := range 30 {
		e := newStopEnv(t, func(d broker.Driver) broker.Driver { return d },
			scheduler.Config{Slots: 4, Prefetch: 16, Lease: time.Minute, PollWait: 20 * time.Millisecond})
		close(e.release) // handlers return at once
		ids := e.publish(t, 40)
		if err := e.s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.waitStarted(t, 1+round%8) // Stop at varying points of the run
		if err := e.s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		ran := e.runs()
		for id, n := range ran {
			if n > 1 {
				t.Fatalf("round %d: task %s ran %d times", round, id, n)
			}
		}
		left := e.available(t, len(ids)-len(ran))
		for id := range left {
			if ran[id] > 0 {
				t.Fatalf("round %d: task %s ran and was acked, yet came back", round, id)
			}
		}
	}
}

// TestStop_DuplicateBuffered: two copies of one message (one ID, two
// broker messages, as an at-least-once publish can leave) are received
// together; one runs while Stop comes with the other in the buffer. The
// running copy is acked; the buffered one goes back unspent. Nothing is
// lost.
func TestStop_DuplicateBuffered(t *testing.T) {
	t.Parallel()
	e := newStopEnv(t, func(d broker.Driver) broker.Driver { return d },
		scheduler.Config{Slots: 4, Prefetch: 16, Lease: time.Minute, PollWait: 20 * time.Millisecond})
	id := broker.NewID()
	var msgs []*broker.Message
	for range 2 {
		msgs = append(msgs, &broker.Message{ID: id, Kind: "k", Lane: "interactive"})
	}
	// Three more fill the interactive lane's three slots first.
	for range 3 {
		msgs = append([]*broker.Message{{Kind: "k", Lane: "interactive"}}, msgs...)
	}
	if _, err := e.b.Publish(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitStarted(t, 3)
	stopped := make(chan error, 1)
	go func() { stopped <- e.s.Stop(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // Stop has returned the buffer (not timed: either order passes)
	close(e.release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	ran := e.runs()[id]
	// The copies that did not run come back, each once, unspent.
	deadline := time.Now().Add(10 * time.Second)
	back := 0
	for back < 2-ran && time.Now().Before(deadline) {
		ds, err := e.b.Receive(context.Background(), broker.ReceiveRequest{Lane: "interactive", Max: 10, Lease: time.Minute, Wait: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.ID != id {
				t.Fatalf("task %s came back: it ran and was acked", d.ID)
			}
			if d.Attempt != 1 {
				t.Errorf("copy came back on attempt %d, want 1", d.Attempt)
			}
			back++
		}
	}
	if ran+back != 2 {
		t.Fatalf("%d copies ran and %d came back, want 2 in all", ran, back)
	}
}
