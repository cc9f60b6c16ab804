package migrate_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite" // sqlite:// ledgers
	"github.com/switchyard-dev/switchyard/scheduler"
)

type liveArgs struct {
	N int `json:"n"`
}

func (liveArgs) Kind() string { return "migrate.live" }

// TestLiveMigration: a server works under a steady stream of tasks on the
// old broker; the publish target switches to the new broker (a second
// server on broker.Migrating takes over from the first), the old broker
// drains, and a few tasks are deliberately present on both brokers. Every
// task completes, none is lost, and every effect happens once.
func TestLiveMigration(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{{"embedded", "embedded"}, {"embedded", "nats"}, {"rabbitmq", "embedded"}, {"asynq", "sqs"}} {
		t.Run(c[0]+"-to-"+c[1], func(t *testing.T) { live(t, c[0], c[1]) })
	}
}

func live(t *testing.T, fromKind, toKind string) {
	ctx := ctxFor(t, 3*time.Minute)
	ns := namespace(t)
	fromURL, toURL := urlFor(t, fromKind, ns), urlFor(t, toKind, ns)
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()

	var mu sync.Mutex
	effects := map[string]int{}
	handler := func(ctx context.Context, tk *switchyard.Task[liveArgs]) error {
		time.Sleep(2 * time.Millisecond)
		_, err := switchyard.Effect(ctx, "send", func(ctx context.Context) (bool, error) {
			mu.Lock()
			effects[tk.ID]++
			mu.Unlock()
			return true, nil
		}, nil)
		return err
	}
	newServer := func(b *broker.Broker) *switchyard.Server {
		srv, err := switchyard.NewServer(b, &scheduler.Config{Ledger: L, Lease: 5 * time.Second, PollWait: 100 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := switchyard.Register(srv, handler, nil); err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	opts := &broker.Options{Dedup: L}

	// Before: everything on the old broker.
	oldB, err := broker.Open(ctx, fromURL, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer oldB.Close()
	oldClient, err := switchyard.NewClient(oldB, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	srv1 := newServer(oldB)
	// The old workers leave batch alone, so the old broker holds a backlog
	// at the switch that only the migrating workers can have drained.
	if err := srv1.Pause("batch"); err != nil {
		t.Fatal(err)
	}

	// The switch: a broker that publishes to the new one and drains the old.
	fromDrv, err := broker.OpenDriver(ctx, fromURL)
	if err != nil {
		t.Fatal(err)
	}
	toDrv, err := broker.OpenDriver(ctx, toURL)
	if err != nil {
		t.Fatal(err)
	}
	mig := &broker.Migrating{From: fromDrv, To: toDrv}
	newB, err := broker.New(mig, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer newB.Close()
	newClient, err := switchyard.NewClient(newB, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}

	// The producer enqueues steadily and switches clients halfway.
	var client atomic.Pointer[switchyard.Client]
	client.Store(oldClient)
	var ids []string
	var idsMu sync.Mutex
	const total = 300
	produced := make(chan struct{})
	halfway := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < total; i++ {
			lane := "interactive"
			if i%3 == 0 {
				lane = "batch"
			}
			// A publisher retries transient failures (a broker connection
			// being re-established), as an application would.
			var r *switchyard.EnqueueResult
			var err error
			for try := 0; try < 50; try++ {
				r, err = client.Load().Enqueue(ctx, liveArgs{N: i}, &switchyard.EnqueueOpts{Lane: lane})
				if err == nil || broker.ClassOf(err) != broker.Transient {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil {
				t.Errorf("enqueue %d: %v", i, err)
				return
			}
			idsMu.Lock()
			ids = append(ids, r.ID)
			idsMu.Unlock()
			if i == total/2 {
				close(halfway)
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	select {
	case <-halfway:
	case <-produced: // it failed (t.Errorf) before halfway: do not wait for ever
		t.FailNow()
	}
	if s, err := oldB.Stats(ctx, "batch"); err != nil || s.Ready == 0 {
		t.Fatalf("no backlog on the old broker at the switch: %+v %v", s, err)
	}
	// Publish the next tasks to the new broker, start the workers on the
	// migrating broker and stop the old ones: no downtime, no gap.
	srv2 := newServer(newB)
	client.Store(newClient)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := srv1.Stop(stopCtx); err != nil {
		t.Fatalf("stop the old server: %v", err)
	}
	cancel()
	// A few tasks appear on both brokers (a publisher retrying across the
	// switch): copies of already-known task messages straight onto the new
	// broker.
	idsMu.Lock()
	dups := append([]string(nil), ids[:5]...)
	idsMu.Unlock()
	for _, id := range dups {
		body, _ := json.Marshal(liveArgs{N: -1})
		rs, err := toDrv.Publish(ctx, []*broker.Message{{ID: id, Lane: "interactive", Kind: liveArgs{}.Kind(), Body: body, EnqueuedAt: time.Now()}})
		if err != nil || rs[0].Err != nil {
			t.Fatalf("duplicate publish: %v %+v", err, rs)
		}
	}
	<-produced
	if t.Failed() {
		return
	}

	// Every task completes.
	eventually(t, 2*time.Minute, func() string {
		idsMu.Lock()
		defer idsMu.Unlock()
		for _, id := range ids {
			tk, err := L.Get(ctx, id)
			if err != nil {
				return "get " + id + ": " + err.Error()
			}
			if tk.State != ledger.Completed {
				return "task " + id + " is " + string(tk.State)
			}
		}
		return ""
	})
	// The old broker drains, after which the route can drop it.
	for _, lane := range []string{"interactive", "batch"} {
		eventually(t, time.Minute, func() string {
			ok, err := mig.Drained(ctx, lane)
			if err != nil {
				return err.Error()
			}
			if !ok {
				return "the old broker still holds work in " + lane
			}
			return ""
		})
	}
	// Give the duplicate copies time to be delivered and skipped.
	eventually(t, time.Minute, func() string {
		s, err := newB.Stats(ctx, "interactive")
		if err != nil {
			return err.Error()
		}
		if s.Ready+s.InFlight+s.Delayed != 0 {
			return "interactive not drained"
		}
		return ""
	})
	stopCtx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := srv2.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != total {
		t.Fatalf("enqueued %d of %d", len(ids), total)
	}
	for _, id := range ids {
		if effects[id] != 1 {
			t.Errorf("task %s: effect ran %d times, want 1", id, effects[id])
		}
	}
	if len(effects) != total {
		t.Errorf("%d effects for %d tasks", len(effects), total)
	}
}

func eventually(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
