package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// The task handle end to end: cancellation from outside a handler
// (Client.Cancel) and results (Client.Wait), on every adapter.

// cancelArgs are the arguments of the cancellation cases' tasks.
type cancelArgs struct {
	Scenario string `json:"scenario"`
}

func (cancelArgs) Kind() string { return "conformance.cancel" }

// cancelRecorder counts what the cancellation cases' handler does.
type cancelRecorder struct {
	file     string // effects performed, one line each: "<effect> <task>"
	started  counter
	byCancel counter       // handler contexts ended by the cancel (context.Cause)
	inside   chan string   // "<scenario> <task>" once the handler blocks
	block    chan struct{} // closed: blocked handlers stay blocked (never closed in the cases)
}

func newCancelRecorder(t testing.TB) *cancelRecorder {
	return &cancelRecorder{file: filepath.Join(t.(interface{ TempDir() string }).TempDir(), "effects.log"), inside: make(chan string, 16)}
}

// handler: scenario "quick" returns at once; "step" blocks inside a Step;
// "effect" confirms effect "first", then blocks inside effect "second".
// A blocked handler returns when its context ends.
func (r *cancelRecorder) handler(ctx context.Context, tk *switchyard.Task[cancelArgs]) error {
	r.started.add(tk.ID)
	wait := func(ctx context.Context) error {
		r.inside <- tk.Args.Scenario + " " + tk.ID
		<-ctx.Done()
		if errors.Is(context.Cause(ctx), scheduler.ErrCancelled) {
			r.byCancel.add(tk.ID)
		}
		return ctx.Err()
	}
	switch tk.Args.Scenario {
	case "review":
		if tk.Review == nil {
			return switchyard.AwaitApproval("refund above the limit", "refund 420")
		}
		return nil
	case "step":
		_, err := switchyard.Step(ctx, "think", func(ctx context.Context) (string, error) {
			return "", wait(ctx)
		})
		return err
	case "effect":
		if _, err := switchyard.Effect(ctx, "first", func(ctx context.Context) (bool, error) {
			return true, appendLine(r.file, "first "+tk.ID)
		}, nil); err != nil {
			return err
		}
		_, err := switchyard.Effect(ctx, "second", func(ctx context.Context) (bool, error) {
			if err := appendLine(r.file, "second-begun "+tk.ID); err != nil {
				return false, err
			}
			return true, wait(ctx)
		}, nil)
		return err
	}
	return nil
}

// lines counts the effect log's lines equal to want.
func (r *cancelRecorder) lines(t testing.TB, want string) int {
	n := 0
	for _, l := range readLines(t, r.file) {
		if l == want {
			n++
		}
	}
	return n
}

// checkCancelled asserts the task is cancelled with exactly one move to
// cancelled, and at most maxAttempts attempts, none after the cancel.
func checkCancelled(t *testing.T, e *env, id string, maxAttempts int) {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	task, err := e.L.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if task.State != ledger.Cancelled {
		t.Fatalf("task %s is %s, want cancelled", id, task.State)
	}
	evs, err := e.L.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	moves, afterCancel := 0, 0
	for _, ev := range evs {
		if moves > 0 && ev.To != "" && ev.To != ledger.Cancelled {
			afterCancel++
		}
		if ev.To == ledger.Cancelled {
			moves++
		}
	}
	if moves != 1 || afterCancel != 0 {
		t.Fatalf("task %s: %d moves to cancelled and %d moves after it, want 1 and 0: %+v", id, moves, afterCancel, evs)
	}
	as, err := e.L.Attempts(ctx, id)
	if err != nil || len(as) > maxAttempts {
		t.Fatalf("task %s: %d attempts (%v), want at most %d: %+v", id, len(as), err, maxAttempts, as)
	}
}

// noDeadLetters asserts the lanes hold no dead letters.
func noDeadLetters(t *testing.T, e *env, lanes ...string) {
	t.Helper()
	for _, l := range lanes {
		if s := stats(t, e.b, l); s.DeadLettered != 0 {
			t.Errorf("lane %s has %d dead letters after cancellations: %s", l, s.DeadLettered, statsString(s))
		}
	}
}

