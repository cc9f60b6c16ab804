package rabbitmq

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// BenchmarkPath measures one driver publishing SWITCHYARD_BENCH_PATH_N
// messages (default 2000, 1 KiB, batches of 100) while a receiver takes and
// acks them, end to end in msgs/s: direct (straight to the work queue) and
// delay (RunAt 50 ms ahead: through a delay queue and its dead-lettering
// into the work queue).
//
//	go test ./adapters/rabbitmq/ -run '^$' -bench Path -benchtime 1x
func BenchmarkPath(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("SWITCHYARD_BENCH_PATH_N")); err == nil && v > 0 {
		n = v
	}
	for _, delay := range []time.Duration{0, 50 * time.Millisecond} {
		name := "direct"
		if delay > 0 {
			name = "delay"
		}
		b.Run(name, func(b *testing.B) {
			var rates []float64
			for range b.N {
				rates = append(rates, benchPath(b, n, delay))
			}
			b.ReportMetric(median(rates), "msgs/s")
		})
	}
}

func benchPath(b *testing.B, n int, delay time.Duration) float64 {
	u := testURL(b, "bench"+randHex(4), "", "", nil)
	d := openDriver(b, u)
	defer cleanupNamespace(u, "bench")
	ctx := context.Background()
	// Declare first: queue creation is not the path measured.
	if _, err := d.workQueueDeclared(ctx, "bench", "bench"); err != nil {
		b.Fatal(err)
	}
	if delay > 0 {
		if _, err := d.declareDelay(ctx, "bench", "bench", bucketFor(delay)); err != nil {
			b.Fatal(err)
		}
	}
	body := make([]byte, benchBody)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		got := 0
		deadline := time.Now().Add(5 * time.Minute)
		for got < n && time.Now().Before(deadline) {
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			ds, err := d.Receive(rctx, broker.ReceiveRequest{Lane: "bench", Max: benchBatch, Wait: time.Second, Lease: time.Minute})
			if err == nil && len(ds) > 0 {
				err = d.Ack(rctx, ds)
			}
			cancel()
			if err != nil {
				done <- err
				return
			}
			got += len(ds)
		}
		done <- nil
	}()
	for i := 0; i < n; i += benchBatch {
		var msgs []*broker.Message
		for j := i; j < min(n, i+benchBatch); j++ {
			m := &broker.Message{ID: broker.NewID(), Lane: "bench", Kind: "k", Body: body, EnqueuedAt: time.Now()}
			if delay > 0 {
				m.RunAt = time.Now().Add(delay)
			}
			msgs = append(msgs, m)
		}
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		rs, err := d.Publish(pctx, msgs)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rs {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds()
}
