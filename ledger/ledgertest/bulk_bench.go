package ledgertest

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchyard-dev/switchyard/ledger"
)

// BenchmarkCreate measures recording b.N tasks with CreateMany in batches
// of batch (1: one Create per task instead); b.N counts tasks.
func BenchmarkCreate(b *testing.B, l ledger.Ledger, batch int) {
	ctx := context.Background()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		ts := make([]*ledger.Task, n)
		for i := range ts {
			ts[i] = &ledger.Task{Kind: "bench.create", Lane: "batch", IdempotencyKey: fmt.Sprintf("bench-%s-%d", b.Name(), done+i),
				Args: []byte(`{"p":"x"}`)}
		}
		if batch == 1 {
			if _, _, err := l.Create(ctx, ts[0]); err != nil {
				b.Fatal(err)
			}
		} else {
			rs, err := l.CreateMany(ctx, ts)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range rs {
				if r.Err != nil || !r.Created {
					b.Fatalf("%+v", r)
				}
			}
		}
		done += n
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}
