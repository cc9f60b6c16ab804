package switchyard_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type refundArgs struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

func (refundArgs) Kind() string { return "billing.refund" }

// TestReview_ApproveAndReject: await → approve → resume with the decision,
// and await → reject → ended with the reason.
func TestReview_ApproveAndReject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond})
	var mu sync.Mutex
	refunded := map[string]string{}
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[refundArgs]) error {
		if tk.Review == nil {
			return switchyard.AwaitApproval("refund above the automatic limit", "refund "+tk.Args.Order)
		}
		mu.Lock()
		refunded[tk.Args.Order] = tk.Review.Reviewer + ": " + tk.Review.Note
		mu.Unlock()
		return nil
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	a, _ := c.Enqueue(ctx, refundArgs{Order: "A-1", Amount: 900}, &switchyard.EnqueueOpts{Lane: "interactive"})
	r, _ := c.Enqueue(ctx, refundArgs{Order: "B-2", Amount: 5000}, &switchyard.EnqueueOpts{Lane: "interactive"})

	var items []*switchyard.ReviewItem
	var err error
	waitFor(t, 10*time.Second, func() bool {
		items, err = c.Reviews(ctx, switchyard.ReviewFilter{})
		return err == nil && len(items) == 2
	})
	if items[0].Since.After(items[1].Since) {
		t.Errorf("reviews not oldest first: %s then %s", items[0].Since, items[1].Since)
	}
	it, err := c.Review(ctx, a.ID)
	if err != nil || it.Reason != "refund above the automatic limit" || it.Action != "refund A-1" || it.Age <= 0 {
		t.Fatalf("review of %s = %+v, %v", a.ID, it, err)
	}
	if err := c.Claim(ctx, a.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := c.Claim(ctx, a.ID, "bob"); err == nil {
		t.Fatal("bob claimed a review alice holds")
	}
	// Issue 20, item 7: the claim is enforced on the decision too.
	if err := c.Approve(ctx, a.ID, "bob", "looks fine"); !errors.Is(err, switchyard.ErrClaimedByOther) || !strings.Contains(err.Error(), "claimed by alice") {
		t.Fatalf("bob approved a review alice holds: %v, want ErrClaimedByOther", err)
	}
	if err := c.Reject(ctx, a.ID, "bob", "no"); !errors.Is(err, switchyard.ErrClaimedByOther) {
		t.Fatalf("bob rejected a review alice holds: %v, want ErrClaimedByOther", err)
	}
	if it, err := c.Review(ctx, a.ID); err != nil || it.ClaimedBy != "alice" {
		t.Fatalf("after bob's refused decisions: %+v %v", it, err)
	}
	if err := c.Approve(ctx, a.ID, "alice", "customer is right"); err != nil {
		t.Fatal(err)
	}
	if err := c.Reject(ctx, r.ID, "alice", "above policy"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := c.Task(ctx, a.ID)
		return err == nil && info.Task.State == ledger.Completed
	})
	mu.Lock()
	if refunded["A-1"] != "alice: customer is right" || refunded["B-2"] != "" {
		t.Errorf("refunds %v, want only A-1 with alice's note", refunded)
	}
	mu.Unlock()
	info, err := c.Task(ctx, r.ID)
	if err != nil || info.Task.State != ledger.Rejected || info.Task.LastError != "rejected by alice: above policy" {
		t.Fatalf("rejected task = %+v, %v", info.Task, err)
	}
	if err := c.Approve(ctx, r.ID, "alice", ""); !errors.Is(err, switchyard.ErrNotAwaitingReview) {
		t.Errorf("approving a rejected task: %v, want ErrNotAwaitingReview", err)
	}
	if items, _ := c.Reviews(ctx, switchyard.ReviewFilter{}); len(items) != 0 {
		t.Errorf("%d reviews left, want 0", len(items))
	}
}

// TestServer_Retention: finished tasks older than Config.Retention are
// pruned from the ledger.
func TestServer_Retention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond,
		Retention: time.Nanosecond, PruneEvery: 50 * time.Millisecond})
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[refundArgs]) error { return nil }, nil)
	r, _ := c.Enqueue(ctx, refundArgs{Order: "C-3"}, nil)
	_ = srv.Start(ctx)
	defer srv.Stop(ctx)
	waitFor(t, 10*time.Second, func() bool {
		_, err := L.Get(ctx, r.ID)
		return errors.Is(err, ledger.ErrNotFound)
	})
}

