package switchyard_test

import (
	"context"
	"errors"
	"slices"
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

// TestClient_LaneEvents: pauses and resumes through the Client are in the
// lane history with their actors (the default actor "operator" included),
// newest first, filtered by lane and limited; calls that change nothing
// add nothing; bad input, no ledger and a ledger without lane controls are
// refused clearly.
func TestClient_LaneEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b, c := withLedger(t)
	for _, s := range []struct {
		pause       bool
		lane, actor string
	}{
		{true, "batch", "operator:alice"},
		{true, "batch", "operator:bob"},  // already paused: no event
		{false, "batch", ""},             // recorded as "operator"
		{false, "batch", "operator:bob"}, // already running: no event
		{true, "interactive", "token:ci"},
		{true, "batch", "operator:carol"},
	} {
		var err error
		if s.pause {
			err = c.PauseLane(ctx, s.lane, s.actor)
		} else {
			err = c.ResumeLane(ctx, s.lane, s.actor)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	type ev struct {
		lane, actor string
		paused      bool
	}
	got := func(lane string, limit int) []ev {
		t.Helper()
		es, err := c.LaneEvents(ctx, lane, limit)
		if err != nil {
			t.Fatalf("LaneEvents(%q, %d): %v", lane, limit, err)
		}
		out := []ev{}
		for _, e := range es {
			if e.At.IsZero() {
				t.Errorf("event %+v has no time", e)
			}
			out = append(out, ev{e.Lane, e.Actor, e.Paused})
		}
		return out
	}
	all := []ev{{"batch", "operator:carol", true}, {"interactive", "token:ci", true}, {"batch", "operator", false}, {"batch", "operator:alice", true}}
	if g := got("", 0); !slices.Equal(g, all) {
		t.Errorf("LaneEvents(all) = %+v, want %+v", g, all)
	}
	if g := got("batch", 0); !slices.Equal(g, []ev{all[0], all[2], all[3]}) {
		t.Errorf("LaneEvents(batch) = %+v", g)
	}
	if g := got("", 2); !slices.Equal(g, all[:2]) {
		t.Errorf("LaneEvents(all, 2) = %+v", g)
	}
	if g := got("scheduled", 0); len(g) != 0 {
		t.Errorf("LaneEvents(scheduled) = %+v, want none", g)
	}

	for _, lane := range []string{"-bad", "has space"} {
		if _, err := c.LaneEvents(ctx, lane, 0); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("LaneEvents(%q) = %v, want broker.ErrInvalid", lane, err)
		}
	}
	if _, err := c.LaneEvents(ctx, "batch", -1); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("LaneEvents with limit -1 = %v, want broker.ErrInvalid", err)
	}
	none, _ := switchyard.NewClient(b, nil)
	if _, err := none.LaneEvents(ctx, "", 0); !errors.Is(err, switchyard.ErrNoLedger) {
		t.Errorf("LaneEvents without a ledger = %v", err)
	}
	plain, _ := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: plainLedger{L}})
	if _, err := plain.LaneEvents(ctx, "", 0); !errors.Is(err, broker.ErrUnsupported) {
		t.Errorf("LaneEvents with a ledger lacking LaneControls = %v, want broker.ErrUnsupported", err)
	}
}
