package scheduler_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// TestScheduler_RegistersServer: a running scheduler over a ledger with a
// fleet registry has a record there (host, pid, lanes, slots, version,
// started) whose busy count and heartbeat follow its work; Stop removes
// it.
func TestScheduler_RegistersServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	L, b := scheduler.OpenTestEnv(t, conformance.Namespace(t))
	s, err := scheduler.New(b, &scheduler.Config{Ledger: L, Slots: 8, Lease: time.Second,
		Heartbeat: 30 * time.Millisecond, PollWait: 50 * time.Millisecond, WorkerID: "w-test-1"})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	if err := s.Handle("test.work", func(ctx context.Context, job *scheduler.Job) ([]byte, error) {
		<-release
		return nil, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			close(release)
			s.Stop(ctx)
		}
	}()
	record := func() *ledger.Server {
		got, err := L.ListServers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i].ID == "w-test-1" {
				return &got[i]
			}
		}
		return nil
	}
	waitFor(t, 10*time.Second, "the server's record", func() bool { return record() != nil })
	r := record()
	host, _ := os.Hostname()
	if r.Host != host || r.PID != os.Getpid() || r.Slots != 8 || r.Busy != 0 || r.Version == "" ||
		r.Interval != 30*time.Millisecond || r.Started.Before(before.Add(-time.Second)) ||
		!slices.Equal(r.Lanes, []string{"interactive", "scheduled", "batch", "human-review"}) {
		t.Fatalf("record = %+v", r)
	}
	first := r.Heartbeat

	publish(t, b, "batch", 2)
	waitFor(t, 10*time.Second, "busy 2 in the record", func() bool { r := record(); return r != nil && r.Busy == 2 })
	waitFor(t, 10*time.Second, "the heartbeat refreshed", func() bool { r := record(); return r != nil && r.Heartbeat.After(first) })
	close(release)
	waitFor(t, 10*time.Second, "busy 0 again", func() bool { r := record(); return r != nil && r.Busy == 0 })

	stopped = true
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r := record(); r != nil {
		t.Fatalf("after Stop the record is still there: %+v", r)
	}
	// The in-process broker keeps no registry of its own: nothing to
	// announce, and no error.
	if ok, err := b.AnnounceServer(ctx, broker.ServerInfo{ID: "w-test-1"}, time.Second); ok || err != nil {
		t.Errorf("AnnounceServer on mem:// = %v, %v; want false, nil", ok, err)
	}
}
