package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// BenchmarkPeek compares the two ways operator tools read the first 10
// ready messages of a lane holding 10,000: Browse (a SELECT; nothing
// changes) and the lease-and-give-back fallback the brokers without a
// non-destructive read use (Receive, then Release).
func BenchmarkPeek(b *testing.B) {
	br := openBench(b)
	ctx := context.Background()
	msgs := make([]*broker.Message, 0, 500)
	for range 20 {
		msgs = msgs[:0]
		for range 500 {
			msgs = append(msgs, &broker.Message{Lane: "batch", Kind: "bench", Body: make([]byte, 256)})
		}
		if _, err := br.Publish(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("browse", func(b *testing.B) {
		for b.Loop() {
			p, err := br.Browse(ctx, broker.BrowseRequest{Lane: "batch", Max: 10})
			if err != nil || len(p.Messages) != 10 {
				b.Fatal(err)
			}
		}
	})
	b.Run("lease-and-give-back", func(b *testing.B) {
		for b.Loop() {
			ds, err := br.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute})
			if err != nil || len(ds) != 10 {
				b.Fatal(err)
			}
			for _, d := range ds {
				if err := br.Release(ctx, d, 0); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
