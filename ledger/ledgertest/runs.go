package ledgertest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// BeginRun: a queued task starts with its attempt recorded, its lease set
// and an attempt_started event, in one call; a retry_wait task starts at
// the next attempt; finished, parked and unknown tasks are refused.
func BeginRun(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	before := time.Now()
	got, err := l.BeginRun(ctx(t), ledger.RunStart{ID: task.ID, Attempt: 1, Worker: "w1", Lease: time.Minute})
	if err != nil {
		t.Fatalf("BeginRun: %v", err)
	}
	if got.State != ledger.Running || got.Attempt != 1 {
		t.Fatalf("after BeginRun: %s attempt %d, want running attempt 1", got.State, got.Attempt)
	}
	if got.LeaseUntil.Before(before.Add(50*time.Second)) || got.LeaseUntil.After(time.Now().Add(70*time.Second)) {
		t.Errorf("lease until %v, want about a minute from %v", got.LeaseUntil, before)
	}
	if g, _ := l.Get(ctx(t), task.ID); g == nil || !g.LeaseUntil.Equal(got.LeaseUntil) {
		t.Errorf("Get's LeaseUntil %v, want %v", g, got.LeaseUntil)
	}
	as, err := l.Attempts(ctx(t), task.ID)
	if err != nil || len(as) != 1 || as[0].Number != 1 || as[0].Worker != "w1" || as[0].Start.IsZero() {
		t.Fatalf("attempts %+v (%v), want attempt 1 begun by w1", as, err)
	}
	evs, err := l.Events(ctx(t), task.ID)
	if err != nil || len(evs) != 2 || evs[1].Reason != "attempt_started" || evs[1].From != ledger.Queued || evs[1].To != ledger.Running || evs[1].Actor != "w1" {
		t.Fatalf("events %+v (%v), want enqueued then attempt_started by w1", evs, err)
	}

	// Ended with a retry: the next run is attempt 2 whatever the delivery says.
	msg := "boom"
	if _, err := l.EndRun(ctx(t), ledger.RunEnd{Attempt: ledger.Attempt{TaskID: task.ID, Number: 1, Outcome: "retry", Error: msg},
		Transition: &ledger.TransitionRequest{ID: task.ID, From: []ledger.State{ledger.Running}, To: ledger.RetryWait, Reason: "retry", LastError: &msg, IfAttemptBelow: 2}}); err != nil {
		t.Fatalf("EndRun: %v", err)
	}
	got, err = l.BeginRun(ctx(t), ledger.RunStart{ID: task.ID, Attempt: 1, Worker: "w2", Lease: time.Minute})
	if err != nil || got.Attempt != 2 {
		t.Fatalf("BeginRun after a retry: %+v %v, want attempt 2", got, err)
	}
	as, err = l.Attempts(ctx(t), task.ID)
	if err != nil || len(as) != 2 || as[0].Number != 1 || as[0].Worker != "w1" || as[0].Outcome != "retry" || as[0].Error != msg ||
		as[1].Number != 2 || as[1].Worker != "w2" || as[1].Outcome != "" || as[1].Start.IsZero() {
		t.Fatalf("attempts after the second BeginRun %+v (%v), want 1 (w1, retry) and 2 (w2, running)", as, err)
	}

	// Refusals carry the task as it is.
	done := mustCreate(t, l, newTask(t))
	mustTransition(t, l, done.ID, ledger.Cancelled, "cancelled")
	cur, err := l.BeginRun(ctx(t), ledger.RunStart{ID: done.ID, Attempt: 1, Lease: time.Minute})
	var ce *ledger.ConflictError
	if !errors.Is(err, ledger.ErrConflict) || !errors.As(err, &ce) || ce.Current != ledger.Cancelled || cur == nil || cur.State != ledger.Cancelled {
		t.Fatalf("BeginRun on a cancelled task: %+v %v, want ErrConflict with the task", cur, err)
	}
	if _, err := l.BeginRun(ctx(t), ledger.RunStart{ID: broker.NewID(), Attempt: 1, Lease: time.Minute}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("BeginRun on an unknown task: %v, want ErrNotFound", err)
	}
	for _, bad := range []ledger.RunStart{
		{ID: "", Attempt: 1, Lease: time.Minute},
		{ID: task.ID, Attempt: -1, Lease: time.Minute},
		{ID: task.ID, Attempt: 1 << 40, Lease: time.Minute},
		{ID: task.ID, Attempt: 1},
		{ID: task.ID, Attempt: 1, Lease: -time.Second},
		{ID: task.ID, Attempt: 1, Lease: 1000 * time.Hour},
		{ID: "bad\x00id", Attempt: 1, Lease: time.Minute},
	} {
		if _, err := l.BeginRun(ctx(t), bad); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("BeginRun(%+v): %v, want ErrInvalid", bad, err)
		}
	}
}

