package switchyard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type echoArgs struct {
	N    int    `json:"n"`
	Mode string `json:"mode"`
}

func (echoArgs) Kind() string { return "test.echo" }

func setup(t *testing.T) (*broker.Broker, *switchyard.Client, *switchyard.Server) {
	t.Helper()
	ctx := context.Background()
	b, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c, err := switchyard.NewClient(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{
		Slots: 4, Lease: 3 * time.Second, PollWait: 100 * time.Millisecond,
		Retry: scheduler.RetryPolicy{Base: 20 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b, c, srv
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServer_Outcomes(t *testing.T) {
	t.Parallel()
	b, c, srv := setup(t)
	var mu sync.Mutex
	attempts := map[int][]int{}
	var okCount atomic.Int32
	err := switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[echoArgs]) error {
		mu.Lock()
		attempts[tk.Args.N] = append(attempts[tk.Args.N], tk.Attempt)
		n := len(attempts[tk.Args.N])
		mu.Unlock()
		switch tk.Args.Mode {
		case "flaky":
			if tk.Attempt < 3 {
				return errors.New("model timeout")
			}
		case "always":
			return errors.New("still failing")
		case "permanent":
			return switchyard.Permanent(errors.New("bad input"))
		case "snooze":
			if n < 3 {
				return switchyard.Snooze(10 * time.Millisecond)
			}
		case "panic":
			panic("boom")
		}
		okCount.Add(1)
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	for i, mode := range []string{"ok", "flaky", "always", "permanent", "snooze", "panic"} {
		if _, err := c.Enqueue(ctx, echoArgs{N: i, Mode: mode}, &switchyard.EnqueueOpts{Lane: "interactive"}); err != nil {
			t.Fatal(err)
		}
	}
	// An unknown kind and undecodable args dead-letter without retrying.
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "interactive", Kind: "nobody.handles", Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishOne(ctx, &broker.Message{Lane: "interactive", Kind: "test.echo", Body: []byte("{not json")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, func() bool {
		s, _ := b.Stats(ctx, "interactive")
		return okCount.Load() == 3 && s.DeadLettered == 5 && s.Ready == 0 && s.InFlight == 0 && s.Delayed == 0
	})
	mu.Lock()
	defer mu.Unlock()
	want := map[int][]int{0: {1}, 1: {1, 2, 3}, 2: {1, 2, 3}, 3: {1}, 4: {1, 1, 1}, 5: {1, 2, 3}}
	for n, w := range want {
		if len(attempts[n]) != len(w) {
			t.Errorf("task %d attempts %v, want %v", n, attempts[n], w)
			continue
		}
		for i := range w {
			if attempts[n][i] != w[i] {
				t.Errorf("task %d attempts %v, want %v", n, attempts[n], w)
				break
			}
		}
	}
	reasons := map[broker.Reason]int{}
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "interactive", Max: 10, DeadLetters: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		reasons[d.DeadLetter.Reason]++
		if d.DeadLetter.Reason == broker.ReasonMaxAttempts && len(d.DeadLetter.Attempts) == 0 {
			t.Errorf("dead letter %s has no attempt history", d.ID)
		}
	}
	wantR := map[broker.Reason]int{broker.ReasonMaxAttempts: 2, broker.ReasonPermanent: 1, broker.ReasonUnknownKind: 1, broker.ReasonUndecodable: 1}
	for r, n := range wantR {
		if reasons[r] != n {
			t.Errorf("dead letters by reason = %v, want %v", reasons, wantR)
			break
		}
	}
}

func TestServer_GracefulStopReturnsWork(t *testing.T) {
	t.Parallel()
	b, c, srv := setup(t)
	started := make(chan struct{}, 10)
	var done atomic.Int32
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[echoArgs]) error {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
		}
		done.Add(1)
		return nil
	}, nil)
	ctx := context.Background()
	for i := 0; i < 6; i++ {
		if _, err := c.Enqueue(ctx, echoArgs{N: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	_ = srv.Start(ctx)
	<-started
	stopCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_ = srv.StopAndCancel(stopCtx)
	// Everything comes back with no attempt spent.
	ds, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute, Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for len(ds) < 6 {
		more, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute, Wait: 2 * time.Second})
		if err != nil || len(more) == 0 {
			break
		}
		ds = append(ds, more...)
	}
	if len(ds) != 6 {
		t.Fatalf("%d of 6 tasks came back after StopAndCancel", len(ds))
	}
	for _, d := range ds {
		if d.Attempt != 1 {
			t.Errorf("task %s came back as attempt %d, want 1 (returned work spends no attempt)", d.ID, d.Attempt)
		}
	}
	if done.Load() != 0 {
		t.Errorf("%d handlers finished although cancelled", done.Load())
	}
}
