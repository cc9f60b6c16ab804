package conformance

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// stopLease is TestE2EStopReturnsBuffered's lease: long, so that a task
// left leased by the stopped server would come back far too late.
const stopLease = 60 * time.Second

// TestE2EStopReturnsBuffered: a server stopping with tasks received ahead
// of its slots (Prefetch above Slots) gives them back at once, and so it
// does with tasks that a receive in flight when Stop began brings (here:
// tasks enqueued on an idle lane, whose fetch loop long-polls, while the
// server stops): a second server started right after runs them well
// before their lease ends, each on its first attempt, and every task runs
// once.
func TestE2EStopReturnsBuffered(t *testing.T, h *Harness) {
	dsn := ledgerDSN(t, h)
	release := make(chan struct{})
	started := make(chan string, 64)
	var mu sync.Mutex
	attempts := map[string][]int{}
	handler := func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		mu.Lock()
		attempts[tk.ID] = append(attempts[tk.ID], tk.Attempt)
		mu.Unlock()
		started <- tk.ID
		<-release // the first server's tasks hold their slots until Stop began
		return nil
	}
	first := newEnv(t, h, dsn, &scheduler.Config{Slots: 4, Prefetch: 12, Lease: stopLease, PollWait: time.Second})
	_ = switchyard.Register(first.srv, handler, nil)
	const n = 16
	ids := make([]string, n)
	for i := range ids {
		ids[i] = first.enqueue(e2eArgs{Scenario: "stop-buffered", N: i}, nil)
	}
	if err := first.srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the first server started fewer than 2 tasks in 30 s")
		}
	}
	// Give the fetch loop the moment it takes to fill the buffer: the
	// case holds however many it received.
	time.Sleep(500 * time.Millisecond)
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stopped <- first.srv.Stop(ctx)
	}()
	// Enqueued while the idle lane's receive is in flight (it waits
	// PollWait) and Stop waits for the running tasks.
	time.Sleep(100 * time.Millisecond)
	for i := range 4 {
		ids = append(ids, first.enqueue(e2eArgs{Scenario: "stop-in-flight", N: i}, &switchyard.EnqueueOpts{Lane: "batch"}))
	}
	time.Sleep(200 * time.Millisecond)
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	stopAt := time.Now()
	second := newEnv(t, h, dsn, &scheduler.Config{Slots: 4, Lease: stopLease})
	_ = switchyard.Register(second.srv, handler, nil)
	second.start()
	for _, id := range ids {
		// Well before the lease: a task the first server left leased
		// would come back only after it.
		second.waitState(id, stopLease/3, ledger.Completed)
	}
	if el := time.Since(stopAt); el > stopLease/3 {
		t.Fatalf("the second server took %s to complete the tasks; the first one's were not given back", el)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if a := attempts[id]; len(a) != 1 || a[0] != 1 {
			t.Errorf("task %s ran with attempts %v, want [1]: a returned task spends no attempt and runs once", id, a)
		}
	}
}
