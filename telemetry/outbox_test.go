package telemetry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/telemetry"
)

// TestTelemetry_WatchOutbox: the outbox gauges follow the ledger's
// outbox (depth, the oldest row's age), up drops to 0 when the ledger
// cannot be read, and a ledger without an outbox is refused.
func TestTelemetry_WatchOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, err := sqlite.Open(ctx, sqlite.Memory, nil)
	if err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.New(&telemetry.Config{Namespace: "ob"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.WatchOutbox(L); err != nil {
		t.Fatal(err)
	}
	if err := tel.WatchOutbox(nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("WatchOutbox(nil): %v", err)
	}
	o := ledger.OutboxOf(L)
	if _, err := o.CreateOutbox(ctx, []ledger.OutboxTask{{Task: &ledger.Task{Kind: "k", Lane: "batch"}}, {Task: &ledger.Task{Kind: "k", Lane: "batch"}}}, "", 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	got := gatherOutbox(t, tel)
	if got["switchyard_outbox_depth"] != 2 || got["switchyard_outbox_up"] != 1 {
		t.Errorf("gauges %v, want depth 2 and up 1", got)
	}
	if age := got["switchyard_outbox_oldest_age_seconds"]; age < 0.015 || age > 60 {
		t.Errorf("oldest age %v s, want the row's age", age)
	}
	L.Close()
	got = gatherOutbox(t, tel)
	if _, ok := got["switchyard_outbox_depth"]; ok || got["switchyard_outbox_up"] != 0 {
		t.Errorf("gauges of a closed ledger %v, want up 0 and no depth", got)
	}
}

// gatherOutbox returns the outbox gauges' values (of namespace "ob").
func gatherOutbox(t *testing.T, tel *telemetry.Telemetry) map[string]float64 {
	t.Helper()
	fams, err := tel.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "switchyard_outbox_") {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == "ob" {
				out[f.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
