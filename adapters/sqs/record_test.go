package sqs_test

import (
	"strings"
	"testing"
)

// FuzzLaneOfQueue: any queue name maps to no lane or to a lane whose live
// queue has exactly that name; dead-letter queues never map.
func FuzzLaneOfQueue(f *testing.F) {
	d := openDriver(f, testURL("http://127.0.0.1:1", "fz", false, ""))
	for _, s := range []string{"fz_interactive", "fz_interactive-dlq", "fz_batch.fifo", "other_batch", "fz_", "", "fz_a.b_0123456789",
		"fz_lane-delay", "fz_" + strings.Repeat("x", 90)} {
		f.Add(s)
	}
	served := []string{"interactive", "batch", "a.b", "human-review"}
	f.Fuzz(func(t *testing.T, name string) {
		lane, ok := d.LaneOfQueue(name, served)
		if !ok {
			return
		}
		if live, dead := d.QueueNames(lane); live != name || dead == name {
			t.Fatalf("LaneOfQueue(%q) = %q, whose live queue is %q", name, lane, live)
		}
	})
}

func TestLaneOfQueue(t *testing.T) {
	d := openDriver(t, testURL("http://127.0.0.1:1", "ns", false, ""))
	served := []string{"interactive", "tenant.a"}
	hashed, _ := d.QueueNames("tenant.a")
	for _, c := range []struct {
		name, lane string
		ok         bool
	}{
		{"ns_interactive", "interactive", true},
		{"ns_interactive-dlq", "", false},
		{hashed, "tenant.a", true},
		{"ns_batch", "batch", true}, // spelled by the name, not served: the caller decides
		{"other_interactive", "", false},
		{"ns_interactive.fifo", "", false},
	} {
		lane, ok := d.LaneOfQueue(c.name, served)
		if lane != c.lane || ok != c.ok {
			t.Errorf("LaneOfQueue(%q) = %q, %v; want %q, %v", c.name, lane, ok, c.lane, c.ok)
		}
	}
}
