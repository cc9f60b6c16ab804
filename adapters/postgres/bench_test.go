package postgres

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-dev/switchyard/internal/benchkit"
)

// Benchmark settings shared by both sides.
const (
	benchMsgs      = 20000
	benchBody      = 1024
	benchBatch     = 100
	benchConsumers = 2
	benchRounds    = 3
)

// BenchmarkEndToEnd compares Switchyard on PostgreSQL (through
// broker.Broker, benchkit.EndToEnd) with a raw pgx loop on a minimal queue
// table of the same shape (lease by UPDATE … FOR UPDATE SKIP LOCKED in
// batches, ack by DELETE), with the same batch sizes (publish 100 by
// unnest, receive up to 100, ack the batch), 1 KiB bodies, one publisher
// and two consumers, in one process and one run. msgs/s is benchMsgs over
// the time from the first publish to the last ack; the sides alternate
// benchRounds times and the medians are reported:
//
//	go test ./adapters/postgres/ -run '^$' -bench BenchmarkEndToEnd -benchtime 1x -count 1
func BenchmarkEndToEnd(b *testing.B) {
	dsn := sharedDSN(b)
	var raw, sy []float64
	for i := 0; i < b.N; i++ {
		for r := 0; r < benchRounds; r++ {
			raw = append(raw, benchRaw(b, dsn))
			sy = append(sy, benchSwitchyard(b, dsn))
		}
	}
	mr, ms := median(raw), median(sy)
	b.Logf("raw msgs/s: %.0f; switchyard msgs/s: %.0f", raw, sy)
	b.ReportMetric(mr, "raw_msgs/s")
	b.ReportMetric(ms, "switchyard_msgs/s")
	b.ReportMetric(ms/mr, "ratio")
	b.ReportMetric(0, "ns/op")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func benchSwitchyard(b *testing.B, dsn string) float64 {
	br := openBroker(b, withParams(dsn, "schema="+freshSchema(b, dsn)), nil)
	r, err := benchkit.EndToEnd(context.Background(), br, "bench", benchMsgs, benchBody, benchBatch, benchConsumers)
	if err != nil {
		b.Fatal(err)
	}
	return r.PerSecond()
}

// benchRaw is the raw loop: what a hand-written pgx queue does, with no
// envelope, headers, keys, attempts checks or notifications (consumers
// poll every millisecond when the queue is empty).
func benchRaw(b *testing.B, dsn string) float64 {
	ctx := context.Background()
	schema := freshSchema(b, dsn)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	s := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{
		`CREATE SCHEMA ` + s,
		`CREATE TABLE ` + s + `.q (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, visible_at timestamptz NOT NULL DEFAULT now(), token bigint NOT NULL DEFAULT 0, attempts int NOT NULL DEFAULT 0, body bytea)`,
		`CREATE INDEX ON ` + s + `.q (visible_at, id)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	insert := `INSERT INTO ` + s + `.q (body) SELECT unnest($1::bytea[])`
	lease := `WITH c AS (SELECT id FROM ` + s + `.q WHERE visible_at <= statement_timestamp() ORDER BY visible_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE ` + s + `.q q SET token = $2, attempts = attempts + 1, visible_at = statement_timestamp() + interval '30 seconds' FROM c WHERE q.id = c.id RETURNING q.id, q.body`
	del := `DELETE FROM ` + s + `.q WHERE id = ANY($1) AND token = $2`
	body := make([]byte, benchBody)
	var acked atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, benchConsumers+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sent := 0; sent < benchMsgs; sent += benchBatch {
			bodies := make([][]byte, min(benchBatch, benchMsgs-sent))
			for i := range bodies {
				bodies[i] = body
			}
			if _, err := pool.Exec(ctx, insert, bodies); err != nil {
				errc <- err
				return
			}
		}
	}()
	for c := 0; c < benchConsumers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(2 * time.Minute)
			for acked.Load() < benchMsgs && time.Now().Before(deadline) {
				token := newToken()
				rows, err := pool.Query(ctx, lease, benchBatch, token)
				if err != nil {
					errc <- err
					return
				}
				var ids []int64
				for rows.Next() {
					var id int64
					var bd []byte
					if err := rows.Scan(&id, &bd); err != nil {
						rows.Close()
						errc <- err
						return
					}
					ids = append(ids, id)
				}
				rows.Close()
				if len(ids) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				if _, err := pool.Exec(ctx, del, ids, token); err != nil {
					errc <- err
					return
				}
				acked.Add(int64(len(ids)))
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
	if acked.Load() < benchMsgs {
		b.Fatalf("raw loop acked %d of %d", acked.Load(), benchMsgs)
	}
	return float64(benchMsgs) / time.Since(start).Seconds()
}
