package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/postgres"
)

// TestGroupCommit_MixedOutcomes: many goroutines write at once, so writes
// share groups; every tenth write fails on the server (EndRun of a task
// that does not exist: a foreign-key error rolls its group back). Every
// other write still lands exactly once, every failing one gets its own
// ErrNotFound, and the writer reports groups, and splits.
func TestGroupCommit_MixedOutcomes(t *testing.T) {
	t.Parallel()
	s := openFresh(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 400
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		ids  []string
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if i%10 == 9 {
				_, err := s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: broker.NewID(), Number: 1, Outcome: "ok"}})
				if !errors.Is(err, ledger.ErrNotFound) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("EndRun of an unknown task: %v, want ErrNotFound", err))
					mu.Unlock()
				}
				return
			}
			tk, created, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "interactive", IdempotencyKey: fmt.Sprintf("g-%d", i)})
			if err == nil && created {
				_, err = s.BeginRun(ctx, ledger.RunStart{ID: tk.ID, Attempt: 1, Lease: time.Minute})
			}
			if err == nil {
				_, err = s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: tk.ID, Number: 1, Outcome: "ok"},
					Transition: &ledger.TransitionRequest{ID: tk.ID, From: []ledger.State{ledger.Running}, To: ledger.Completed, Reason: "completed", IfAttemptBelow: 2}})
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ids = append(ids, tk.ID)
		}(i)
	}
	wg.Wait()
	for _, err := range errs[:min(len(errs), 5)] {
		t.Error(err)
	}
	if len(ids) != n-n/10 {
		t.Fatalf("%d tasks completed, want %d", len(ids), n-n/10)
	}
	for _, id := range ids {
		as, err := s.Attempts(ctx, id)
		if err != nil || len(as) != 1 || as[0].Outcome != "ok" {
			t.Fatalf("task %s attempts %+v (%v), want one, ok", id, as, err)
		}
		evs, err := s.Events(ctx, id)
		if err != nil || len(evs) != 3 {
			t.Fatalf("task %s events %+v (%v), want enqueued, attempt_started, completed once each", id, evs, err)
		}
	}
	groups, writes, splits := s.GroupStats()
	t.Logf("group commit: %d writes in %d groups, %d split", writes, groups, splits)
	if writes < int64(n) || groups == 0 {
		t.Errorf("group stats %d writes in %d groups: the writes did not go through the group writer", writes, groups)
	}
}

