package integration_test

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres"
)

type tokenArgs struct {
	N     int `json:"n"`
	Every int `json:"every_ms"`
}

func (tokenArgs) Kind() string { return "bench.token" }

// countingLedger counts a Client's ReadStream and Get (or WatchTask)
// calls (a Watch's or a Wait's ledger reads); Unwrap lets ledger.NotesOf
// find the store's notes behind it.
type countingLedger struct {
	ledger.Ledger
	reads atomic.Int64
	gets  atomic.Int64
}

func (l *countingLedger) Get(ctx context.Context, id string) (*ledger.Task, error) {
	l.gets.Add(1)
	return l.Ledger.Get(ctx, id)
}

func (l *countingLedger) ReadStream(ctx context.Context, id string, after int64, limit int) ([]ledger.StreamEntry, error) {
	l.reads.Add(1)
	return l.Ledger.ReadStream(ctx, id, after, limit)
}

func (l *countingLedger) Unwrap() ledger.Ledger { return l.Ledger }

// WatchTask counts as a Get (a Wait's or a Watch's first read marks the
// task watched: ledger.Watcher).
func (l *countingLedger) WatchTask(ctx context.Context, id string) (*ledger.Task, error) {
	l.gets.Add(1)
	w, ok := ledger.WatcherOf(l.Ledger)
	if !ok {
		return l.Ledger.Get(ctx, id)
	}
	return w.WatchTask(ctx, id)
}

// FollowTask counts as a Get too (Watch with Follow).
func (l *countingLedger) FollowTask(ctx context.Context, id string) (*ledger.Task, error) {
	l.gets.Add(1)
	w, ok := ledger.WatcherOf(l.Ledger)
	if !ok {
		return l.Ledger.Get(ctx, id)
	}
	return w.FollowTask(ctx, id)
}

// BenchmarkWatch_ChunkLatency measures the delay from a handler's Emit
// returning to a Client.Watch in another ledger handle (as another
// process would hold) yielding the chunk, per ledger store, with Watch's
// default options. The handler emits b.N chunks of 8 bytes 20 ms apart (a
// model's token cadence), so the figure is latency, not throughput. It
// reports p50, p99 and max in milliseconds, and the watcher's ReadStream
// calls per chunk.
//
//	go test ./internal/integration -run '^$' -bench Watch_ChunkLatency -benchtime 200x
func BenchmarkWatch_ChunkLatency(b *testing.B) {
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
			openedL, err := ledger.Open(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer openedL.Close()
			clientL := &countingLedger{Ledger: openedL}
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
			_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[tokenArgs]) error {
				for range tk.Args.N {
					time.Sleep(time.Duration(tk.Args.Every) * time.Millisecond)
					// The chunk carries the time Emit was called: the
					// ledger write is part of what a follower waits for.
					if err := switchyard.Emit(ctx, binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))); err != nil {
						return err
					}
				}
				return nil
			}, nil)
			if err := srv.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer srv.Stop(ctx)
			r, err := client.Enqueue(ctx, tokenArgs{N: b.N, Every: 20}, &switchyard.EnqueueOpts{Lane: "interactive"})
			if err != nil {
				b.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, time.Duration(b.N)*time.Second+time.Minute)
			defer cancel()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for ev, err := range client.Watch(wctx, r.ID, 0, nil) {
				if err != nil {
					b.Fatal(err)
				}
				if ev.Kind == ledger.StreamChunk {
					lat = append(lat, time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(ev.Data)))))
				}
			}
			b.StopTimer()
			if len(lat) != b.N {
				b.Fatalf("%d chunks, want %d", len(lat), b.N)
			}
			slices.Sort(lat)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
			b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), "p99-ms")
			b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
			b.ReportMetric(float64(clientL.reads.Load())/float64(b.N), "reads/chunk")
			b.ReportMetric(float64(clientL.reads.Load())/b.Elapsed().Seconds(), "reads/s")
		})
	}
}
