package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// racers is how many goroutines each race case starts.
const racers = 20

// race runs fn in racers goroutines released together and returns once
// all have finished.
func race(fn func(i int)) {
	var start, done sync.WaitGroup
	start.Add(1)
	for i := 0; i < racers; i++ {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			fn(i)
		}()
	}
	start.Done()
	done.Wait()
}

// RaceCreate: racing Creates with one idempotency key create exactly one
// task, and every caller gets it.
func RaceCreate(t *testing.T, mk Maker) {
	l := mk(t)
	in := newTask(t)
	var (
		mu      sync.Mutex
		created int
		ids     = map[string]int{}
		errs    []error
	)
	race(func(i int) {
		c := *in
		got, ok, err := l.Create(ctx(t), &c)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		if ok {
			created++
		}
		ids[got.ID]++
	})
	if len(errs) > 0 {
		t.Fatalf("racing Create: %d errors, first %v", len(errs), errs[0])
	}
	if created != 1 || len(ids) != 1 {
		t.Fatalf("racing Create: created=%d, distinct ids %v; want 1 and 1", created, ids)
	}
}

// RaceTransition: racing guarded transitions out of one state: exactly
// one wins, the others get a ConflictError with the new state.
func RaceTransition(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	var (
		mu   sync.Mutex
		wins int
		errs []error
	)
	race(func(i int) {
		_, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, From: []ledger.State{ledger.Queued}, To: ledger.Running,
			Reason: "attempt_started", Actor: fmt.Sprintf("worker-%d", i), Attempt: 1})
		mu.Lock()
		defer mu.Unlock()
		var ce *ledger.ConflictError
		switch {
		case err == nil:
			wins++
		case errors.As(err, &ce) && ce.Current == ledger.Running:
		default:
			errs = append(errs, err)
		}
	})
	if len(errs) > 0 {
		t.Fatalf("racing Transition: %d unexpected errors, first %v", len(errs), errs[0])
	}
	if wins != 1 {
		t.Fatalf("racing Transition: %d winners, want 1", wins)
	}
	evs, err := l.Events(ctx(t), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("%d events after one winning transition, want 2", len(evs))
	}
}

// RacePutStep: racing PutSteps with different outputs store one, and
// every caller gets that one back.
func RacePutStep(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	var (
		mu   sync.Mutex
		outs = map[string]int{}
		errs []error
	)
	race(func(i int) {
		stored, err := l.PutStep(ctx(t), task.ID, "llm-call", []byte(fmt.Sprintf("output-%d", i)))
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		outs[string(stored)]++
	})
	if len(errs) > 0 {
		t.Fatalf("racing PutStep: %d errors, first %v", len(errs), errs[0])
	}
	if len(outs) != 1 {
		t.Fatalf("racing PutStep returned %d different outputs: %v", len(outs), outs)
	}
	got, ok, err := l.GetStep(ctx(t), task.ID, "llm-call")
	if err != nil || !ok || outs[string(got)] != racers {
		t.Fatalf("GetStep %q %v %v, racers got %v", got, ok, err, outs)
	}
}

// RaceBeginEffect: exactly one racing BeginEffect begins the effect.
func RaceBeginEffect(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	var (
		mu    sync.Mutex
		begun int
		errs  []error
	)
	race(func(i int) {
		_, b, err := l.BeginEffect(ctx(t), task.ID, "charge-card", i+1)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		}
		if b {
			begun++
		}
	})
	if len(errs) > 0 {
		t.Fatalf("racing BeginEffect: %d errors, first %v", len(errs), errs[0])
	}
	if begun != 1 {
		t.Fatalf("racing BeginEffect: %d began the effect, want 1", begun)
	}
}

