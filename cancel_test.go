package switchyard_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type cancelArgs struct {
	N int `json:"n"`
}

func (cancelArgs) Kind() string { return "test.cancel" }

// cancelServer starts a server with a ledger whose cancelArgs handler
// blocks until its context ends (counting starts and context
// cancellations caused by a cancel), unless N is 0 (returns at once).
type cancelRig struct {
	L        ledger.Ledger
	b        *broker.Broker
	c        *switchyard.Client
	srv      *switchyard.Server
	started  atomic.Int32
	byCancel atomic.Int32
	running  chan string
}

func newCancelRig(t *testing.T, start bool) *cancelRig {
	t.Helper()
	r := &cancelRig{running: make(chan string, 16)}
	r.L, r.b, r.c = withLedger(t)
	var err error
	r.srv, err = switchyard.NewServer(r.b, &switchyard.ServerConfig{Ledger: r.L, PollWait: 50 * time.Millisecond, Lease: 5 * time.Second,
		Retry: scheduler.RetryPolicy{Base: 10 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	err = switchyard.Register(r.srv, func(ctx context.Context, tk *switchyard.Task[cancelArgs]) error {
		r.started.Add(1)
		if tk.Args.N == 0 {
			return nil
		}
		r.running <- tk.ID
		<-ctx.Done()
		if switchyard.CancelCause(ctx) {
			r.byCancel.Add(1)
		}
		return ctx.Err()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if start {
		r.start(t)
	}
	return r
}

func (r *cancelRig) start(t *testing.T) {
	t.Helper()
	if err := r.srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.srv.Stop(ctx)
	})
}

// cancelledOnce checks that task id is cancelled with exactly one
// "cancelled" event.
func cancelledOnce(t *testing.T, L ledger.Ledger, id string) {
	t.Helper()
	ctx := context.Background()
	task, err := L.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if task.State != ledger.Cancelled {
		t.Fatalf("task %s is %s, want cancelled", id, task.State)
	}
	evs, err := L.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.To == ledger.Cancelled {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("task %s has %d moves to cancelled, want 1: %+v", id, n, evs)
	}
}

// TestClient_CancelQueued: a queued and a delayed task, cancelled before
// any worker runs, never start; their deliveries are acknowledged (not
// dead-lettered) and the queue drains.
func TestClient_CancelQueued(t *testing.T) {
	t.Parallel()
	r := newCancelRig(t, false)
	ctx := context.Background()
	q, err := r.c.Enqueue(ctx, cancelArgs{N: 0}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.c.Enqueue(ctx, cancelArgs{N: 0}, &switchyard.EnqueueOpts{Delay: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{q.ID, d.ID} {
		got, err := r.c.Cancel(ctx, id, "no longer wanted")
		if err != nil || got.State != ledger.Cancelled {
			t.Fatalf("Cancel(%s) = %+v, %v", id, got, err)
		}
	}
	r.start(t)
	waitFor(t, 10*time.Second, func() bool {
		s1, _ := r.b.Stats(ctx, "interactive")
		s2, _ := r.b.Stats(ctx, "scheduled")
		return s1.Ready+s1.InFlight+s1.Delayed == 0 && s2.Ready+s2.InFlight+s2.Delayed == 0
	})
	if n := r.started.Load(); n != 0 {
		t.Fatalf("%d cancelled tasks started", n)
	}
	for _, id := range []string{q.ID, d.ID} {
		cancelledOnce(t, r.L, id)
		if as, _ := r.L.Attempts(ctx, id); len(as) != 0 {
			t.Fatalf("a cancelled queued task has attempts: %+v", as)
		}
	}
	for _, lane := range []string{"interactive", "scheduled"} {
		if s, _ := r.b.Stats(ctx, lane); s.DeadLettered != 0 {
			t.Fatalf("lane %s has %d dead letters", lane, s.DeadLettered)
		}
	}
}

// TestClient_CancelRunning: a running handler's context is cancelled
// (cause: the cancel) soon after Cancel; the task ends cancelled once,
// with one attempt whose outcome is cancel, and is not retried.
func TestClient_CancelRunning(t *testing.T) {
	t.Parallel()
	r := newCancelRig(t, true)
	ctx := context.Background()
	res, err := r.c.Enqueue(ctx, cancelArgs{N: 1}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.running:
	case <-time.After(10 * time.Second):
		t.Fatal("the task never started")
	}
	if _, err := r.c.Cancel(ctx, res.ID, "user closed the tab"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool { return r.byCancel.Load() == 1 })
	waitFor(t, 5*time.Second, func() bool {
		as, _ := r.L.Attempts(ctx, res.ID)
		return len(as) == 1 && as[0].Outcome == "cancel"
	})
	time.Sleep(200 * time.Millisecond) // a retry would have started by now (base 10ms)
	if n := r.started.Load(); n != 1 {
		t.Fatalf("started %d times, want 1 (no retry)", n)
	}
	cancelledOnce(t, r.L, res.ID)
	evs, _ := r.L.Events(ctx, res.ID)
	last := evs[len(evs)-1]
	if last.To != ledger.Cancelled || last.Detail != "user closed the tab" || last.Actor != "client" {
		t.Fatalf("last event %+v", last)
	}
	w, err := r.c.Wait(ctx, res.ID)
	if err != nil || !w.Done || w.State != ledger.Cancelled || !strings.Contains(w.Error, "user closed the tab") {
		t.Fatalf("Wait = %+v, %v", w, err)
	}
	if s, _ := r.b.Stats(ctx, "interactive"); s.DeadLettered != 0 || s.Ready+s.InFlight != 0 {
		t.Fatalf("lane after the cancel: %+v", s)
	}
}

// TestClient_CancelErrors: bad input is a typed error and changes
// nothing.
func TestClient_CancelErrors(t *testing.T) {
	t.Parallel()
	r := newCancelRig(t, true)
	ctx := context.Background()
	if _, err := r.c.Cancel(ctx, "no-such-task", "x"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Cancel of an unknown task: %v, want ErrNotFound", err)
	}
	if _, err := r.c.Cancel(ctx, "", "x"); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("Cancel of an empty id: %v, want ErrInvalid", err)
	}
	res, _ := r.c.Enqueue(ctx, cancelArgs{N: 0}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if _, err := r.c.Cancel(ctx, res.ID, strings.Repeat("x", switchyard.MaxCancelReason+1)); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("Cancel with an oversized reason: %v, want ErrInvalid", err)
	}
	w, err := r.c.Wait(ctx, res.ID)
	if err != nil || w.State != ledger.Completed {
		t.Fatalf("Wait = %+v, %v", w, err)
	}
	_, err = r.c.Cancel(ctx, res.ID, "too late")
	var fe *switchyard.FinishedError
	if !errors.As(err, &fe) || fe.State != ledger.Completed || !errors.Is(err, switchyard.ErrFinished) || !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("Cancel of a completed task: %v, want a FinishedError naming completed", err)
	}
	if !strings.Contains(err.Error(), "completed") {
		t.Fatalf("error %q does not name the state", err)
	}
	if got, _ := r.L.Get(ctx, res.ID); got.State != ledger.Completed {
		t.Fatalf("a refused cancel changed the task: %s", got.State)
	}
	// Without a ledger.
	_, c, _ := setup(t)
	if _, err := c.Cancel(ctx, res.ID, "x"); !errors.Is(err, switchyard.ErrNoLedger) {
		t.Fatalf("Cancel without a ledger: %v", err)
	}
	if _, err := c.Enqueue(ctx, cancelArgs{}, &switchyard.EnqueueOpts{ConcurrencyKey: "k"}); !errors.Is(err, switchyard.ErrNoLedger) {
		t.Fatalf("ConcurrencyKey without a ledger: %v", err)
	}
	if _, err := r.c.Enqueue(ctx, cancelArgs{}, &switchyard.EnqueueOpts{OnConcurrent: switchyard.CancelNewest}); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("OnConcurrent without a key: %v", err)
	}
	if _, err := r.c.Enqueue(ctx, cancelArgs{}, &switchyard.EnqueueOpts{ConcurrencyKey: "k", OnConcurrent: 7}); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("unknown policy: %v", err)
	}
	rs, err := r.c.EnqueueMany(ctx, []switchyard.EnqueueItem{{Args: cancelArgs{}, Opts: &switchyard.EnqueueOpts{ConcurrencyKey: "k"}}})
	if err != nil || !errors.Is(rs[0].Err, broker.ErrInvalid) {
		t.Fatalf("EnqueueMany with a ConcurrencyKey: %+v, %v", rs, err)
	}
}

// TestClient_ConcurrencyKey: CancelInProgress cancels the running older
// task when a newer one with the same key comes; CancelNewest cancels the
// newer one instead, without publishing it.
func TestClient_ConcurrencyKey(t *testing.T) {
	t.Parallel()
	r := newCancelRig(t, true)
	ctx := context.Background()
	o := &switchyard.EnqueueOpts{Lane: "interactive", Tenant: "t1", ConcurrencyKey: "chat-7"}
	first, err := r.c.Enqueue(ctx, cancelArgs{N: 1}, o)
	if err != nil {
		t.Fatal(err)
	}
	<-r.running
	// Another tenant's task with the same key is not touched.
	other, err := r.c.Enqueue(ctx, cancelArgs{N: 1}, &switchyard.EnqueueOpts{Lane: "interactive", Tenant: "t2", ConcurrencyKey: "chat-7"})
	if err != nil {
		t.Fatal(err)
	}
	<-r.running
	second, err := r.c.Enqueue(ctx, cancelArgs{N: 1}, o)
	if err != nil || second.Cancelled {
		t.Fatalf("second Enqueue = %+v, %v", second, err)
	}
	w, err := r.c.Wait(ctx, first.ID)
	if err != nil || w.State != ledger.Cancelled {
		t.Fatalf("the older task: %+v, %v", w, err)
	}
	<-r.running // the second one runs
	if got, _ := r.L.Get(ctx, other.ID); got.State != ledger.Running {
		t.Fatalf("another tenant's task is %s", got.State)
	}
	// CancelNewest: the second stays, the third is cancelled unpublished.
	third, err := r.c.Enqueue(ctx, cancelArgs{N: 1}, &switchyard.EnqueueOpts{Lane: "interactive", Tenant: "t1", ConcurrencyKey: "chat-7", OnConcurrent: switchyard.CancelNewest})
	if err != nil || !third.Cancelled {
		t.Fatalf("third Enqueue = %+v, %v", third, err)
	}
	cancelledOnce(t, r.L, third.ID)
	if got, _ := r.L.Get(ctx, second.ID); got.State != ledger.Running {
		t.Fatalf("the task in progress is %s", got.State)
	}
	for _, id := range []string{second.ID, other.ID} {
		if _, err := r.c.Cancel(ctx, id, "test over"); err != nil {
			t.Fatal(err)
		}
	}
}

type selfCancelArgs struct {
	Then string `json:"then"` // "fail", "permanent" or "ok"
}

func (selfCancelArgs) Kind() string { return "test.selfcancel" }

// TestServer_CancelledWhileSettling: a task cancelled from outside just as
// its handler returns — failing, failing for good, or succeeding — before
// the note reaches the worker ends cancelled: not retried, not
// dead-lettered, and its delivery acknowledged at once (not left for a
// redelivery after its lease).
func TestServer_CancelledWhileSettling(t *testing.T) {
	t.Parallel()
	L, b, c := withLedger(t)
	ctx := context.Background()
	var (
		mu     sync.Mutex
		events = map[string][]scheduler.EventType{}
		runs   atomic.Int32
	)
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond, Lease: 30 * time.Second,
		Retry: scheduler.RetryPolicy{Base: 10 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 3},
		Observer: func(e scheduler.Event) {
			mu.Lock()
			events[e.TaskID] = append(events[e.TaskID], e.Type)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	err = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[selfCancelArgs]) error {
		runs.Add(1)
		if _, err := c.Cancel(ctx, tk.ID, "cancelled as it returned"); err != nil {
			return err
		}
		switch tk.Args.Then {
		case "fail":
			return errors.New("model timeout")
		case "permanent":
			return switchyard.Permanent(errors.New("bad input"))
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	ids := map[string]string{}
	for _, then := range []string{"fail", "permanent", "ok"} {
		r, err := c.Enqueue(ctx, selfCancelArgs{Then: then}, &switchyard.EnqueueOpts{Lane: "interactive"})
		if err != nil {
			t.Fatal(err)
		}
		ids[then] = r.ID
	}
	// Acknowledged at once: the lease is 30s, so a delivery left for
	// redelivery would still be in flight.
	waitFor(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if !slices.Contains(events[id], scheduler.EventCancelled) {
				return false
			}
		}
		s, _ := b.Stats(ctx, "interactive")
		return s.Ready+s.InFlight+s.Delayed == 0
	})
	if n := runs.Load(); n != 3 {
		t.Fatalf("%d runs, want 3 (no retry)", n)
	}
	for then, id := range ids {
		cancelledOnce(t, L, id)
		mu.Lock()
		evs := events[id]
		mu.Unlock()
		if slices.Contains(evs, scheduler.EventDead) || slices.Contains(evs, scheduler.EventRetried) {
			t.Errorf("%s: events %v include a retry or a dead letter", then, evs)
		}
	}
	if s, _ := b.Stats(ctx, "interactive"); s.DeadLettered != 0 {
		t.Fatalf("dead letters: %+v", s)
	}
}
