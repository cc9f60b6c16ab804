package postgres_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
)

// BenchmarkWriteLatency measures what the group writer adds to a task's
// path at a given load: tasks arrive at a fixed rate (open loop, one
// goroutine each), and each runs Create, BeginRun and EndRun to completed
// as the runtime does. It reports the p50 and p99 from the task's arrival
// to BeginRun's return (Create + BeginRun: the ledger's share of enqueue →
// start) and of EndRun, and the CPU of the run's own PostgreSQL backends
// per task (as TaskCost). SWITCHYARD_BENCH_LEDGER_PARAMS is appended to
// the ledger DSN (e.g. group_wait=0).
//
//	go test ./ledger/postgres/ -run '^$' -bench WriteLatency -benchtime 2000x
func BenchmarkWriteLatency(b *testing.B) {
	for _, rate := range []int{200, 1000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) { benchWriteLatency(b, rate) })
	}
}

func benchWriteLatency(b *testing.B, rate int) {
	ctx := context.Background()
	dsn, schema := freshSchema(b)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	full := dsn + sep + "schema=" + schema + "&application_name=" + schema
	if p := os.Getenv("SWITCHYARD_BENCH_LEDGER_PARAMS"); p != "" {
		full += "&" + p
	}
	s, err := ledger.Open(ctx, full)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for range 8 {
		s.Get(ctx, "warm-up")
	}
	var (
		mu         sync.Mutex
		start, end []time.Duration
		wg         sync.WaitGroup
		interval   = time.Second / time.Duration(rate)
		cpu0       = backendCPU(ctx, b, conn, schema)
		t0         = time.Now()
	)
	b.ResetTimer()
	for i := range b.N {
		if d := time.Until(t0.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := time.Now()
			tk, _, err := s.Create(ctx, &ledger.Task{Kind: "bench", Lane: "batch", Args: []byte(`{"n":1}`)})
			if err != nil {
				b.Error(err)
				return
			}
			r, err := s.BeginRun(ctx, ledger.RunStart{ID: tk.ID, Attempt: 1, Worker: "w", Lease: time.Minute})
			if err != nil {
				b.Error(err)
				return
			}
			began := time.Now()
			if _, err := s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: tk.ID, Number: r.Attempt, Outcome: "ok", Duration: time.Millisecond},
				Transition: &ledger.TransitionRequest{ID: tk.ID, From: []ledger.State{ledger.Running}, To: ledger.Completed, Reason: "succeeded", Attempt: r.Attempt}}); err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			start = append(start, began.Sub(at))
			end = append(end, time.Since(began))
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := backendCPU(ctx, b, conn, schema) - cpu0
	pct := func(ds []time.Duration, p float64) float64 {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return float64(ds[min(len(ds)-1, int(p*float64(len(ds))))]) / 1e6
	}
	b.ReportMetric(pct(start, 0.5), "start-p50-ms")
	b.ReportMetric(pct(start, 0.99), "start-p99-ms")
	b.ReportMetric(pct(end, 0.5), "end-p50-ms")
	b.ReportMetric(pct(end, 0.99), "end-p99-ms")
	b.ReportMetric(cpu*1e6/float64(b.N), "pg-cpu-µs/task")
}