// TestClient_ReplayDeadWithLedger: a task dead-lettered after its attempts
// runs again when replayed (the ledger moves it back to queued), with a
// fresh attempt budget and its history kept.
func TestClient_ReplayDeadWithLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond,
		Retry: switchyardRetry()})
	var mu sync.Mutex
	fixed := false
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[refundArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		if !fixed {
			return errors.New("downstream is down")
		}
		return nil
	}, nil)
	r, _ := c.Enqueue(ctx, refundArgs{Order: "D-4"}, &switchyard.EnqueueOpts{Lane: "batch", MaxAttempts: 2})
	_ = srv.Start(ctx)
	defer srv.Stop(ctx)
	waitFor(t, 10*time.Second, func() bool {
		// The ledger records the death first, then the broker moves the
		// message: wait for both.
		info, err := c.Task(ctx, r.ID)
		s, serr := b.Stats(ctx, "batch")
		return err == nil && info.Task.State == ledger.Dead && serr == nil && s.DeadLettered == 1
	})
	mu.Lock()
	fixed = true
	mu.Unlock()
	if n, err := c.ReplayDead(ctx, "batch", 0, "operator:test"); err != nil || n != 1 {
		t.Fatalf("ReplayDead = %d, %v", n, err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := c.Task(ctx, r.ID)
		return err == nil && info.Task.State == ledger.Completed
	})
	info, _ := c.Task(ctx, r.ID)
	if len(info.Attempts) != 3 {
		t.Errorf("%d attempt records, want 3 (two failures, then the replayed success)", len(info.Attempts))
	}
}

// withLedger opens a SQLite ledger, an in-process broker deduplicating
// through it, and a client recording tasks in it; all close with the test.
func withLedger(t *testing.T) (ledger.Ledger, *broker.Broker, *switchyard.Client) {
	t.Helper()
	ctx := context.Background()
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	b, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	return L, b, c
}

type stagesArgs struct{}

func (stagesArgs) Kind() string { return "test.stages" }

// TestReview_ApprovedMoreTimesThanAttempts: waiting for a reviewer is not
// failing: a task approved more times than its attempt limit (a
// four-stage sign-off, two attempts) completes rather than being
// dead-lettered, and its ledger attempt numbers keep counting.
func TestReview_ApprovedMoreTimesThanAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 20 * time.Millisecond,
		Retry: scheduler.RetryPolicy{Base: 10 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 2}})
	const stages = 4
	var runs atomic.Int32
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[stagesArgs]) error {
		if n := runs.Add(1); n <= stages {
			return switchyard.AwaitApproval(fmt.Sprintf("sign-off %d of %d", n, stages), "ship")
		}
		return nil
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	res, err := c.Enqueue(ctx, stagesArgs{}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range stages {
		waitFor(t, 10*time.Second, func() bool {
			tk, err := L.Get(ctx, res.ID)
			return err == nil && tk.State == ledger.AwaitingReview
		})
		if err := c.Approve(ctx, res.ID, "alice", fmt.Sprintf("stage %d", i+1)); err != nil {
			t.Fatalf("approval %d: %v", i+1, err)
		}
	}
	var tk *ledger.Task
	waitFor(t, 10*time.Second, func() bool {
		tk, err = L.Get(ctx, res.ID)
		return err == nil && tk.State.Terminal()
	})
	if tk.State != ledger.Completed || runs.Load() != stages+1 {
		t.Fatalf("task %s after %d approvals (%d runs): %q", tk.State, stages, runs.Load(), tk.LastError)
	}
	atts, err := L.Attempts(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(atts); i++ {
		if atts[i].Number <= atts[i-1].Number {
			t.Errorf("attempt numbers do not increase: %d then %d", atts[i-1].Number, atts[i].Number)
		}
	}
	if len(atts) != stages+1 {
		t.Errorf("%d attempts recorded, want %d", len(atts), stages+1)
	}
}
