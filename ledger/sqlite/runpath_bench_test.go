package sqlite_test

import (
	"context"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
)

// BenchmarkRunPath is the ledger's share of the runtime's bulk path on the
// store alone (issue 15): tasks recorded with CreateMany in chunks of
// 1,000 by one goroutine while 64 goroutines run each one as a Server
// does — BeginRun, then EndRun with the attempt and the move to
// completed — in a file at synchronous=full. b.N counts tasks; it reports
// the process's CPU (user + system) per task and tasks/s.
//
//	go test ./ledger/sqlite/ -run '^$' -bench RunPath -benchtime 20000x
func BenchmarkRunPath(b *testing.B) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "ledger.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const chunk, workers = 1000, 64
	ids := make(chan string, 4*chunk)
	b.ResetTimer()
	cpu0, start := processCPU(b), time.Now()
	go func() {
		defer close(ids)
		for done := 0; done < b.N; {
			n := min(chunk, b.N-done)
			ts := make([]*ledger.Task, n)
			for i := range ts {
				ts[i] = &ledger.Task{Kind: "bench.noop", Lane: "default", Args: []byte(`{"t":1764669600000000000}`), MaxAttempts: 25}
			}
			rs, err := s.CreateMany(ctx, ts)
			if err != nil {
				b.Error(err)
				return
			}
			for _, r := range rs {
				if r.Err != nil {
					b.Error(r.Err)
					return
				}
				ids <- r.Task.ID
			}
			done += n
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := "bench-" + string(rune('a'+w%26))
			for id := range ids {
				begun := time.Now()
				t, err := s.BeginRun(ctx, ledger.RunStart{ID: id, Attempt: 1, Worker: worker, Start: begun, Lease: 30 * time.Second})
				if err != nil {
					b.Error(err)
					return
				}
				a := ledger.Attempt{TaskID: id, Number: t.Attempt, Worker: worker, Start: begun, Duration: time.Since(begun)}
				if _, err := s.EndRun(ctx, ledger.RunEnd{Attempt: a, Transition: &ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running},
					To: ledger.Completed, Reason: "succeeded", Actor: worker, Result: []byte(`null`), IfAttemptBelow: t.Attempt + 1}}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el, cpu := time.Since(start), processCPU(b)-cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/task")
	b.ReportMetric(float64(b.N)/el.Seconds(), "tasks/s")
	txns, writes := sqlite.GroupStats(s)
	b.ReportMetric(float64(writes)/float64(max(txns, 1)), "writes/txn")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