// RaceClaim: exactly one racing dedup Claim wins; the others report its id.
func RaceClaim(t *testing.T, mk Maker) {
	l := mk(t)
	var (
		mu     sync.Mutex
		winner string
		wins   int
		seen   = map[string]int{}
		errs   []error
	)
	race(func(i int) {
		id := fmt.Sprintf("msg-%d", i)
		existing, dup, err := l.Claim(ctx(t), "batch", "acme", "race-key", id)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		if !dup {
			wins++
			winner = id
			return
		}
		seen[existing]++
	})
	if len(errs) > 0 {
		t.Fatalf("racing Claim: %d errors, first %v", len(errs), errs[0])
	}
	if wins != 1 || len(seen) != 1 || seen[winner] != racers-1 {
		t.Fatalf("racing Claim: %d winners (%s), duplicates reported %v", wins, winner, seen)
	}
}

// RaceAppendEvent: racing appends get distinct, gapless sequence numbers.
func RaceAppendEvent(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	var (
		mu   sync.Mutex
		errs []error
	)
	race(func(i int) {
		err := l.AppendEvent(ctx(t), ledger.Event{TaskID: task.ID, Reason: "note", Detail: fmt.Sprint(i)})
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	if len(errs) > 0 {
		t.Fatalf("racing AppendEvent: %d errors, first %v", len(errs), errs[0])
	}
	evs, err := l.Events(ctx(t), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != racers+1 {
		t.Fatalf("%d events, want %d", len(evs), racers+1)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has Seq %d", i, e.Seq)
		}
	}
}

// Cancelled: a cancelled context fails reads and writes with an error that
// is transient and still matches context.Canceled, and writes nothing.
func Cancelled(t *testing.T, mk Maker) {
	l := mk(t)
	c, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := l.Create(c, newTask(t))
	wantIs(t, "Create with a cancelled context", err, context.Canceled, broker.ErrTransient)
	_, err = l.List(c, ledger.Filter{})
	wantIs(t, "List with a cancelled context", err, context.Canceled, broker.ErrTransient)
	c2, cancel2 := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel2()
	<-c2.Done()
	_, err = l.Get(c2, "some-id")
	wantIs(t, "Get with an expired context", err, context.DeadlineExceeded, broker.ErrTransient)
	all, err := l.List(ctx(t), ledger.Filter{})
	if err != nil || len(all) != 0 {
		t.Fatalf("after cancelled calls: %d tasks, %v", len(all), err)
	}
}

// Closed: calls after Close fail with broker.ErrClosed; Close twice is
// fine.
func Closed(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, err := l.Get(ctx(t), task.ID)
	wantIs(t, "Get after Close", err, broker.ErrClosed)
	_, _, err = l.Create(ctx(t), newTask(t))
	wantIs(t, "Create after Close", err, broker.ErrClosed)
	_, err = l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, To: ledger.Running, Reason: "start"})
	wantIs(t, "Transition after Close", err, broker.ErrClosed)
	_, _, err = l.Claim(ctx(t), "batch", "acme", "k", "id")
	wantIs(t, "Claim after Close", err, broker.ErrClosed)
}

// RaceTakeover: racing takeovers of a running task by deliveries of the
// same newer attempt (IfAttemptBelow): exactly one wins.
func RaceTakeover(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	if _, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, To: ledger.Running, Reason: "attempt_started", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		wins int
		errs []error
	)
	race(func(i int) {
		_, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, From: []ledger.State{ledger.Running}, To: ledger.Running,
			Reason: "attempt_started", Actor: fmt.Sprintf("worker-%d", i), Attempt: 2, IfAttemptBelow: 2})
		mu.Lock()
		defer mu.Unlock()
		var ce *ledger.ConflictError
		switch {
		case err == nil:
			wins++
		case errors.As(err, &ce) && ce.Current == ledger.Running:
		default:
			errs = append(errs, err)
		}
	})
	if len(errs) > 0 {
		t.Fatalf("racing takeover: %d unexpected errors, first %v", len(errs), errs[0])
	}
	if wins != 1 {
		t.Fatalf("racing takeover: %d winners, want 1", wins)
	}
}