// TestE2ECancelQueued: a queued and a delayed task cancelled before any
// worker runs never start, nor does one awaiting review; their deliveries are acknowledged without a
// dead letter; a second cancel, and a cancel of an unknown task, are
// typed errors that change nothing.
func TestE2ECancelQueued(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", nil)
	r := newCancelRecorder(t)
	_ = switchyard.Register(e.srv, r.handler, nil)
	ctx := ctxFor(t, 60*time.Second)
	queued := e.enqueue(cancelArgs{Scenario: "quick"}, nil)
	delayed := e.enqueue(cancelArgs{Scenario: "quick"}, &switchyard.EnqueueOpts{Lane: "scheduled", Delay: 1500 * time.Millisecond})
	control := e.enqueue(cancelArgs{Scenario: "quick"}, nil)
	for _, id := range []string{queued, delayed} {
		if _, err := e.client.Cancel(ctx, id, "no longer wanted"); err != nil {
			t.Fatalf("Cancel(%s): %v", id, err)
		}
	}
	_, err := e.client.Cancel(ctx, queued, "again")
	var fe *switchyard.FinishedError
	if !errors.As(err, &fe) || fe.State != ledger.Cancelled {
		t.Fatalf("second Cancel: %v, want a FinishedError naming cancelled", err)
	}
	if _, err := e.client.Cancel(ctx, "no-such-task-"+broker.NewID(), "x"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Cancel of an unknown task: %v, want ErrNotFound", err)
	}
	e.start()
	if w, err := e.client.Wait(ctx, control); err != nil || w.State != ledger.Completed {
		t.Fatalf("the task not cancelled: %+v, %v", w, err)
	}
	// A task parked for review is cancelled too; approving it then fails
	// and changes nothing.
	review := e.enqueue(cancelArgs{Scenario: "review"}, nil)
	e.waitState(review, 30*time.Second, ledger.AwaitingReview)
	if _, err := e.client.Cancel(ctx, review, "refund withdrawn"); err != nil {
		t.Fatalf("Cancel of a task awaiting review: %v", err)
	}
	if err := e.client.Approve(ctx, review, "reviewer:ann", "too late"); err == nil {
		t.Fatal("Approve of a cancelled task succeeded")
	}
	checkCancelled(t, e, review, 1)
	if n := r.started.get(review); n != 1 {
		t.Errorf("the reviewed task ran %d times, want 1 (before it was parked)", n)
	}
	e.waitDrained("interactive", 30*time.Second)
	e.waitDrained("scheduled", 30*time.Second)
	for _, id := range []string{queued, delayed} {
		if n := r.started.get(id); n != 0 {
			t.Errorf("cancelled task %s started %d times", id, n)
		}
		checkCancelled(t, e, id, 0)
	}
	noDeadLetters(t, e, "interactive", "scheduled")
}

// TestE2ECancelRunning: a task running inside a Step and one running
// inside an Effect (after confirming another) are cancelled from outside:
// each handler's context ends with the cancel as its cause, each task
// ends cancelled exactly once, is not retried or dead-lettered, and the
// confirmed effect is not repeated.
func TestE2ECancelRunning(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", nil)
	r := newCancelRecorder(t)
	_ = switchyard.Register(e.srv, r.handler, nil)
	e.start()
	ctx := ctxFor(t, 90*time.Second)
	ids := map[string]string{}
	for _, sc := range []string{"step", "effect"} {
		ids[sc] = e.enqueue(cancelArgs{Scenario: sc}, nil)
	}
	for range ids {
		select {
		case <-r.inside:
		case <-ctx.Done():
			t.Fatal("the handlers did not start")
		}
	}
	for _, id := range ids {
		if _, err := e.client.Cancel(ctx, id, "user closed the tab"); err != nil {
			t.Fatalf("Cancel(%s): %v", id, err)
		}
	}
	for sc, id := range ids {
		eventually(t, 30*time.Second, func() string {
			if r.byCancel.get(id) != 1 {
				return "the " + sc + " handler's context was not cancelled by the cancel"
			}
			as, err := e.L.Attempts(ctx, id)
			if err != nil || len(as) != 1 || as[0].Outcome != "cancel" {
				return fmt.Sprintf("attempts of the %s task: %+v (%v), want one with outcome cancel", sc, as, err)
			}
			return ""
		})
	}
	// Long enough for a retry (base 20ms) or a lease-expiry redelivery
	// (lease 2s) to have started.
	time.Sleep(3 * time.Second)
	e.waitDrained("interactive", 30*time.Second)
	for sc, id := range ids {
		if n := r.started.get(id); n != 1 {
			t.Errorf("the %s task started %d times, want 1 (no retry)", sc, n)
		}
		checkCancelled(t, e, id, 1)
	}
	eid := ids["effect"]
	if n := r.lines(t, "first "+eid); n != 1 {
		t.Errorf("confirmed effect performed %d times, want 1", n)
	}
	effs, err := e.L.Effects(ctx, eid)
	if err != nil {
		t.Fatal(err)
	}
	for _, ef := range effs {
		want := ledger.EffectConfirmed
		if ef.Key == "second" {
			want = ledger.EffectUnknown // cut off by the cancel: never repeated, left for a person
		}
		if ef.State != want {
			t.Errorf("effect %s is %s, want %s", ef.Key, ef.State, want)
		}
	}
	noDeadLetters(t, e, "interactive")
	w, err := e.client.Wait(ctx, eid)
	if err != nil || w.State != ledger.Cancelled || !strings.Contains(w.Error, "user closed the tab") {
		t.Errorf("Wait = %+v, %v", w, err)
	}
}

