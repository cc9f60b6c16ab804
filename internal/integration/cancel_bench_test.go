package integration_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres"
)

type holdArgs struct{ N int }

func (holdArgs) Kind() string { return "bench.hold" }

// BenchmarkCancel_Latency measures the delay from Client.Cancel of a
// running task to its handler seeing its context done, per ledger store:
// the control channel (ledger.Notes) end to end — the cancel's ledger
// write, the note (PostgreSQL NOTIFY, or a row of the SQLite store's
// notes table, read by a poller every notify_interval, 50ms by default),
// and the worker cancelling the handler. The client and the worker have
// their own ledger handles, as two processes would. b.N counts cancels;
// it reports p50, p99 and max in milliseconds.
//
//	go test ./internal/integration -run '^$' -bench Cancel_Latency -benchtime 200x
func BenchmarkCancel_Latency(b *testing.B) {
	stores := []struct{ name, dsn string }{
		{"sqlite", ""},
		{"sqlite-notify10ms", "?notify_interval=10ms"},
		{"postgres", "pg"},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			dsn := "sqlite://" + filepath.Join(dir, "ledger.db") + st.dsn
			if st.dsn == "pg" {
				dsn = pgtest.LedgerDSN(b)
			}
			workerL, err := ledger.Open(ctx, dsn)
			if err != nil {
				b.Skipf("ledger %s: %v", st.name, err)
			}
			defer workerL.Close()
			clientL, err := ledger.Open(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer clientL.Close()
			br, err := broker.Open(ctx, "embedded://"+filepath.Join(dir, "queue.db"), &broker.Options{Dedup: workerL})
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			client, _ := switchyard.NewClient(br, &switchyard.ClientConfig{Ledger: clientL})
			srv, err := switchyard.NewServer(br, &switchyard.ServerConfig{Ledger: workerL, Slots: 4, PollWait: 20 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			inside := make(chan string, 1)
			doneAt := make(chan time.Time, 1)
			_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[holdArgs]) error {
				inside <- tk.ID
				<-ctx.Done()
				doneAt <- time.Now()
				return ctx.Err()
			}, nil)
			if err := srv.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer srv.Stop(ctx)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				r, err := client.Enqueue(ctx, holdArgs{N: i}, &switchyard.EnqueueOpts{Lane: "interactive"})
				if err != nil {
					b.Fatal(err)
				}
				<-inside
				time.Sleep(time.Millisecond) // the worker's notes listener is up (it is from Start on)
				b.StartTimer()
				t0 := time.Now()
				if _, err := client.Cancel(ctx, r.ID, "bench"); err != nil {
					b.Fatal(err)
				}
				select {
				case at := <-doneAt:
					lat = append(lat, at.Sub(t0))
				case <-time.After(30 * time.Second):
					b.Fatal("the handler's context was not cancelled within 30s")
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
			b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), "p99-ms")
			b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
		})
	}
}
