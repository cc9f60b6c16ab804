package switchyard_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type sumArgs struct {
	A, B int
	Mode string
}

func (sumArgs) Kind() string { return "test.sum" }

type sumResult struct {
	Sum int `json:"sum"`
}

// TestResult_WaitAndDecode: a RegisterWithResult handler's value, and a
// SetResult one, are stored and come back through Wait and Result; an
// oversized result is refused with the limit named (from SetResult at
// once; a returned one dead-letters the task).
func TestResult_WaitAndDecode(t *testing.T) {
	t.Parallel()
	L, b, c := withLedger(t)
	ctx := context.Background()
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond, MaxResultBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	setErr := make(chan error, 1)
	err = switchyard.RegisterWithResult(srv, func(ctx context.Context, tk *switchyard.Task[sumArgs]) (sumResult, error) {
		switch tk.Args.Mode {
		case "set":
			setErr <- switchyard.SetResult(ctx, strings.Repeat("x", 100)) // refused: above 64
			return sumResult{}, switchyard.SetResult(ctx, sumResult{Sum: -1})
		case "big":
			return sumResult{Sum: 1 << 40}, nil // fits
		}
		return sumResult{Sum: tk.Args.A + tk.Args.B}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	res, err := c.Enqueue(ctx, sumArgs{A: 2, B: 3}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := c.Wait(wctx, res.ID)
	if err != nil || !w.Done || w.State != ledger.Completed {
		t.Fatalf("Wait = %+v, %v", w, err)
	}
	var got sumResult
	if err := w.Decode(&got); err != nil || got.Sum != 5 {
		t.Fatalf("Decode = %+v, %v", got, err)
	}
	r, err := c.Result(ctx, res.ID)
	if err != nil || string(r.Value) != `{"sum":5}` {
		t.Fatalf("Result = %+v, %v", r, err)
	}
	// The handler's own return wins over SetResult; the oversized
	// SetResult was refused with the limit.
	res2, _ := c.Enqueue(ctx, sumArgs{Mode: "set"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	w2, err := c.Wait(wctx, res2.ID)
	if err != nil || string(w2.Value) != `{"sum":0}` {
		t.Fatalf("Wait(set) = %+v %s, %v", w2, w2.Value, err)
	}
	serr := <-setErr
	var tl *switchyard.ResultTooLargeError
	if !errors.As(serr, &tl) || tl.Limit != 64 || tl.Size != 102 || !errors.Is(serr, broker.ErrInvalid) || !strings.Contains(serr.Error(), "64") {
		t.Fatalf("oversized SetResult: %v", serr)
	}
	if _, err := c.Result(ctx, "no-such-task"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Result of an unknown task: %v", err)
	}
	if err := switchyard.SetResult(ctx, 1); !errors.Is(err, scheduler.ErrNotInTask) {
		t.Fatalf("SetResult outside a handler: %v", err)
	}
}

type blobArgs struct{ N int }

func (blobArgs) Kind() string { return "test.blob" }

// TestResult_TooLargeDeadLetters: a returned result above the limit
// dead-letters the task (permanent, not retried) with the limit named.
func TestResult_TooLargeDeadLetters(t *testing.T) {
	t.Parallel()
	L, b, c := withLedger(t)
	ctx := context.Background()
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond, MaxResultBytes: 1000})
	err := switchyard.RegisterWithResult(srv, func(ctx context.Context, tk *switchyard.Task[blobArgs]) (string, error) {
		return strings.Repeat("y", tk.Args.N), nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start(ctx)
	defer srv.Stop(ctx)
	res, _ := c.Enqueue(ctx, blobArgs{N: 5000}, &switchyard.EnqueueOpts{Lane: "interactive"})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := c.Wait(wctx, res.ID)
	if err != nil || w.State != ledger.Dead || !strings.Contains(w.Error, "limit of 1000") {
		t.Fatalf("Wait = %+v, %v", w, err)
	}
	if as, _ := L.Attempts(ctx, res.ID); len(as) != 1 {
		t.Fatalf("%d attempts, want 1 (not retried)", len(as))
	}
	if err := w.Decode(new(string)); !errors.Is(err, switchyard.ErrNoResult) {
		t.Fatalf("Decode of a dead task: %v", err)
	}
}

// TestResult_WaitBounded: Wait honours its context; without a ledger it
// is ErrNoLedger.
func TestResult_WaitBounded(t *testing.T) {
	t.Parallel()
	_, _, c := withLedger(t)
	ctx := context.Background()
	res, _ := c.Enqueue(ctx, sumArgs{}, &switchyard.EnqueueOpts{Lane: "interactive"}) // no worker runs
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(wctx, res.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline: %v", err)
	}
	if _, err := c.Wait(ctx, "no-such-task"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Wait of an unknown task: %v", err)
	}
	_, nc, _ := setup(t)
	if _, err := nc.Wait(ctx, res.ID); !errors.Is(err, switchyard.ErrNoLedger) {
		t.Fatalf("Wait without a ledger: %v", err)
	}
}

// TestResult_WaitAcrossRestart: a Wait begun while the task runs returns
// its result after the worker process is stopped mid-task and another
// one (new ledger and broker handles on the same files) finishes it; the
// result is still there after the ledger is reopened.
func TestResult_WaitAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	dsn := "sqlite://" + filepath.Join(dir, "ledger.db")
	burl := "embedded://" + filepath.Join(dir, "queue.db") + "?namespace=" + conformance.Namespace(t)
	open := func() (ledger.Ledger, *broker.Broker) {
		L, err := ledger.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		b, err := broker.Open(ctx, burl, &broker.Options{Dedup: L})
		if err != nil {
			t.Fatal(err)
		}
		return L, b
	}
	L1, b1 := open()
	started := make(chan struct{}, 4)
	serve := func(L ledger.Ledger, b *broker.Broker, block bool) *switchyard.Server {
		srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond})
		switchyard.RegisterWithResult(srv, func(ctx context.Context, tk *switchyard.Task[sumArgs]) (sumResult, error) {
			started <- struct{}{}
			if block {
				<-ctx.Done()
				return sumResult{}, ctx.Err()
			}
			return sumResult{Sum: tk.Args.A * tk.Args.B}, nil
		}, nil)
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	srv1 := serve(L1, b1, true)
	// The waiting client is its own process's: its own handles.
	Lc, bc := open()
	defer Lc.Close()
	defer bc.Close()
	c, _ := switchyard.NewClient(bc, &switchyard.ClientConfig{Ledger: Lc})
	res, err := c.Enqueue(ctx, sumArgs{A: 6, B: 7}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	done := make(chan *switchyard.Result, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		w, err := c.Wait(wctx, res.ID)
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		done <- w
	}()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	srv1.StopAndCancel(sctx) // the worker "restarts": its task goes back
	cancel()
	b1.Close()
	L1.Close()
	L2, b2 := open()
	defer L2.Close()
	defer b2.Close()
	srv2 := serve(L2, b2, false)
	defer srv2.Stop(ctx)
	w := <-done
	var got sumResult
	if w == nil || w.Decode(&got) != nil || got.Sum != 42 {
		t.Fatalf("Wait across the restart = %+v", w)
	}
	L3, err := ledger.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer L3.Close()
	if t3, err := L3.Get(ctx, res.ID); err != nil || string(t3.Result) != `{"sum":42}` {
		t.Fatalf("result after reopening: %+v, %v", t3, err)
	}
}