// BeginRunLease: a running task whose holder's lease is live is never
// taken over, whatever attempt count a copy of its message carries; once
// the lease has passed, the next delivery takes it over at a newer attempt.
func BeginRunLease(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	if _, err := l.BeginRun(ctx(t), ledger.RunStart{ID: task.ID, Attempt: 1, Worker: "w1", Lease: 400 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	cur, err := l.BeginRun(ctx(t), ledger.RunStart{ID: task.ID, Attempt: 7, Worker: "w2", Lease: time.Minute})
	var ce *ledger.ConflictError
	if !errors.As(err, &ce) || ce.Current != ledger.Running || ce.LeaseUntil.IsZero() || cur == nil || cur.Attempt != 1 {
		t.Fatalf("a copy with a higher count while the holder's lease is live: %+v %v, want ErrConflict (running, with the lease)", cur, err)
	}
	// The holder renews: still refused after the first lease would have ended.
	for i := 0; i < 4; i++ {
		time.Sleep(150 * time.Millisecond)
		lost, err := l.RenewLeases(ctx(t), []ledger.Lease{{ID: task.ID, Attempt: 1}}, 400*time.Millisecond)
		if err != nil || len(lost) != 0 {
			t.Fatalf("RenewLeases: lost %v, %v", lost, err)
		}
	}
	if _, err := l.BeginRun(ctx(t), ledger.RunStart{ID: task.ID, Attempt: 7, Worker: "w2", Lease: time.Minute}); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("takeover while the holder renews: %v, want ErrConflict", err)
	}
	// The holder stops renewing (it crashed): after its lease the copy takes over.
	time.Sleep(500 * time.Millisecond)
	got, err := l.BeginRun(ctx(t), ledger.RunStart{ID: task.ID, Attempt: 2, Worker: "w2", Lease: time.Minute})
	if err != nil || got.Attempt != 2 || got.State != ledger.Running {
		t.Fatalf("takeover after the lease passed: %+v %v, want running attempt 2", got, err)
	}
	evs, _ := l.Events(ctx(t), task.ID)
	if last := evs[len(evs)-1]; last.Reason != "lease_expired" || last.From != ledger.Running || last.Actor != "w2" {
		t.Errorf("takeover event %+v, want lease_expired by w2", last)
	}
	// The gone holder's attempt stays recorded as begun, beside the new one.
	if as, err := l.Attempts(ctx(t), task.ID); err != nil || len(as) != 2 || as[0].Number != 1 || as[0].Worker != "w1" || as[0].Start.IsZero() ||
		as[0].Outcome != "" || as[1].Number != 2 || as[1].Worker != "w2" {
		t.Errorf("attempts after the takeover %+v (%v), want 1 (w1, begun) and 2 (w2)", as, err)
	}
	// The old holder's renewal now reports the run lost, and its end cannot
	// settle over the new holder; its attempt is still recorded.
	lost, err := l.RenewLeases(ctx(t), []ledger.Lease{{ID: task.ID, Attempt: 1}, {ID: task.ID, Attempt: 2}}, time.Minute)
	if err != nil || len(lost) != 1 || lost[0] != task.ID {
		t.Fatalf("RenewLeases of the old and new runs: lost %v, %v; want the old one lost", lost, err)
	}
	cur, err = l.EndRun(ctx(t), ledger.RunEnd{Attempt: ledger.Attempt{TaskID: task.ID, Number: 1, Outcome: "ok"},
		Transition: &ledger.TransitionRequest{ID: task.ID, From: []ledger.State{ledger.Running}, To: ledger.Completed, Reason: "completed", IfAttemptBelow: 2}})
	if !errors.Is(err, ledger.ErrConflict) || cur == nil || cur.State != ledger.Running || cur.Attempt != 2 {
		t.Fatalf("the old holder's EndRun: %+v %v, want ErrConflict with the task running at attempt 2", cur, err)
	}
	as, _ := l.Attempts(ctx(t), task.ID)
	if len(as) != 2 || as[0].Outcome != "ok" {
		t.Errorf("attempts %+v, want the old holder's outcome recorded beside attempt 2", as)
	}
	// The new holder finishes: completed, lease gone.
	got, err = l.EndRun(ctx(t), ledger.RunEnd{Attempt: ledger.Attempt{TaskID: task.ID, Number: 2, Outcome: "ok", Duration: time.Millisecond},
		Transition: &ledger.TransitionRequest{ID: task.ID, From: []ledger.State{ledger.Running}, To: ledger.Completed, Reason: "completed", Result: []byte("r"), IfAttemptBelow: 3}})
	if err != nil || got.State != ledger.Completed || !got.LeaseUntil.IsZero() || string(got.Result) != "r" {
		t.Fatalf("EndRun: %+v %v, want completed with the result and no lease", got, err)
	}
}

// EndRunRelease: an EndRun without a transition records the attempt and
// gives the lease up, so the next delivery takes the task over at once.
func EndRunRelease(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	if _, err := l.BeginRun(ctx(t), ledger.RunStart{ID: task.ID, Attempt: 1, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got, err := l.EndRun(ctx(t), ledger.RunEnd{Attempt: ledger.Attempt{TaskID: task.ID, Number: 1, Outcome: "lease_lost"}}); err != nil || got != nil {
		t.Fatalf("EndRun without a transition: %+v %v", got, err)
	}
	got, err := l.BeginRun(ctx(t), ledger.RunStart{ID: task.ID, Attempt: 1, Lease: time.Hour})
	if err != nil || got.Attempt != 2 {
		t.Fatalf("BeginRun after the lease was given up: %+v %v, want attempt 2 at once", got, err)
	}
	if _, err := l.EndRun(ctx(t), ledger.RunEnd{Attempt: ledger.Attempt{TaskID: broker.NewID(), Number: 1}}); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("EndRun of an unknown task: %v, want ErrNotFound", err)
	}
	if _, err := l.EndRun(ctx(t), ledger.RunEnd{Attempt: ledger.Attempt{TaskID: task.ID, Number: 2},
		Transition: &ledger.TransitionRequest{ID: broker.NewID(), To: ledger.Completed, Reason: "completed"}}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("EndRun whose transition names another task: %v, want ErrInvalid", err)
	}
	if _, err := l.RenewLeases(ctx(t), []ledger.Lease{{ID: task.ID, Attempt: 0}}, time.Minute); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("RenewLeases with attempt 0: %v, want ErrInvalid", err)
	}
}

// RaceBeginRun: many deliveries of one queued task begin at once; exactly
// one runs, the others find it running under a live lease.
func RaceBeginRun(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	var (
		mu   sync.Mutex
		wins int
		errs []error
	)
	race(func(i int) {
		_, err := l.BeginRun(ctx(t), ledger.RunStart{ID: task.ID, Attempt: 1 + i%3, Worker: fmt.Sprintf("w%d", i), Lease: time.Minute})
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
		t.Fatalf("racing BeginRun: %d unexpected errors, first %v", len(errs), errs[0])
	}
	if wins != 1 {
		t.Fatalf("racing BeginRun: %d runs started, want 1", wins)
	}
}