// TestGroupCommit_Off: group_commit=false writes directly.
func TestGroupCommit_Off(t *testing.T) {
	t.Parallel()
	dsn, schema := freshSchema(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	dsn += sep + "schema=" + schema
	L, err := ledger.Open(context.Background(), dsn+"&group_commit=false")
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()
	if _, _, err := L.Create(context.Background(), &ledger.Task{Kind: "k", Lane: "interactive"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.Open(context.Background(), dsn+"&group_commit=maybe"); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("group_commit=maybe: %v, want ErrInvalid", err)
	}
}

// TestGroupWait_DSN: group_wait takes a duration (0: no wait) and refuses
// anything else.
func TestGroupWait_DSN(t *testing.T) {
	t.Parallel()
	dsn, schema := freshSchema(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	dsn += sep + "schema=" + schema
	for _, w := range []string{"0", "500us", "5ms"} {
		L, err := ledger.Open(context.Background(), dsn+"&group_wait="+w)
		if err != nil {
			t.Fatalf("group_wait=%s: %v", w, err)
		}
		if _, _, err := L.Create(context.Background(), &ledger.Task{Kind: "k", Lane: "interactive"}); err != nil {
			t.Errorf("group_wait=%s: %v", w, err)
		}
		L.Close()
	}
	for _, w := range []string{"soon", "-1ms"} {
		if _, err := ledger.Open(context.Background(), dsn+"&group_wait="+w); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("group_wait=%s: %v, want ErrInvalid", w, err)
		}
	}
}

// TestGroupHold_Store: with every lone write held (GroupHoldRate 100:
// the gap estimate never falls below its bound), many goroutines each
// run tasks through Create, BeginRun, PutStep and EndRun. Every write
// lands once and in its caller's order: each task is completed with one
// attempt, its step, and its events in order; writes were held.
func TestGroupHold_Store(t *testing.T) {
	t.Parallel()
	s := openFresh(t, &postgres.Options{GroupHold: 2 * time.Millisecond, GroupHoldRate: 100})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const goroutines, each = 16, 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		ids  []string
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tk, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "interactive", IdempotencyKey: fmt.Sprintf("h-%d-%d", g, i)})
				if err == nil {
					_, err = s.BeginRun(ctx, ledger.RunStart{ID: tk.ID, Attempt: 1, Lease: time.Minute})
				}
				if err == nil {
					_, err = s.PutStep(ctx, tk.ID, "s", []byte(tk.ID))
				}
				if err == nil {
					_, err = s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: tk.ID, Number: 1, Outcome: "ok"},
						Transition: &ledger.TransitionRequest{ID: tk.ID, From: []ledger.State{ledger.Running}, To: ledger.Completed, Reason: "completed", IfAttemptBelow: 2}})
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ids = append(ids, tk.ID)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs[:min(len(errs), 5)] {
		t.Error(err)
	}
	if len(ids) != goroutines*each {
		t.Fatalf("%d tasks completed, want %d", len(ids), goroutines*each)
	}
	for _, id := range ids {
		tk, err := s.Get(ctx, id)
		if err != nil || tk.State != ledger.Completed {
			t.Fatalf("task %s: %+v (%v), want completed", id, tk, err)
		}
		if out, ok, err := s.GetStep(ctx, id, "s"); err != nil || !ok || string(out) != id {
			t.Fatalf("task %s step: %q %v (%v), want its ID", id, out, ok, err)
		}
		as, err := s.Attempts(ctx, id)
		if err != nil || len(as) != 1 || as[0].Outcome != "ok" {
			t.Fatalf("task %s attempts %+v (%v), want one, ok", id, as, err)
		}
		evs, err := s.Events(ctx, id)
		if err != nil || len(evs) != 3 || evs[2].To != ledger.Completed {
			t.Fatalf("task %s events %+v (%v), want enqueued, attempt_started, completed in order", id, evs, err)
		}
	}
	if s.GroupHolds() == 0 {
		t.Error("no group started after a hold")
	}
}

// TestGroupHold_Withdrawn: a write held for company whose caller's
// context ends is withdrawn: it never runs, even when a group starts
// later with the writes queued after it.
func TestGroupHold_Withdrawn(t *testing.T) {
	t.Parallel()
	s := openFresh(t, &postgres.Options{GroupHold: time.Hour, GroupHoldRate: 100})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	_, _, err := s.Create(short, &ledger.Task{Kind: "k", Lane: "interactive", IdempotencyKey: "withdrawn"})
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held Create with its context ended: %v, want DeadlineExceeded", err)
	}
	// The withdrawn write is still queued: with 63 others the queue holds
	// a full group, which starts (each is held until then).
	var wg sync.WaitGroup
	errs := make([]error, 63)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = s.Create(ctx, &ledger.Task{Kind: "k", Lane: "interactive", IdempotencyKey: fmt.Sprintf("w-%d", i)})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Create %d: %v", i, err)
		}
	}
	if tk, err := s.GetByKey(ctx, "", "withdrawn"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("withdrawn Create: task %+v (%v), want ErrNotFound", tk, err)
	}
}

// TestGroupHold_DSN: group_hold takes a duration (0: never),
// group_hold_rate a positive number.
func TestGroupHold_DSN(t *testing.T) {
	t.Parallel()
	dsn, schema := freshSchema(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	dsn += sep + "schema=" + schema
	for _, p := range []string{"group_hold=0", "group_hold=300us", "group_hold=2ms&group_hold_rate=1000"} {
		L, err := ledger.Open(context.Background(), dsn+"&"+p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if _, _, err := L.Create(context.Background(), &ledger.Task{Kind: "k", Lane: "interactive"}); err != nil {
			t.Errorf("%s: %v", p, err)
		}
		L.Close()
	}
	for _, p := range []string{"group_hold=soon", "group_hold=-1ms", "group_hold_rate=0", "group_hold_rate=-5", "group_hold_rate=fast"} {
		if _, err := ledger.Open(context.Background(), dsn+"&"+p); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", p, err)
		}
	}
}
