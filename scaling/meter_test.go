package scaling

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// The arrival rate follows from the queue's growth plus what the busy
// slots finish (Busy / p90), as the median of the last three windows.
func TestMeter_FlowConservation(t *testing.T) {
	m := &Meter{Bin: 10 * time.Second}
	for range 10 {
		m.Observe("l", 2*time.Second)
	}
	t0 := time.Unix(0, 0)
	// Every window: the queue grows by 30 while 8 slots stay busy (4
	// tasks/s finish): 3 + 4 = 7 tasks/s arrive.
	for i := range 7 {
		m.Sample(broker.Stats{Lane: "l", Ready: int64(30 * i), InFlight: 8}, t0.Add(time.Duration(i)*10*time.Second))
	}
	in := m.Input("l")
	if math.Abs(in.ArrivalRate-7) > 1e-9 || math.Abs(in.Trend) > 1e-9 {
		t.Fatalf("rate %v trend %v, want 7 and 0", in.ArrivalRate, in.Trend)
	}
	if in.P90 != 2*time.Second || in.Ready != 180 || in.Busy != 8 {
		t.Fatalf("input %+v", in)
	}
	// A one-off dump of 300 in one window does not raise the rate.
	m.Sample(broker.Stats{Lane: "l", Ready: 180 + 300 + 30, InFlight: 8}, t0.Add(70*time.Second))
	if in := m.Input("l"); math.Abs(in.ArrivalRate-7) > 1e-9 {
		t.Fatalf("rate after a dump %v, want 7 still", in.ArrivalRate)
	}
}

func TestMeter_Expected(t *testing.T) {
	m := &Meter{Expected: map[string]time.Duration{"batch": 30 * time.Second}}
	if p := m.Input("batch").P90; p != 30*time.Second {
		t.Fatalf("p90 %s, want the expected 30s before any observation", p)
	}
	m.Observe("batch", time.Second)
	if p := m.Input("batch").P90; p != time.Second {
		t.Fatalf("p90 %s, want the observed 1s", p)
	}
}
