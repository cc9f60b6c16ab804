package scheduler

import (
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestBehind: a receive shows a backlog when even its youngest message
// was ready fanOutLag, and four round trips, before it returned; a run-at
// time counts as the message's ready time.
func TestBehind(t *testing.T) {
	now := time.Now()
	msg := func(enq, runAt time.Duration) *broker.Delivery {
		d := &broker.Delivery{Message: broker.Message{EnqueuedAt: now.Add(-enq)}}
		if runAt != 0 {
			d.RunAt = now.Add(-runAt)
		}
		return d
	}
	for _, c := range []struct {
		name string
		ds   []*broker.Delivery
		rtt  time.Duration
		want bool
	}{
		{"all old", []*broker.Delivery{msg(time.Minute, 0), msg(time.Second, 0)}, time.Millisecond, true},
		{"one fresh", []*broker.Delivery{msg(time.Minute, 0), msg(time.Millisecond, 0)}, time.Millisecond, false},
		{"old but just due", []*broker.Delivery{msg(time.Minute, time.Millisecond)}, time.Millisecond, false},
		{"slow round trip", []*broker.Delivery{msg(30*time.Millisecond, 0)}, 10 * time.Millisecond, false},
		{"publisher clock ahead", []*broker.Delivery{msg(-time.Hour, 0)}, time.Millisecond, false},
		{"no enqueue time", []*broker.Delivery{{}}, time.Millisecond, false},
		{"none", nil, time.Millisecond, false},
	} {
		if got := behind(c.ds, c.rtt, now); got != c.want {
			t.Errorf("%s: behind = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestFanOutFor: several receivers only where a receive is capped below
// the buffer and the broker does not order messages itself.
func TestFanOutFor(t *testing.T) {
	for _, c := range []struct {
		prefetch int
		caps     broker.Capabilities
		want     int
	}{
		{128, broker.Capabilities{MaxBatch: 10}, maxReceivers},
		{30, broker.Capabilities{MaxBatch: 10}, min(3, maxReceivers)},
		{10, broker.Capabilities{MaxBatch: 10}, 1},
		{128, broker.Capabilities{}, 1},
		{128, broker.Capabilities{MaxBatch: 500}, 1},
		{128, broker.Capabilities{MaxBatch: 10, Ordering: true}, 1},
	} {
		if got := fanOutFor(c.prefetch, c.caps); got != c.want {
			t.Errorf("fanOutFor(%d, %+v) = %d, want %d", c.prefetch, c.caps, got, c.want)
		}
	}
}
