package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// TestCopiesWhileRunning_TwoSchedulers: two schedulers in one process
// share a broker and a ledger; every task's message is published twice
// (a copy, as a broker's redelivery or a publisher's retry makes one),
// and each task's first handler holds on until a copy has been turned
// away as running elsewhere, so the copies arrive while the originals
// run, on the same worker goroutines that take the next task as soon as
// theirs ends (finishedNext). No handler of a task runs beside another,
// each task runs once and completes, and a handler's context is ended
// once its task has finished (it lives in the task: a leaked one must
// not serve a later task).
func TestCopiesWhileRunning_TwoSchedulers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b := scheduler.OpenTestEnv(t, conformance.Namespace(t))
	const n = 40
	var (
		mu      sync.Mutex
		running = map[string]int{}
		runs    = map[string]int{}
		turned  = map[string]chan struct{}{}
		leaked  []context.Context
	)
	var dupes atomic.Int64
	for i := range n {
		turned[fmt.Sprintf("copy-%d", i)] = make(chan struct{})
	}
	observer := func(e scheduler.Event) {
		if e.Type != scheduler.EventDuplicate {
			return
		}
		dupes.Add(1)
		mu.Lock()
		if ch, ok := turned[e.TaskID]; ok {
			delete(turned, e.TaskID)
			close(ch)
		}
		mu.Unlock()
	}
	handler := func(ctx context.Context, j *scheduler.Job) ([]byte, error) {
		mu.Lock()
		running[j.ID]++
		runs[j.ID]++
		if running[j.ID] > 1 {
			t.Errorf("%s: two handlers at once", j.ID)
		}
		ch := turned[j.ID]
		leaked = append(leaked, ctx)
		mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-time.After(5 * time.Second): // a copy that never came: the test fails below
			}
		}
		if _, err := scheduler.Step(ctx, "s", func(context.Context) ([]byte, error) { return []byte(j.ID), nil }); err != nil {
			return nil, err
		}
		mu.Lock()
		running[j.ID]--
		mu.Unlock()
		return nil, nil
	}
	var ss []*scheduler.Scheduler
	for w := range 2 {
		s, err := scheduler.New(b, &scheduler.Config{Ledger: L, Slots: 6, Prefetch: 8, Lease: 10 * time.Second,
			Heartbeat: 500 * time.Millisecond, PollWait: 20 * time.Millisecond, WorkerID: fmt.Sprintf("w%d", w), Observer: observer})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Handle("k", handler, nil); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	for i := range n {
		id := fmt.Sprintf("copy-%d", i)
		if _, _, err := L.Create(ctx, &ledger.Task{ID: id, Kind: "k", Lane: "interactive", Args: []byte(`{}`), MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := b.PublishOne(ctx, &broker.Message{ID: id, Lane: "interactive", Kind: "k", Body: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range ss {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
	}
	for i := range n {
		id := fmt.Sprintf("copy-%d", i)
		waitFor(t, time.Minute, id+" completed", func() bool {
			tk, err := L.Get(ctx, id)
			return err == nil && tk.State == ledger.Completed
		})
	}
	for _, s := range ss {
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		id := fmt.Sprintf("copy-%d", i)
		if runs[id] != 1 {
			t.Errorf("%s ran %d times, want 1", id, runs[id])
		}
		if _, ok := turned[id]; ok {
			t.Errorf("%s: no copy was turned away while it ran", id)
		}
	}
	for _, c := range leaked {
		if c.Err() == nil {
			t.Error("a handler's context is still live after its task finished")
		}
		if _, err := scheduler.Step(c, "late", func(context.Context) ([]byte, error) { return nil, nil }); err == nil {
			t.Error("a Step on a finished task's context succeeded")
		}
	}
	t.Logf("%d duplicates turned away", dupes.Load())
}
