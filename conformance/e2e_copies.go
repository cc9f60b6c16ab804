package conformance

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// overlaps records every handler call of one task, start to end, and
// counts the calls that began while another was still running.
type overlaps struct {
	mu       sync.Mutex
	running  int
	calls    int
	overlaps int
	first    time.Time
}

func (o *overlaps) enter() func() {
	o.mu.Lock()
	o.calls++
	if o.running > 0 {
		o.overlaps++
	}
	if o.first.IsZero() {
		o.first = time.Now()
	}
	o.running++
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		o.running--
		o.mu.Unlock()
	}
}

func (o *overlaps) get() (calls, overlaps int, first time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls, o.overlaps, o.first
}

// TestE2ECopyDuringEffect: copies of a task's message arrive while its
// handler sits inside a slow effect that outlives the lease (kept by
// heartbeats), the copies carrying higher delivery counts than the
// ledger's attempt (each was delivered and nacked before: a standard
// queue's duplicate, a re-run migration, a second publisher). The effect's
// reconcile function looks for a record the effect writes only as it ends,
// so it cannot see a live effect. The effect runs once, and no two handler
// calls of the task ever overlap: a copy waits for the live holder, then
// finds the task done (point 7).
func TestE2ECopyDuringEffect(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", &scheduler.Config{Lease: time.Second})
	var (
		ov      overlaps
		effects atomic.Int32
		written atomic.Bool // the outside world's record of the effect
	)
	_ = switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		defer ov.enter()()
		_, err := switchyard.Effect(ctx, "charge", func(ctx context.Context) (bool, error) {
			effects.Add(1)
			time.Sleep(3 * time.Second) // three leases: only heartbeats keep it
			written.Store(true)
			return true, nil
		}, &switchyard.EffectOpts{Reconcile: func(ctx context.Context) (bool, []byte, error) {
			return written.Load(), []byte("true"), nil
		}})
		return err
	}, nil)
	id := e.enqueue(e2eArgs{Scenario: "copy-during-effect"}, nil)
	// Three copies on another lane, delivered and nacked three times each
	// before the server starts: they come back with delivery count 4 while
	// the original (count 1) is inside its effect.
	body, _ := json.Marshal(e2eArgs{Scenario: "copy-during-effect"})
	for i := 0; i < 3; i++ {
		publish(t, e.b, &broker.Message{ID: id, Lane: "batch", Kind: "conformance.e2e", Body: body, MaxAttempts: 50})
	}
	want := 3 // a broker that deduplicates by ID natively (SQS FIFO) keeps one
	for round := 1; round <= 3; round++ {
		ds := receiveUntil(t, e.b, broker.ReceiveRequest{Lane: "batch", Max: want, Lease: 30 * time.Second, Wait: time.Second}, want, 15*time.Second)
		if len(ds) == 0 {
			t.Fatalf("round %d: no copy came back", round)
		}
		want = len(ds)
		delay := time.Duration(0)
		if round == 3 {
			delay = 1500 * time.Millisecond
		}
		for _, d := range ds {
			if err := e.b.Nack(ctxFor(t, 10*time.Second), d, delay); err != nil {
				t.Fatalf("nack a copy: %v", err)
			}
		}
	}
	e.start()
	task := e.waitState(id, 60*time.Second, ledger.Completed, ledger.Dead)
	if task.State != ledger.Completed {
		t.Fatalf("task ended %s: %s", task.State, task.LastError)
	}
	e.waitDrained("interactive", 60*time.Second)
	e.waitDrained("batch", 60*time.Second)
	calls, overlapping, _ := ov.get()
	if n := effects.Load(); n != 1 {
		t.Errorf("the effect ran %d times for one task and three copies, want 1", n)
	}
	if overlapping != 0 {
		t.Errorf("%d of %d handler calls began while another call of the same task was running, want 0", overlapping, calls)
	}
	effs, err := e.L.Effects(ctxFor(t, 10*time.Second), id)
	if err != nil || len(effs) != 1 || effs[0].State != ledger.EffectConfirmed {
		t.Errorf("effects %+v (%v), want one confirmed", effs, err)
	}
}

// TestE2ECopyDuringEffectCrash: a worker process sits inside an effect
// (done, not yet recorded) when a copy of its task's message is published
// and a second process is running. The second process must not start the
// task while the first is alive; once the first is SIGKILLed, its lease
// passes, the second takes the task over and reconciles the effect instead
// of repeating it (points 7, 10).
func TestE2ECopyDuringEffectCrash(t *testing.T, h *Harness) {
	e := newEnv(t, h, "", nil) // lease 2s, as the child's
	file := filepath.Join(t.TempDir(), "sent.log")
	id := e.enqueue(e2eArgs{Scenario: "copy-effect-crash"}, nil)
	kill := startChildAt(t, h, e, "e2e-effect", "EFFECT_DONE", file)
	var (
		ov         overlaps
		reconciled atomic.Int32
	)
	_ = switchyard.Register(e.srv, func(ctx context.Context, tk *switchyard.Task[e2eArgs]) error {
		defer ov.enter()()
		return sendEmailOnce(ctx, t, file, tk.ID, &reconciled)
	}, nil)
	e.start()
	body, _ := json.Marshal(e2eArgs{Scenario: "copy-effect-crash"})
	publish(t, e.b, &broker.Message{ID: id, Lane: "interactive", Kind: "conformance.e2e", Body: body, MaxAttempts: 50})
	// Three leases with the holder alive: the copy must wait.
	time.Sleep(6 * time.Second)
	if calls, _, _ := ov.get(); calls != 0 {
		t.Fatalf("the second process ran the task %d times while its holder was alive inside the effect", calls)
	}
	killedAt := time.Now()
	kill()
	task := e.waitState(id, 60*time.Second, ledger.Completed, ledger.Dead)
	if task.State != ledger.Completed {
		t.Fatalf("task ended %s: %s", task.State, task.LastError)
	}
	e.waitDrained("interactive", 60*time.Second)
	calls, overlapping, first := ov.get()
	if first.Before(killedAt) || overlapping != 0 {
		t.Errorf("handler calls %d, overlapping %d, first at %v (holder killed at %v): want none before the kill and none overlapping", calls, overlapping, first, killedAt)
	}
	if reconciled.Load() == 0 {
		t.Error("the effect left pending by the killed holder was not reconciled")
	}
	if lines := readLines(t, file); len(lines) != 1 {
		t.Errorf("effect performed %d times (%v), want 1", len(lines), lines)
	}
}
