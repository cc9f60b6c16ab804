package integration_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/runtimebench"
)

// BenchmarkRuntime_PublicAPI is `switchyard bench runtime` as a
// benchmark (issue 15): the adapter loop, the runtime with the ledger off
// and on, and with one Step and one Effect per task, one sub-benchmark
// each; b.N counts tasks. The broker is a fresh embedded file unless
// SWITCHYARD_BENCH_BROKER names one; the ledger is a fresh SQLite file
// unless SWITCHYARD_BENCH_LEDGER names a DSN (a fresh schema or file is
// derived from it per run).
//
//	go test ./internal/integration -run '^$' -bench Runtime_ -benchtime 2000x
//	SWITCHYARD_BENCH_BROKER=redis://127.0.0.1:6379/0 \
//	SWITCHYARD_BENCH_LEDGER='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' \
//	  go test ./internal/integration -run '^$' -bench Runtime_ -benchtime 2000x
func BenchmarkRuntime_PublicAPI(b *testing.B) {
	dsn := os.Getenv("SWITCHYARD_BENCH_LEDGER")
	if dsn == "" {
		dsn = "sqlite://" + filepath.Join(b.TempDir(), "ledger.db")
	}
	for _, m := range runtimebench.Modes {
		b.Run(string(m), func(b *testing.B) {
			runBenchRow(b, runtimebench.Config{BrokerURL: os.Getenv("SWITCHYARD_BENCH_BROKER"), LedgerDSN: dsn, Tasks: b.N, Timeout: 5 * time.Minute}, m)
		})
	}
}

// runBenchRow runs one runtimebench row of b.N tasks (cfg.Tasks is set
// by the caller) and reports its throughput, latency (the runtime rows)
// and CPU per task; a row the build or broker cannot run is skipped.
func runBenchRow(b *testing.B, cfg runtimebench.Config, m runtimebench.Mode) {
	b.Helper()
	b.ResetTimer()
	r, err := runtimebench.Run(context.Background(), cfg, m)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if r.Skipped != "" {
		b.Skip(r.Skipped)
	}
	b.ReportMetric(r.PerSecond(), "tasks/s")
	if r.P50 > 0 {
		b.ReportMetric(float64(r.P50)/1e6, "p50-ms")
		b.ReportMetric(float64(r.P99)/1e6, "p99-ms")
	}
	b.ReportMetric(float64(r.ClientCPU)/1e3, "cpu-µs/task")
	if r.PGCPU > 0 {
		b.ReportMetric(float64(r.PGCPU)/1e3, "pg-cpu-µs/task")
	}
	if r.Duplicates > 0 {
		b.Errorf("%d duplicate deliveries", r.Duplicates)
	}
}
