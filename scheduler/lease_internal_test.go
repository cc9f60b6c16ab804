package scheduler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/switchyard-dev/switchyard/adapters/embedded" // mem://
	"github.com/switchyard-dev/switchyard/broker"
)

// TestDispatch_SkipsTaskWhoseLeaseEnded: a received task whose lease ran
// out while it waited in the lane's buffer (its extensions kept failing)
// is never started: the broker may already have handed it to another
// worker, or to this one again, and two runs would overlap. Its
// redelivery runs instead. (Seen in the fleet ordering case without a
// ledger: one task started twice in one process, 5 ms apart.)
func TestDispatch_SkipsTaskWhoseLeaseEnded(t *testing.T) {
	ctx := context.Background()
	b, err := broker.Open(ctx, "mem://dispatch-lease-"+time.Now().Format("150405.000000000"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var lost atomic.Int32
	s, err := New(b, &Config{Lease: time.Minute, Observer: func(e Event) {
		if e.Type == EventLeaseLost && e.TaskID == "stale" {
			lost.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	if err := s.Handle("k", func(ctx context.Context, j *Job) ([]byte, error) {
		ran.Add(1)
		return nil, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })

	d := &broker.Delivery{Message: broker.Message{ID: "stale", Kind: "k", Lane: "interactive"}, Attempt: 1,
		LeaseDeadline: time.Now().Add(-time.Second)}
	s.mu.Lock()
	l := s.lanes["interactive"]
	if l == nil {
		s.mu.Unlock()
		t.Fatal("no interactive lane")
	}
	l.buf = append(l.buf, newTask(d, 1))
	s.mu.Unlock()
	s.poke()

	deadline := time.Now().Add(10 * time.Second)
	for lost.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stale task was neither started nor reported lost")
		}
		if ran.Load() > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("a task whose lease had ended was started (%d runs)", n)
	}
}

// TestTask_Lease: the lease end a task records, and the ends it refuses
// to misread (none given; beyond int64 nanoseconds).
func TestTask_Lease(t *testing.T) {
	now := time.Now()
	tk := newTask(&broker.Delivery{}, 1)
	if tk.leaseEnded(now) {
		t.Fatal("a task with no deadline reads as ended")
	}
	tk.setLease(now.Add(-time.Millisecond))
	if !tk.leaseEnded(now) {
		t.Fatal("a past deadline reads as live")
	}
	tk.setLease(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))
	if tk.leaseEnded(now) {
		t.Fatal("a deadline past int64 nanoseconds wrapped to the past")
	}
}
