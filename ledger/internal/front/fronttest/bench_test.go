package fronttest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/front"
	"github.com/switchyard-dev/switchyard/ledger/internal/front/fronttest"
)

// BenchmarkFront_HotPath measures what the front adds to one task's hot
// path (Create, BeginRun, EndRun to completed) over a backend that does
// nothing: its validation (which each store ran itself before), the
// closed check, the Op lookup and the interface call.
func BenchmarkFront_HotPath(b *testing.B) {
	var f front.Front
	var closed atomic.Bool
	front.Init(&f, "bench", new(discard), &closed, time.Now)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		f.Create(ctx, &ledger.Task{ID: "t1", Kind: "k", Lane: "interactive"})
		f.BeginRun(ctx, ledger.RunStart{ID: "t1", Attempt: 1, Lease: time.Minute})
		f.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: "t1", Number: 1},
			Transition: &ledger.TransitionRequest{ID: "t1", To: ledger.Completed, Reason: "done", From: []ledger.State{ledger.Running}}})
	}
}

// discard is a Stub that records nothing.
type discard struct{ fronttest.Stub }

func (*discard) Create(context.Context, string, *ledger.Task) (*ledger.Task, bool, error) {
	return nil, false, nil
}

func (*discard) BeginRun(context.Context, string, ledger.RunStart) (*ledger.Task, error) {
	return nil, nil
}

func (*discard) EndRun(context.Context, string, ledger.RunEnd, []ledger.State) (*ledger.Task, error) {
	return nil, nil
}
