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
