package sqlite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// TestGroup_LateJoinSkipsAbandoned: a write whose caller gave up (its
// context ended) while the write waited in the queue is not taken into a
// running group as a late join: its caller was told "not written", and it
// is not written; a caller that gives up after its write was taken waits
// for the commit and hears the truth.
func TestGroup_LateJoinSkipsAbandoned(t *testing.T) {
	t.Parallel()
	s := heldWriter(t)
	s.reqs = make(chan *writeReq, 8) // a queue the test can see
	bg := context.Background()
	waitQueued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); len(s.reqs) < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d writes queued", len(s.reqs), n)
			}
		}
	}
	first := make(chan error, 1)
	go func() {
		_, _, err := s.Create(bg, &ledger.Task{ID: "first", Kind: "k", Lane: "l"})
		first <- err
	}()
	waitQueued(1)
	g := []*writeReq{<-s.reqs}

	// Queued after the group formed, then abandoned before it commits.
	actx, acancel := context.WithCancel(bg)
	abandoned := make(chan error, 1)
	go func() {
		_, _, err := s.Create(actx, &ledger.Task{ID: "abandoned", Kind: "k", Lane: "l"})
		abandoned <- err
	}()
	waitQueued(1)
	acancel()
	if err := <-abandoned; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned write: %v, want context.Canceled", err)
	}
	// Queued and kept.
	kept := make(chan error, 1)
	go func() {
		_, _, err := s.Create(bg, &ledger.Task{ID: "kept", Kind: "k", Lane: "l"})
		kept <- err
	}()
	waitQueued(2)
	joins0 := s.lateJoins.Load()
	s.runGroup(g)
	if j := s.lateJoins.Load() - joins0; j != 1 {
		t.Errorf("%d late joins, want 1 (the abandoned write is not one)", j)
	}
	if err := <-first; err != nil {
		t.Fatalf("first: %v", err)
	}
	if err := <-kept; err != nil {
		t.Fatalf("kept: %v", err)
	}
	for id, want := range map[string]bool{"first": true, "kept": true, "abandoned": false} {
		_, err := s.Get(bg, id)
		if got := err == nil; got != want {
			t.Errorf("%s stored = %v (%v), want %v", id, got, err, want)
		}
	}
}

// TestWriter_CancelledCallersUnderLateJoins: many callers write through
// the running writer at once (groups with late joins), a third of them
// with a context that ends at a random moment: queued, taken, or already
// answered. Whatever the moment, a call that returned nil is stored, and
// one that returned its context's error is not ("a context error always
// means not written"). Each caller writes twice to the same task (a
// Create, then its BeginRun), so late joins also carry writes of a task
// an earlier write of the group created.
func TestWriter_CancelledCallersUnderLateJoins(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	bg := context.Background()
	const callers, rounds = 16, 40
	type result struct {
		id               string
		created, begun   error
		cancelled, timed bool
	}
	res := make(chan result, callers*rounds)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for i := range rounds {
				r := result{id: fmt.Sprintf("c%d-%d", c, i)}
				ctx, cancel := bg, context.CancelFunc(func() {})
				if rng.IntN(3) == 0 {
					ctx, cancel = context.WithTimeout(bg, time.Duration(rng.IntN(3000))*time.Microsecond)
					r.timed = true
				}
				_, _, r.created = s.Create(ctx, &ledger.Task{ID: r.id, Kind: "k", Lane: "l", MaxAttempts: 3})
				if r.created == nil {
					_, r.begun = s.BeginRun(ctx, ledger.RunStart{ID: r.id, Attempt: 1, Worker: "w", Lease: time.Minute})
				}
				cancel()
				res <- r
			}
		}()
	}
	wg.Wait()
	close(res)
	var ctxErrs int
	isCtx := func(err error) bool {
		return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
	}
	for r := range res {
		got, gerr := s.Get(bg, r.id)
		switch {
		case r.created == nil && gerr != nil:
			t.Errorf("%s: Create returned nil, but the task is not stored: %v", r.id, gerr)
		case isCtx(r.created):
			ctxErrs++
			if gerr == nil {
				t.Errorf("%s: Create returned %v, but the task is stored", r.id, r.created)
			}
		case r.created != nil:
			t.Errorf("%s: Create: %v", r.id, r.created)
		}
		if r.created != nil || gerr != nil {
			continue
		}
		switch {
		case r.begun == nil && got.State != ledger.Running:
			t.Errorf("%s: BeginRun returned nil, but the task is %s", r.id, got.State)
		case isCtx(r.begun):
			ctxErrs++
			if got.State != ledger.Queued {
				t.Errorf("%s: BeginRun returned %v, but the task is %s", r.id, r.begun, got.State)
			}
		case r.begun != nil:
			t.Errorf("%s: BeginRun: %v", r.id, r.begun)
		}
	}
	t.Logf("%d calls ended by their context; %d late joins", ctxErrs, s.lateJoins.Load())
}
