package ledgertest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// BenchmarkTask measures the ledger's cost per task: Create, Transition to
// running, StartAttempt, two PutSteps, FinishAttempt and Transition to
// completed, the writes one successful task costs. With parallelism > 0 it
// runs that many goroutines per GOMAXPROCS (b.SetParallelism). It reports
// ns/task and tasks/s.
func BenchmarkTask(b *testing.B, l ledger.Ledger, parallelism int) {
	ctx := context.Background()
	var n atomic.Int64
	prefix := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	one := func() {
		i := n.Add(1)
		t, _, err := l.Create(ctx, &ledger.Task{Tenant: "bench", IdempotencyKey: fmt.Sprintf("%s-%d", prefix, i),
			Kind: "agent.step", Lane: "interactive", Args: []byte(`{"prompt":"summarise the ticket"}`), MaxAttempts: 5})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Transition(ctx, ledger.TransitionRequest{ID: t.ID, From: []ledger.State{ledger.Queued}, To: ledger.Running,
			Reason: "attempt_started", Actor: "bench", Attempt: 1}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := l.StartAttempt(ctx, ledger.Attempt{TaskID: t.ID, Number: 1, Worker: "bench", Start: start}); err != nil {
			b.Fatal(err)
		}
		if _, err := l.PutStep(ctx, t.ID, "plan", []byte(`{"steps":["read","answer"]}`)); err != nil {
			b.Fatal(err)
		}
		if _, err := l.PutStep(ctx, t.ID, "answer", []byte(`{"text":"done"}`)); err != nil {
			b.Fatal(err)
		}
		if err := l.FinishAttempt(ctx, ledger.Attempt{TaskID: t.ID, Number: 1, Duration: time.Since(start), Outcome: "ok"}); err != nil {
			b.Fatal(err)
		}
		if _, err := l.Transition(ctx, ledger.TransitionRequest{ID: t.ID, From: []ledger.State{ledger.Running}, To: ledger.Completed,
			Reason: "completed", Actor: "bench", Result: []byte(`{"ok":true}`)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if parallelism > 0 {
		b.SetParallelism(parallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				one()
			}
		})
	} else {
		for b.Loop() {
			one()
		}
	}
	el := time.Since(start)
	b.ReportMetric(float64(el.Nanoseconds())/float64(b.N), "ns/task")
	b.ReportMetric(float64(b.N)/el.Seconds(), "tasks/s")
}
