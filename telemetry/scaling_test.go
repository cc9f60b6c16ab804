package telemetry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/scaling"
	"github.com/switchyard-dev/switchyard/telemetry"
)

// TestTelemetry_WatchScaling: the desired-slots gauge follows the lanes'
// depth (depth scaling until durations are known, then the signal), and
// up drops to 0 when the broker cannot be read.
func TestTelemetry_WatchScaling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, err := broker.Open(ctx, "mem://telemetry-scaling", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if _, err := b.PublishOne(ctx, &broker.Message{Kind: "k", Lane: lanes.Batch, Body: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	meter := &scaling.Meter{}
	tel, err := telemetry.New(&telemetry.Config{Namespace: "sc"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.WatchScaling(&scaling.Scaler{Broker: b, Meter: meter}); err != nil {
		t.Fatal(err)
	}
	if err := tel.WatchScaling(nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("WatchScaling(nil): %v", err)
	}
	got := gatherLane(t, tel, "switchyard_lane_desired_slots")
	// No duration known: one slot per ready task on batch; interactive
	// and scheduled keep their reserved slots.
	if got[lanes.Batch] != 6 || got[lanes.Interactive] != 2 || got[lanes.Scheduled] != 1 {
		t.Errorf("desired slots %v, want batch 6, interactive 2, scheduled 1", got)
	}
	// With a measured p90 of 20 s and no arrivals: the backlog over the
	// 10 minute drain horizon: ceil(6 × 20 / 600) = 1.
	for range 20 {
		meter.Observe(lanes.Batch, 20*time.Second)
	}
	if got := gatherLane(t, tel, "switchyard_lane_desired_slots"); got[lanes.Batch] != 1 {
		t.Errorf("desired slots with p90 20s: %v, want batch 1", got)
	}
	b.Close()
	if got := gatherLane(t, tel, "switchyard_scaling_up"); got[""] != 0 {
		t.Errorf("up after the broker closed: %v, want 0", got)
	}
}

// gatherLane returns a metric's values by lane (namespace "sc").
func gatherLane(t *testing.T, tel *telemetry.Telemetry, name string) map[string]float64 {
	t.Helper()
	fams, err := tel.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			lane, ns := "", ""
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "lane":
					lane = l.GetValue()
				case "switchyard_namespace":
					ns = l.GetValue()
				}
			}
			if ns == "sc" {
				out[lane] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
