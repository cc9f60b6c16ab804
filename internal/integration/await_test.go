package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
)

type payArgs struct {
	Order   string `json:"order"`
	Timeout int64  `json:"timeout_ms"`
}

func (payArgs) Kind() string { return "test.pay" }

type payment struct {
	Amount int `json:"amount"`
}

// payHandler waits for event "paid" (correlated by order) after handing
// its token out, then records the payment.
type payHandler struct {
	tokens   sync.Map // task ID → token
	paid     sync.Map // task ID → amount
	runs     atomic.Int32
	before   atomic.Int32 // runs of the step before the wait
	resumed  atomic.Int32
	register func(srv *switchyard.Server)
}

func newPayHandler() *payHandler {
	p := &payHandler{}
	p.register = func(srv *switchyard.Server) {
		_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[payArgs]) error {
			p.runs.Add(1)
			timeout := time.Duration(tk.Args.Timeout) * time.Millisecond
			opts := &switchyard.AwaitOpts{CorrelationKey: tk.Args.Order}
			if _, err := switchyard.Step(ctx, "invoice", func(ctx context.Context) (bool, error) {
				p.before.Add(1)
				return true, nil
			}); err != nil {
				return err
			}
			tok, err := switchyard.EventToken(ctx, "paid", timeout, opts)
			if err != nil {
				return err
			}
			p.tokens.Store(tk.ID, tok)
			pay, err := switchyard.AwaitEvent[payment](ctx, "paid", timeout, opts)
			if err != nil {
				return err
			}
			p.resumed.Add(1)
			p.paid.Store(tk.ID, pay.Amount)
			return nil
		}, nil)
	}
	return p
}