// TestE2ECancelKilledWorker: the worker running a task (inside an
// Effect, after confirming another) is SIGKILLed right after the cancel;
// the task stays cancelled, its redelivery is acknowledged without
// running (no retry, no dead letter), and the confirmed effect is not
// repeated.
func TestE2ECancelKilledWorker(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", nil)
	file := filepath.Join(t.TempDir(), "effects.log")
	id := e.enqueue(cancelArgs{Scenario: "effect"}, nil)
	kill := startChildAt(t, h, e, "e2e-cancel", "CANCEL_INSIDE", file)
	ctx := ctxFor(t, 90*time.Second)
	if _, err := e.client.Cancel(ctx, id, "stop billing"); err != nil {
		t.Fatal(err)
	}
	kill()
	r := newCancelRecorder(t)
	r.file = file
	_ = switchyard.Register(e.srv, r.handler, nil)
	e.start()
	// The child's delivery comes back after its lease (2s) and is
	// acknowledged as the cancelled task's.
	e.waitDrained("interactive", 60*time.Second)
	if n := r.started.get(id); n != 0 {
		t.Errorf("the cancelled task ran again %d times after its worker was killed", n)
	}
	checkCancelled(t, e, id, 1)
	if n := r.lines(t, "first "+id); n != 1 {
		t.Errorf("confirmed effect performed %d times, want 1", n)
	}
	noDeadLetters(t, e, "interactive")
}

// TestE2EWaitResult: Client.Wait, begun while a worker process runs the
// task, returns the result once another worker finishes it after the
// first was SIGKILLed; a Wait bounded by its context returns that
// context's error; Result reads the stored value.
func TestE2EWaitResult(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", nil)
	file := filepath.Join(t.TempDir(), "computed.log")
	id := e.enqueue(e2eArgs{Scenario: "result"}, nil)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := e.client.Wait(short, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline: %v", err)
	}
	kill := startChildAt(t, h, e, "e2e-step", "STEP_DONE", file)
	type waited struct {
		r   *switchyard.Result
		err error
	}
	done := make(chan waited, 1)
	go func() {
		r, err := e.client.Wait(ctxFor(t, 90*time.Second), id)
		done <- waited{r, err}
	}()
	kill()
	_ = switchyard.RegisterWithResult(e.srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) (map[string]string, error) {
		out, err := switchyard.Step(ctx, "compute", func(ctx context.Context) (string, error) {
			return "recomputed", appendLine(file, "computed "+tk.ID)
		})
		return map[string]string{"step": out}, err
	}, nil)
	e.start()
	w := <-done
	if w.err != nil || w.r.State != ledger.Completed {
		t.Fatalf("Wait = %+v, %v", w.r, w.err)
	}
	var got map[string]string
	if err := w.r.Decode(&got); err != nil || got["step"] != "computed" {
		t.Fatalf("result %s (%v), want the step's stored output", w.r.Value, err)
	}
	if r, err := e.client.Result(ctxFor(t, 10*time.Second), id); err != nil || string(r.Value) != string(w.r.Value) {
		t.Fatalf("Result = %+v, %v", r, err)
	}
	if lines := readLines(t, file); len(lines) != 1 {
		t.Errorf("step computed %d times, want 1", len(lines))
	}
}

// crashChildCancel is the child of TestE2ECancelKilledWorker: a server
// running the cancellation handler that prints CANCEL_INSIDE once it is
// inside the second effect, then waits to be killed.
func crashChildCancel() int {
	ctx := context.Background()
	L, err := ledger.Open(ctx, os.Getenv(childLedgerEnv))
	if err != nil {
		fmt.Printf("ERROR ledger: %v\n", err)
		return 2
	}
	b, err := broker.Open(ctx, os.Getenv(childURLEnv), &broker.Options{Dedup: L})
	if err != nil {
		fmt.Printf("ERROR broker: %v\n", err)
		return 2
	}
	srv, err := switchyard.NewServer(b, &scheduler.Config{Ledger: L, Lease: 2 * time.Second, PollWait: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Printf("ERROR server: %v\n", err)
		return 2
	}
	r := &cancelRecorder{file: os.Getenv(childFileEnv), inside: make(chan string, 16)}
	_ = switchyard.Register(srv, r.handler, nil)
	if err := srv.Start(ctx); err != nil {
		fmt.Printf("ERROR start: %v\n", err)
		return 2
	}
	in := <-r.inside
	fmt.Println("CANCEL_INSIDE " + in)
	time.Sleep(time.Hour) // killed long before
	return 3
}
