package asynq_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	asynqadapter "github.com/switchyard-dev/switchyard/adapters/asynq"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// TestInterop_ServersInInspector: a running Switchyard scheduler on the
// asynq adapter writes asynq's own server record, so asynq's Inspector
// (and asynqmon's Servers tab) lists it with its host, pid, concurrency
// (slots), status, start time and the queues it receives from (a fair
// lane's shards included, the manual human-review lane not) and the
// tasks it runs as active workers; Stop removes it, as an asynq Server's
// shutdown does.
func TestInterop_ServersInInspector(t *testing.T) {
	t.Parallel()
	addr := testenv.Redis.Endpoint(t)
	ns := conformance.Namespace(t)
	ctx := context.Background()
	b, err := broker.Open(ctx, "redis://"+addr+"/0?namespace="+ns+"&fair=batch:2", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); cleanupNamespace(addr, ns) })
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: addr})
	defer insp.Close()

	id := "sy-" + ns
	s, err := scheduler.New(b, &scheduler.Config{WorkerID: id, Slots: 8, Lease: time.Second,
		Heartbeat: 100 * time.Millisecond, PollWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()
	if err := s.Handle("test.work", func(ctx context.Context, job *scheduler.Job) ([]byte, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop(ctx)
		}
	}()
	find := func() *asynq.ServerInfo {
		ss, err := insp.Servers()
		if err != nil {
			t.Fatal(err)
		}
		for _, si := range ss {
			if si.ID == id {
				return si
			}
		}
		return nil
	}
	var si *asynq.ServerInfo
	for deadline := time.Now().Add(10 * time.Second); si == nil && time.Now().Before(deadline); {
		if si = find(); si == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if si == nil {
		t.Fatal("asynq's Inspector does not list the Switchyard scheduler")
	}
	host, _ := os.Hostname()
	if si.Host != host || si.PID != os.Getpid() || si.Concurrency != 8 || si.Status != "active" || si.StrictPriority ||
		si.Started.Before(before) || si.Started.After(time.Now()) {
		t.Errorf("inspector server = %+v", si)
	}
	want := map[string]int{}
	for _, l := range []string{"interactive", "scheduled", "batch", broker.FairShardName("batch", 1)} {
		want[asynqadapter.QueueName(ns, l)] = 1
	}
	if len(si.Queues) != len(want) {
		t.Errorf("inspector queues = %v, want %v", si.Queues, want)
	}
	for q, p := range want {
		if si.Queues[q] != p {
			t.Errorf("inspector queues = %v, want %v", si.Queues, want)
			break
		}
	}

	// A task running: asynq's Inspector lists it among the server's
	// active workers (task ID, type, queue, start; no payload); once it
	// finishes, the next heartbeat empties the list.
	if len(si.ActiveWorkers) != 0 {
		t.Errorf("idle server with active workers: %+v", si.ActiveWorkers)
	}
	deadline := time.Now().Add(time.Hour).UTC()
	res, err := b.PublishOne(ctx, &broker.Message{Lane: "interactive", Kind: "test.work", Body: []byte(`{"secret":1}`),
		Headers: map[string]string{scheduler.HeaderDeadline: deadline.Format(time.RFC3339Nano)}})
	if err != nil {
		t.Fatal(err)
	}
	busy := func(n int) *asynq.ServerInfo {
		var got *asynq.ServerInfo
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if got = find(); got != nil && len(got.ActiveWorkers) == n {
				return got
			}
		}
		t.Fatalf("asynq's Inspector never showed %d active workers: %+v", n, got)
		return nil
	}
	w := busy(1).ActiveWorkers[0]
	if w.TaskID != res.ID || w.TaskType != "test.work" || w.Queue != asynqadapter.QueueName(ns, "interactive") ||
		len(w.TaskPayload) != 0 || w.Started.Before(before) || w.Started.After(time.Now()) || !w.Deadline.Equal(deadline) {
		t.Errorf("active worker = %+v, want task %s of test.work in %s started now, deadline %v, no payload",
			w, res.ID, asynqadapter.QueueName(ns, "interactive"), deadline)
	}
	unblock()
	busy(0)

	stopped = true
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if si := find(); si != nil {
		t.Errorf("after Stop asynq's Inspector still lists %+v", si)
	}
}

// TestDriver_AnnounceServerClosed: announcing on a closed broker is a
// typed error, not a panic or a silent success.
func TestDriver_AnnounceServerClosed(t *testing.T) {
	t.Parallel()
	b, _, _ := interopSetup(t)
	b.Close()
	ok, err := b.AnnounceServer(context.Background(), broker.ServerInfo{ID: "x"}, time.Second)
	if !ok || err == nil {
		t.Fatalf("AnnounceServer on a closed broker: %v, %v; want a closed error", ok, err)
	}
}