func waitState(t *testing.T, c *switchyard.Client, id string, want ledger.State) *switchyard.TaskInfo {
	t.Helper()
	var info *switchyard.TaskInfo
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		info, err = c.Task(context.Background(), id)
		if err == nil && info.Task.State == want {
			return info
		}
		if time.Now().After(deadline) {
			st := ledger.State("?")
			if info != nil {
				st = info.Task.State
			}
			t.Fatalf("task %s is %s (%v), want %s", id, st, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAwaitEvent_SignalAfterRestart: the task parks in awaiting_event and
// no worker holds it (the server is stopped); a wrong token changes
// nothing; the right token resumes it on a new server with the payload,
// the work before the wait not repeated; the token cannot be used again.
func TestAwaitEvent_SignalAfterRestart(t *testing.T) {
	t.Parallel()
	streamMatrix(t, func(t *testing.T, e *streamEnv) {
		ctx := context.Background()
		h := newPayHandler()
		srv := e.server(t)
		h.register(srv)
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := e.c.Enqueue(ctx, payArgs{Order: "o-" + conformance.Namespace(t), Timeout: 60_000}, &switchyard.EnqueueOpts{Lane: "interactive"})
		if err != nil {
			t.Fatal(err)
		}
		info := waitState(t, e.c, res.ID, ledger.AwaitingEvent)
		if n := len(info.Attempts); n != 1 || info.Attempts[0].Outcome != "await_event" {
			t.Fatalf("attempts %+v, want one ending await_event", info.Attempts)
		}
		if err := srv.Stop(ctx); err != nil { // no process holds the task
			t.Fatal(err)
		}
		tok, _ := h.tokens.Load(res.ID)
		if _, err := e.c.Signal(ctx, switchyard.SignalTarget{Token: "not-the-token"}, []byte(`{"amount":1}`)); !errors.Is(err, switchyard.ErrNoSuchWait) || !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("wrong token: %v", err)
		}
		if info := waitState(t, e.c, res.ID, ledger.AwaitingEvent); len(info.Events) == 0 {
			t.Fatal("no events")
		}
		other := e.reopen(t) // the signal comes from another process
		sr, err := other.Signal(ctx, switchyard.SignalTarget{Token: tok.(string)}, []byte(`{"amount":42}`))
		if err != nil || !sr.Resumed || sr.TaskID != res.ID || sr.Name != "paid" {
			t.Fatalf("Signal: %+v %v", sr, err)
		}
		if _, err := other.Signal(ctx, switchyard.SignalTarget{Token: tok.(string)}, []byte(`{"amount":7}`)); !errors.Is(err, switchyard.ErrWaitClosed) {
			t.Fatalf("reused token: %v", err)
		}
		srv2 := e.server(t)
		h.register(srv2)
		if err := srv2.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer srv2.Stop(context.Background())
		waitState(t, e.c, res.ID, ledger.Completed)
		if amt, _ := h.paid.Load(res.ID); amt != 42 {
			t.Errorf("payment %v, want 42 (the first signal's)", amt)
		}
		if h.before.Load() != 1 || h.runs.Load() != 2 || h.resumed.Load() != 1 {
			t.Errorf("step before the wait ran %d times, handler %d, resumed %d; want 1, 2, 1", h.before.Load(), h.runs.Load(), h.resumed.Load())
		}
		if _, err := e.c.Signal(ctx, switchyard.SignalTarget{Token: tok.(string)}, nil); !errors.Is(err, switchyard.ErrWaitClosed) {
			t.Errorf("token after completion: %v", err)
		}
	})
}

// TestAwaitEvent_CorrelationKeyAndTimeout: a signal by correlation key
// resumes its task; a wait whose timeout passes ends the task failed with
// reason await_timeout, and a late signal is refused.
func TestAwaitEvent_CorrelationKeyAndTimeout(t *testing.T) {
	t.Parallel()
	streamMatrix(t, corrAndTimeout)
}

// TestAwaitEvent_OtherBrokers: the same on RabbitMQ, Redis (asynq) and SQS,
// whose delays (the wait's timeout message) work differently.
func TestAwaitEvent_OtherBrokers(t *testing.T) {
	t.Parallel()
	for _, bk := range []string{"rabbitmq", "asynq", "sqs"} {
		t.Run(bk, func(t *testing.T) {
			t.Parallel()
			corrAndTimeout(t, newStreamEnv(t, "sqlite", bk))
		})
	}
}

func corrAndTimeout(t *testing.T, e *streamEnv) {
	{
		ctx := context.Background()
		h := newPayHandler()
		srv := e.server(t)
		h.register(srv)
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer srv.Stop(context.Background())
		order := "o-" + conformance.Namespace(t)
		byKey, err := e.c.Enqueue(ctx, payArgs{Order: order, Timeout: 60_000}, &switchyard.EnqueueOpts{Lane: "interactive", Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		late, err := e.c.Enqueue(ctx, payArgs{Order: order + "-late", Timeout: 500}, &switchyard.EnqueueOpts{Lane: "interactive", Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, e.c, byKey.ID, ledger.AwaitingEvent)
		if _, err := e.c.Signal(ctx, switchyard.SignalTarget{Tenant: "other", CorrelationKey: order}, []byte(`{"amount":1}`)); !errors.Is(err, switchyard.ErrNoSuchWait) {
			t.Fatalf("another tenant's key: %v", err)
		}
		if _, err := e.c.Signal(ctx, switchyard.SignalTarget{Tenant: "acme", CorrelationKey: order}, []byte(`{"amount":5}`)); err != nil {
			t.Fatal(err)
		}
		waitState(t, e.c, byKey.ID, ledger.Completed)
		if amt, _ := h.paid.Load(byKey.ID); amt != 5 {
			t.Errorf("payment %v, want 5", amt)
		}

		info := waitState(t, e.c, late.ID, ledger.Failed)
		if last := info.Events[len(info.Events)-1]; last.Reason != "await_timeout" || info.Task.LastError == "" {
			t.Errorf("timed-out task: last event %+v, last error %q", last, info.Task.LastError)
		}
		if _, err := e.c.Signal(ctx, switchyard.SignalTarget{TaskID: late.ID, Name: "paid"}, []byte(`{"amount":9}`)); !errors.Is(err, switchyard.ErrWaitClosed) {
			t.Errorf("a signal after the timeout: %v", err)
		}
		if _, ok := h.paid.Load(late.ID); ok {
			t.Error("the timed-out task resumed")
		}
		// Bad input: a payload that is not JSON, or above the limit.
		if _, err := e.c.Signal(ctx, switchyard.SignalTarget{TaskID: late.ID, Name: "paid"}, []byte("{")); err == nil {
			t.Error("a payload that is not JSON was accepted")
		}
		var le *switchyard.LimitError
		if _, err := e.c.Signal(ctx, switchyard.SignalTarget{TaskID: late.ID, Name: "paid"}, make([]byte, switchyard.MaxSignalPayload+1)); !errors.As(err, &le) {
			t.Errorf("oversized payload: %v", err)
		}
	}
}

type chatArgs struct{}

func (chatArgs) Kind() string { return "test.chat" }

// TestAwaitEvent_ManyWaits: waiting is not failing: a task that waits for
// more events than its attempt budget completes.
func TestAwaitEvent_ManyWaits(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, "sqlite", "mem")
	ctx := context.Background()
	srv := e.server(t) // MaxAttempts 3
	var replies atomic.Int32
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[chatArgs]) error {
		for i := range 5 {
			if _, err := switchyard.AwaitEvent[string](ctx, fmt.Sprintf("message-%d", i), time.Minute, nil); err != nil {
				return err
			}
		}
		replies.Add(1)
		return nil
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	res, err := e.c.Enqueue(ctx, chatArgs{}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		waitState(t, e.c, res.ID, ledger.AwaitingEvent)
		if _, err := e.c.Signal(ctx, switchyard.SignalTarget{TaskID: res.ID, Name: fmt.Sprintf("message-%d", i)}, []byte(`"hi"`)); err != nil {
			t.Fatalf("signal %d: %v", i, err)
		}
	}
	waitState(t, e.c, res.ID, ledger.Completed)
	if replies.Load() != 1 {
		t.Errorf("%d completions", replies.Load())
	}
}

type earlyArgs struct{}

func (earlyArgs) Kind() string { return "test.early" }

// TestAwaitEvent_SignalBeforePark: the signal comes while the handler is
// still running (before it returns AwaitEvent's error): the task is not
// parked but run again at once, and sees the payload.
func TestAwaitEvent_SignalBeforePark(t *testing.T) {
	t.Parallel()
	streamMatrix(t, func(t *testing.T, e *streamEnv) {
		ctx := context.Background()
		srv := e.server(t)
		tokens := make(chan string, 1)
		var got atomic.Value
		_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[earlyArgs]) error {
			tok, err := switchyard.EventToken(ctx, "ready", time.Minute, nil)
			if err != nil {
				return err
			}
			select {
			case tokens <- tok:
				time.Sleep(300 * time.Millisecond) // the signal lands meanwhile
			default:
			}
			v, err := switchyard.AwaitEvent[string](ctx, "ready", time.Minute, nil)
			if err != nil {
				return err
			}
			got.Store(v)
			return nil
		}, nil)
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer srv.Stop(context.Background())
		res, err := e.c.Enqueue(ctx, earlyArgs{}, &switchyard.EnqueueOpts{Lane: "interactive"})
		if err != nil {
			t.Fatal(err)
		}
		sr, err := e.c.Signal(ctx, switchyard.SignalTarget{Token: <-tokens}, []byte(`"go"`))
		if err != nil || sr.Resumed {
			t.Fatalf("signal while running: %+v %v (want stored, not resumed)", sr, err)
		}
		info := waitState(t, e.c, res.ID, ledger.Completed)
		if got.Load() != "go" {
			t.Errorf("payload %v", got.Load())
		}
		for _, ev := range info.Events {
			if ev.To == ledger.AwaitingEvent {
				t.Errorf("the task parked although its event had come: %+v", info.Events)
			}
		}
	})
}

// TestClient_CancelAwaitingEvent: a task parked in AwaitEvent is cancelled
// by Client.Cancel and ends cancelled exactly once: its wait's timeout
// message, when it comes, changes nothing, a signal is refused, and the
// handler never runs again.
func TestClient_CancelAwaitingEvent(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t, "sqlite", "mem")
	ctx := context.Background()
	h := newPayHandler()
	srv := e.server(t)
	h.register(srv)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	res, err := e.c.Enqueue(ctx, payArgs{Order: "o-" + conformance.Namespace(t), Timeout: 300}, &switchyard.EnqueueOpts{Lane: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, e.c, res.ID, ledger.AwaitingEvent)
	got, err := e.c.Cancel(ctx, res.ID, "the user left")
	if err != nil || got.State != ledger.Cancelled {
		t.Fatalf("cancel a parked task: %v, %v", got, err)
	}
	// The timeout message comes and expires the wait; the task stays
	// cancelled (not failed with await_timeout).
	deadline := time.Now().Add(20 * time.Second)
	for {
		w, err := e.L.GetWait(ctx, res.ID, "paid")
		if err == nil && w.State == ledger.WaitTimedOut {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the wait's timeout message was not handled: %+v %v", w, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancelledOnce(t, e.L, res.ID)
	if _, err := e.c.Signal(ctx, switchyard.SignalTarget{TaskID: res.ID, Name: "paid"}, []byte(`{"amount":1}`)); !errors.Is(err, switchyard.ErrWaitClosed) {
		t.Errorf("a signal to the cancelled task: %v, want ErrWaitClosed", err)
	}
	if _, err := e.c.Cancel(ctx, res.ID, "again"); !errors.Is(err, switchyard.ErrFinished) {
		t.Errorf("a second cancel: %v, want ErrFinished", err)
	}
	if n, r := h.runs.Load(), h.resumed.Load(); n != 1 || r != 0 {
		t.Errorf("handler runs %d, resumed %d; want 1, 0", n, r)
	}
	cancelledOnce(t, e.L, res.ID)
}
