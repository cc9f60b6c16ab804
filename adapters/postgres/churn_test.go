package postgres

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// BenchmarkChurn pushes SWITCHYARD_PG_CHURN_TASKS tasks (default 200,000)
// through one lane — one publisher in batches of 100 keeping a backlog of
// at most 10,000, two consumers receiving and acking batches of 100 — and
// logs, every tenth of the run, the throughput of that tenth and the queue
// table's dead tuples (pg_stat_user_tables) and size with its indexes.
// SWITCHYARD_PG_CHURN_VACUUM sets the vacuum URL parameter (default 10s;
// 0s turns the driver's own vacuum off, leaving the table to autovacuum).
//
//	SWITCHYARD_PG_CHURN_TASKS=1000000 go test ./adapters/postgres/ -run '^$' -bench BenchmarkChurn -benchtime 1x -timeout 1h -v
func BenchmarkChurn(b *testing.B) {
	n := 200000
	if v, err := strconv.Atoi(os.Getenv("SWITCHYARD_PG_CHURN_TASKS")); err == nil && v > 0 {
		n = v
	}
	vac := "10s"
	if v := os.Getenv("SWITCHYARD_PG_CHURN_VACUUM"); v != "" {
		vac = v
	}
	for i := 0; i < b.N; i++ {
		churn(b, n, vac)
	}
	b.ReportMetric(0, "ns/op")
}

func churn(b *testing.B, n int, vac string) {
	ctx := context.Background()
	br := openBroker(b, testURL(b, "vacuum="+vac), nil)
	d := driverOf(br)
	const lane, batch, backlog = "churn", 100, 10000
	var published, acked atomic.Int64
	body := make([]byte, 64)
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for published.Load() < int64(n) {
			if published.Load()-acked.Load() > backlog {
				time.Sleep(time.Millisecond)
				continue
			}
			k := min(batch, n-int(published.Load()))
			msgs := make([]*broker.Message, k)
			for i := range msgs {
				msgs[i] = &broker.Message{Lane: lane, Kind: "churn", Body: body}
			}
			if _, err := br.Publish(ctx, msgs...); err != nil {
				errc <- err
				return
			}
			published.Add(int64(k))
		}
	}()
	for c := 0; c < 2; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for acked.Load() < int64(n) {
				ds, err := br.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: batch, Lease: time.Minute, Wait: 100 * time.Millisecond})
				if err != nil {
					errc <- err
					return
				}
				if len(ds) == 0 {
					continue
				}
				if err := br.Ack(ctx, ds...); err != nil {
					errc <- err
					return
				}
				acked.Add(int64(len(ds)))
			}
		}()
	}
	stat := func() (dead, vacuums int64, size string) {
		_ = d.pool.QueryRow(ctx, `SELECT coalesce(n_dead_tup, 0), coalesce(vacuum_count + autovacuum_count, 0), pg_size_pretty(pg_total_relation_size(relid))
			FROM pg_stat_user_tables WHERE relid = to_regclass($1)`, d.cfg.Schema+".sy_queue").Scan(&dead, &vacuums, &size)
		return
	}
	start, last, lastN := time.Now(), time.Now(), int64(0)
	var maxDead int64
	step := int64(max(n/10, 1))
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case err := <-errc:
			b.Fatal(err)
		case <-time.After(200 * time.Millisecond):
		}
		if a := acked.Load(); a-lastN >= step || !running {
			dead, vacuums, size := stat()
			maxDead = max(maxDead, dead)
			b.Logf("%8d tasks: %6.0f tasks/s in the last %d; dead tuples %d, vacuums %d, table+indexes %s", a,
				float64(a-lastN)/time.Since(last).Seconds(), a-lastN, dead, vacuums, size)
			last, lastN = time.Now(), a
		}
	}
	dead, vacuums, size := stat()
	b.Logf("%d tasks in %s (%.0f tasks/s), vacuum=%s: dead tuples at the end %d (most seen %d), vacuums %d, table+indexes %s",
		n, time.Since(start).Round(time.Second), float64(n)/time.Since(start).Seconds(), vac, dead, maxDead, vacuums, size)
}
