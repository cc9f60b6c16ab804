package asynq_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/switchyard-dev/switchyard"
	asynqadapter "github.com/switchyard-dev/switchyard/adapters/asynq"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
)

type replayArgs struct {
	N int `json:"n"`
}

func (replayArgs) Kind() string { return "test.replay" }

// TestReplay_ForeignTool: with a ledger, a dead letter that an operator
// runs again through asynq's own tools (Inspector.RunTask, as asynqmon
// does) runs the task; the runtime does not re-bury it, and the dead
// reason it recorded first is never rewritten.
func TestReplay_ForeignTool(t *testing.T) {
	t.Parallel()
	b, ns, addr := interopSetup(t)
	ctx := context.Background()
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()
	client, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, Lease: 2 * time.Second, PollWait: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	var runs atomic.Int32
	fail.Store(true)
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[replayArgs]) error {
		runs.Add(1)
		if fail.Load() {
			return switchyard.Permanent(errors.New("the upstream said no"))
		}
		return nil
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	res, err := client.Enqueue(ctx, replayArgs{N: 1}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	waitTask := func(want ledger.State) *ledger.Task {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			tk, err := L.Get(ctx, res.ID)
			if err == nil && tk.State == want {
				return tk
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %+v (%v), want %s", tk, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitTask(ledger.Dead)

	// The operator's replay, with asynq's own inspector.
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: addr})
	defer insp.Close()
	q := asynqadapter.QueueName(ns, "interactive")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ts, err := insp.ListArchivedTasks(q)
		if err == nil && len(ts) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("archived tasks %v (%v), want the dead letter", ts, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fail.Store(false)
	if err := insp.RunTask(q, res.ID); err != nil {
		t.Fatalf("RunTask: %v", err)
	}
	tk := waitTask(ledger.Completed)
	if runs.Load() != 2 {
		t.Errorf("handler ran %d times, want 2 (the first, then the replay)", runs.Load())
	}
	evs, err := L.Events(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	var deadReasons, replays int
	for _, e := range evs {
		if e.To == ledger.Dead {
			deadReasons++
			if e.Reason != string(broker.ReasonPermanent) {
				t.Errorf("dead event %+v: reason rewritten", e)
			}
		}
		if e.Reason == "replayed" {
			replays++
		}
	}
	if deadReasons != 1 || replays != 1 {
		t.Errorf("events %+v: want one move to dead (permanent_error) and one replay", evs)
	}
}
