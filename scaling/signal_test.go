package scaling

import (
	"math"
	"testing"
	"time"
)

func TestCompute(t *testing.T) {
	p := Policy{Lead: 20 * time.Second, SlotsPerWorker: 4}
	for _, c := range []struct {
		name    string
		in      Input
		desired int
		reason  string
	}{
		{"idle", Input{}, 0, "idle"},
		{"no durations yet: depth", Input{Ready: 7, Busy: 2}, 9, "depth"},
		// R = 10/s × 1 s = 10; + √10 = 13.2; backlog 0.
		{"interactive keep up", Input{ArrivalRate: 10, P90: time.Second, Objective: 2 * time.Second}, 14, "keep_up"},
		// A lane without an objective gets no headroom: R = 10.
		{"batch keep up", Input{ArrivalRate: 10, P90: time.Second}, 10, "keep_up"},
		// 600 ready × 20 s over the 10 min drain horizon = 20 slots.
		{"batch backlog", Input{Ready: 600, P90: 20 * time.Second}, 20, "catch_up"},
		// Late: H is at least Lead (20 s): 100 × 1 s / 20 s = 5, + R 1 + 1.
		{"late interactive", Input{Ready: 100, ArrivalRate: 1, P90: time.Second, Objective: 2 * time.Second, OldestReady: 5 * time.Second}, 7, "catch_up"},
		{"busy floor", Input{Busy: 40, ArrivalRate: 1, P90: time.Second}, 40, "busy"},
		{"reserved floor", Input{Reserved: 3}, 3, "reserved"},
		{"nonsense input", Input{Ready: -5, Busy: -1, ArrivalRate: math.NaN(), Trend: math.Inf(1), P90: time.Second}, 0, "idle"},
		{"capped", Input{Ready: math.MaxInt64, P90: time.Hour}, 100000, "catch_up"},
	} {
		s := Compute(c.in, p)
		if s.Desired != c.desired || s.Reason != c.reason {
			t.Errorf("%s: desired %d (%s), want %d (%s)", c.name, s.Desired, s.Reason, c.desired, c.reason)
		}
		if s.Workers != (s.Desired+3)/4 {
			t.Errorf("%s: workers %d for %d slots of 4", c.name, s.Workers, s.Desired)
		}
	}
}

func TestRateAndTrend(t *testing.T) {
	// A dump in one window is not a rate.
	if r, tr := RateAndTrend([3]float64{30, 0, 0}, [3]float64{0, 0, 0}, 30*time.Second); r != 0 || tr != 0 {
		t.Errorf("a one-window spike gave rate %v, trend %v; want 0, 0", r, tr)
	}
	r, tr := RateAndTrend([3]float64{6, 5, 4}, [3]float64{3, 2, 1}, 30*time.Second)
	if r != 5 || math.Abs(tr-0.1) > 1e-9 {
		t.Errorf("ramp: rate %v trend %v, want 5 and 0.1", r, tr)
	}
}
