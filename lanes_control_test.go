package switchyard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestClient_PauseLane: a pause made through a Client (an operator's
// process) stops a running Server sharing the ledger from starting tasks
// of the lane, other lanes go on, and ResumeLane starts it again.
func TestClient_PauseLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond, ControlInterval: 20 * time.Millisecond})
	var mu sync.Mutex
	ran := map[string]int{}
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[refundArgs]) error {
		mu.Lock()
		ran[tk.Lane]++
		mu.Unlock()
		return nil
	}, nil)
	count := func(lane string) int { mu.Lock(); defer mu.Unlock(); return ran[lane] }
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)

	if err := c.PauseLane(ctx, "batch", "operator:alice"); err != nil {
		t.Fatal(err)
	}
	if err := c.PauseLane(ctx, "batch", "operator:bob"); err != nil {
		t.Fatalf("pausing a paused lane: %v", err)
	}
	ps, err := c.PausedLanes(ctx)
	if err != nil || len(ps) != 1 || ps[0].Lane != "batch" || ps[0].Actor != "operator:alice" || ps[0].Since.IsZero() {
		t.Fatalf("PausedLanes = %+v, %v; want batch paused by alice", ps, err)
	}
	waitFor(t, 10*time.Second, func() bool { p, _ := srv.Scheduler().LanePaused("batch"); return p })
	for _, lane := range []string{"batch", "batch", "interactive", "interactive"} {
		if _, err := c.Enqueue(ctx, refundArgs{Order: lane}, &switchyard.EnqueueOpts{Lane: lane}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, func() bool { return count("interactive") == 2 })
	if n := count("batch"); n != 0 {
		t.Fatalf("%d batch tasks ran while the lane was paused", n)
	}
	if err := c.ResumeLane(ctx, "batch", ""); err != nil {
		t.Fatal(err)
	}
	if ps, err := c.PausedLanes(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("PausedLanes after resume = %+v, %v", ps, err)
	}
	waitFor(t, 10*time.Second, func() bool { return count("batch") == 2 })
}

// plainLedger hides the store's optional interfaces: a ledger that cannot
// store lane pauses.
type plainLedger struct{ ledger.Ledger }

// TestClient_PauseLaneBadInput: a bad lane name, no ledger, and a ledger
// without lane controls are refused clearly.
func TestClient_PauseLaneBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	for _, lane := range []string{"", "-bad", "has space"} {
		if err := c.PauseLane(ctx, lane, "x"); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("PauseLane(%q) = %v, want broker.ErrInvalid", lane, err)
		}
		if err := c.ResumeLane(ctx, lane, "x"); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("ResumeLane(%q) = %v, want broker.ErrInvalid", lane, err)
		}
	}
	if ps, err := c.PausedLanes(ctx); err != nil || len(ps) != 0 {
		t.Errorf("refused calls paused %+v (%v)", ps, err)
	}
	none, _ := switchyard.NewClient(b, nil)
	if err := none.PauseLane(ctx, "batch", "x"); !errors.Is(err, switchyard.ErrNoLedger) {
		t.Errorf("PauseLane without a ledger = %v", err)
	}
	if err := none.ResumeLane(ctx, "batch", "x"); !errors.Is(err, switchyard.ErrNoLedger) {
		t.Errorf("ResumeLane without a ledger = %v", err)
	}
	if _, err := none.PausedLanes(ctx); !errors.Is(err, switchyard.ErrNoLedger) {
		t.Errorf("PausedLanes without a ledger = %v", err)
	}
	plain, _ := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: plainLedger{L}})
	if err := plain.PauseLane(ctx, "batch", "x"); !errors.Is(err, broker.ErrUnsupported) {
		t.Errorf("PauseLane with a ledger lacking LaneControls = %v, want broker.ErrUnsupported", err)
	}
	if _, err := plain.PausedLanes(ctx); !errors.Is(err, broker.ErrUnsupported) {
		t.Errorf("PausedLanes with a ledger lacking LaneControls = %v, want broker.ErrUnsupported", err)
	}
}
