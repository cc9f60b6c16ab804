package ledgertest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// BenchmarkStream measures the cost of a streamed chunk: b.N chunks of 24
// bytes (a few model tokens), appended batch at a time (batch 1: one
// AppendStream per chunk, the write Emit makes; more: what a
// StreamWriter's flush makes).
// streams tasks emit at once, each from its own goroutine, one chunk after
// another as a handler does (streams=1: one handler). It reports ns/chunk
// and chunks/s, and, with follow, reads the streams back (ReadStream from
// the last offset, as Watch does) and reports read_ns/chunk.
func BenchmarkStream(b *testing.B, l ledger.Ledger, streams, batch int, follow bool) {
	ctx := context.Background()
	ids := make([]string, streams)
	for i := range ids {
		t, _, err := l.Create(ctx, &ledger.Task{Tenant: "bench", IdempotencyKey: fmt.Sprintf("stream-%d-%d", time.Now().UnixNano(), i),
			Kind: "agent.chat", Lane: "interactive", MaxAttempts: 5})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = t.ID
	}
	chunk := []byte("tokens tokens tokens ...")
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	done := make(chan error, streams)
	for s := 0; s < streams; s++ {
		go func() {
			es := make([]ledger.StreamEntry, batch)
			for i := range es {
				es[i] = ledger.StreamEntry{Kind: ledger.StreamChunk, Data: chunk}
			}
			for {
				end := next.Add(int64(batch))
				if end-int64(batch) >= int64(b.N) {
					break
				}
				n := int64(batch)
				if end > int64(b.N) {
					n = int64(b.N) - (end - int64(batch))
				}
				if _, err := l.AppendStream(ctx, ids[s], 1, es[:n]); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range streams {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "chunks/s")
	if follow {
		rstart, read := time.Now(), 0
		for _, id := range ids {
			var off int64
			for {
				es, err := l.ReadStream(ctx, id, off, 1000)
				if err != nil {
					b.Fatal(err)
				}
				if len(es) == 0 {
					break
				}
				read += len(es)
				off = es[len(es)-1].Offset
			}
		}
		if read > 0 {
			b.ReportMetric(float64(time.Since(rstart).Nanoseconds())/float64(read), "read_ns/chunk")
		}
	}
}
