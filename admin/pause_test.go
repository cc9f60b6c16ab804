package admin

import (
	"errors"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestOps_LaneEvents: pauses and resumes made through Ops are in the lanes'
// history with their actors, newest first, by lane and limited; a
// tenant-scoped caller, a bad lane or limit and a missing ledger are
// refused.
func TestOps_LaneEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	steps := []struct {
		pause bool
		lane  string
		who   Actor
	}{
		{true, "batch", "operator:alice"},
		{true, "batch", "operator:bob"}, // already paused: nothing to record
		{false, "batch", "token:ops"},
		{true, "interactive", "operator:carol"},
	}
	for _, s := range steps {
		var err error
		if s.pause {
			err = e.ops.PauseLane(e.ctx, s.lane, s.who)
		} else {
			err = e.ops.ResumeLane(e.ctx, s.lane, s.who)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	es, err := e.ops.LaneEvents(e.ctx, Scope{}, "", 0)
	if err != nil || len(es) != 3 {
		t.Fatalf("LaneEvents = %+v, %v; want 3", es, err)
	}
	if es[0].Lane != "interactive" || es[0].Actor != "operator:carol" || !es[0].Paused ||
		es[1].Lane != "batch" || es[1].Actor != "token:ops" || es[1].Paused ||
		es[2].Lane != "batch" || es[2].Actor != "operator:alice" || !es[2].Paused {
		t.Errorf("LaneEvents = %+v", es)
	}
	if es, err := e.ops.LaneEvents(e.ctx, Scope{}, "batch", 1); err != nil || len(es) != 1 || es[0].Actor != "token:ops" {
		t.Errorf("LaneEvents(batch, 1) = %+v, %v", es, err)
	}
	if _, err := e.ops.LaneEvents(e.ctx, Scope{Tenant: "acme"}, "", 0); !errors.Is(err, ErrTenantScoped) {
		t.Errorf("LaneEvents for a tenant = %v, want ErrTenantScoped", err)
	}
	if _, err := e.ops.LaneEvents(e.ctx, Scope{}, "bad lane", 0); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("LaneEvents(bad lane) = %v, want broker.ErrInvalid", err)
	}
	if _, err := e.ops.LaneEvents(e.ctx, Scope{}, "", -1); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("LaneEvents with limit -1 = %v, want broker.ErrInvalid", err)
	}
	noLedger := newEnv(t, false)
	if _, err := noLedger.ops.LaneEvents(e.ctx, Scope{}, "", 0); !errors.Is(err, ErrNoLedger) {
		t.Errorf("LaneEvents without a ledger = %v, want ErrNoLedger", err)
	}
}
