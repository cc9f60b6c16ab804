package nats

import (
	"context"
	"fmt"
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
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type restartArgs struct {
	N int `json:"n"`
}

func (restartArgs) Kind() string { return "nats.restart" }

// TestRestart_EndToEnd: several thousand tasks run through Client, Server
// and the SQLite ledger on a private NATS server that is stopped and
// started while they run. Every task completes, none is lost, and each
// task's step and effect ran exactly once.
func TestRestart_EndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("a run of 3,000 tasks across a server restart; -short skips it")
	}
	t.Parallel()
	const total = 3000
	srv := startPrivateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "ledger.db")+"?synchronous=normal")
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()
	b := openBroker(t, testURL(t, srv.URL(), "ack_wait=2s"), &broker.Options{Dedup: L})
	client, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	server, err := switchyard.NewServer(b, &scheduler.Config{
		Ledger: L, Slots: 16, Lease: 2 * time.Second, PollWait: 200 * time.Millisecond,
		Retry:  scheduler.RetryPolicy{Base: 50 * time.Millisecond, Max: 500 * time.Millisecond, MaxAttempts: 1000},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		steps     = map[string]int{}
		effects   = map[string]int{}
		completed atomic.Int64
	)
	_ = switchyard.Register(server, func(ctx context.Context, tk *switchyard.Task[restartArgs]) error {
		if _, err := switchyard.Step(ctx, "compute", func(ctx context.Context) (int, error) {
			mu.Lock()
			steps[tk.ID]++
			mu.Unlock()
			return tk.Args.N * 2, nil
		}); err != nil {
			return err
		}
		_, err := switchyard.Effect(ctx, "send", func(ctx context.Context) (bool, error) {
			mu.Lock()
			effects[tk.ID]++
			mu.Unlock()
			return true, nil
		}, nil)
		if err == nil {
			completed.Add(1)
		}
		return err
	}, nil)

	ids := make([]string, 0, total)
	for i := 0; i < total; i++ {
		r, err := client.Enqueue(ctx, restartArgs{N: i}, &switchyard.EnqueueOpts{Lane: "batch", IdempotencyKey: fmt.Sprint("task-", i)})
		if err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
		ids = append(ids, r.ID)
	}
	if err := server.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = server.StopAndCancel(sctx)
	}()
	for completed.Load() < total/4 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("stopping the NATS server after %d of %d tasks", completed.Load(), total)
	srv.Stop()
	time.Sleep(time.Second)
	srv.Start()
	t.Logf("restarted; %d tasks had completed", completed.Load())

	// Wait until the ledger says every task completed.
	pending := ids
	for len(pending) > 0 && ctx.Err() == nil {
		var left []string
		for _, id := range pending {
			tk, err := L.Get(ctx, id)
			if err != nil || tk.State != ledger.Completed {
				left = append(left, id)
			}
		}
		pending = left
		if len(pending) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if len(pending) > 0 {
		t.Fatalf("%d of %d tasks did not complete within the time limit (first %s)", len(pending), total, pending[0])
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if steps[id] != 1 || effects[id] != 1 {
			t.Errorf("task %s: step ran %d times, effect %d times; want once each", id, steps[id], effects[id])
		}
	}
	t.Logf("%d tasks completed across the restart, each step and effect once", total)
}
