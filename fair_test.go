package switchyard_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type tenantArgs struct {
	N int `json:"n"`
}

func (tenantArgs) Kind() string { return "test.tenant" }

// TestServer_FairLane runs a fair batch lane end to end: a quiet tenant's
// tasks enqueued after another tenant's backlog start before that backlog
// is done, every task completes once, and the runtime, the handler and the
// ledger all see the lane by its own name, never a shard's.
func TestServer_FairLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	b, err := broker.Open(ctx, "embedded://"+filepath.Join(t.TempDir(), "q.db")+"?fair=batch:8", &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	flood, quiet := "flood", ""
	for i := 0; quiet == ""; i++ {
		if q := fmt.Sprintf("quiet-%d", i); broker.FairShard(q, 8) != broker.FairShard(flood, 8) {
			quiet = q
		}
	}
	const floodN, quietN = 300, 10
	for i := range floodN {
		if _, err := c.Enqueue(ctx, tenantArgs{N: i}, &switchyard.EnqueueOpts{Tenant: flood, Lane: lanes.Batch}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range quietN {
		if _, err := c.Enqueue(ctx, tenantArgs{N: i}, &switchyard.EnqueueOpts{Tenant: quiet, Lane: lanes.Batch, IdempotencyKey: fmt.Sprint("q", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// The same key again is the same task, in a fair lane too.
	if r, err := c.Enqueue(ctx, tenantArgs{N: 0}, &switchyard.EnqueueOpts{Tenant: quiet, Lane: lanes.Batch, IdempotencyKey: "q0"}); err != nil || !r.Duplicate {
		t.Fatalf("second enqueue of key q0: %+v, %v; want a duplicate", r, err)
	}

	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Slots: 4, Lease: 10 * time.Second, PollWait: 100 * time.Millisecond, Ledger: L,
		Retry: scheduler.RetryPolicy{Base: 20 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu          sync.Mutex
		floodBefore = -1 // flood tasks started before the quiet tenant's last
		floodDone   int
		quietDone   int
		badLane     string
	)
	err = switchyard.Register(srv, func(ctx context.Context, task *switchyard.Task[tenantArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		if task.Lane != lanes.Batch {
			badLane = task.Lane
		}
		if task.Tenant == quiet {
			quietDone++
			if quietDone == quietN {
				floodBefore = floodDone
			}
		} else {
			floodDone++
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
	waitFor(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return floodDone == floodN && quietDone == quietN
	})
	mu.Lock()
	defer mu.Unlock()
	if badLane != "" {
		t.Errorf("handler saw lane %q, want %q", badLane, lanes.Batch)
	}
	t.Logf("flood tasks run before the quiet tenant's last: %d of %d", floodBefore, floodN)
	if floodBefore > floodN/2 {
		t.Errorf("the quiet tenant's tasks waited behind %d of the flood's %d", floodBefore, floodN)
	}
	// The runtime records completions just after the handlers return.
	var ts []*ledger.Task
	waitFor(t, 30*time.Second, func() bool {
		ts, err = L.List(ctx, ledger.Filter{States: []ledger.State{ledger.Completed}, Limit: 1000})
		return err == nil && len(ts) == floodN+quietN
	})
	for _, tk := range ts {
		if tk.Lane != lanes.Batch {
			t.Fatalf("ledger records task %s in lane %q", tk.ID, tk.Lane)
		}
	}
}
