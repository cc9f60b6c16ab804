package switchyard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/scheduler"
)

type noopArgs struct {
	Payload string `json:"p"`
}

func (noopArgs) Kind() string { return "bench.noop" }

// BenchmarkServer_EndToEnd measures tasks/s through the whole runtime on
// the durable embedded broker — enqueue through Client, receive, run a
// handler with two memoised steps, ack — with the ledger off and on, in
// one run. b.N counts tasks.
//
//	go test . -run '^$' -bench Server_EndToEnd -benchtime 5000x -count 3
func BenchmarkServer_EndToEnd(b *testing.B) {
	for _, withLedger := range []bool{false, true} {
		name := "ledger=off"
		if withLedger {
			name = "ledger=on"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			var L ledger.Ledger
			opts := &broker.Options{}
			if withLedger {
				var err error
				L, err = ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "ledger.db"))
				if err != nil {
					b.Fatal(err)
				}
				defer L.Close()
				opts.Dedup = L
			}
			br, err := broker.Open(ctx, "embedded://"+filepath.Join(dir, "queue.db"), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			client, _ := switchyard.NewClient(br, &switchyard.ClientConfig{Ledger: L})
			srv, err := switchyard.NewServer(br, &switchyard.ServerConfig{Ledger: L, Slots: 16, Prefetch: 32, PollWait: 50 * time.Millisecond,
				Lanes: nil, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Retry: scheduler.RetryPolicy{}})
			if err != nil {
				b.Fatal(err)
			}
			var done atomic.Int64
			all := make(chan struct{})
			n := int64(b.N)
			_ = switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[noopArgs]) error {
				for _, step := range []string{"a", "b"} {
					if _, err := switchyard.Step(ctx, step, func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
						return err
					}
				}
				if done.Add(1) == n {
					close(all)
				}
				return nil
			}, nil)
			payload := fmt.Sprintf("%01024d", 0)
			b.ResetTimer()
			start := time.Now()
			if err := srv.Start(ctx); err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				if _, err := client.Enqueue(ctx, noopArgs{Payload: payload}, nil); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-all:
			case <-time.After(5 * time.Minute):
				b.Fatalf("%d of %d tasks done after 5 minutes", done.Load(), b.N)
			}
			el := time.Since(start)
			b.StopTimer()
			_ = srv.Stop(ctx)
			b.ReportMetric(float64(b.N)/el.Seconds(), "tasks/s")
		})
	}
}
