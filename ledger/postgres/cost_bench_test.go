package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/postgres"
)

// BenchmarkTaskCost measures what one task costs PostgreSQL on the hot
// path (Create, BeginRun, EndRun to completed, from 64 goroutines; with
// keys=true each task has an idempotency key and the broker's Claim
// follows its Create, as Client.Enqueue does), b.N tasks on a fresh
// schema. Metrics per task: the CPU of this run's own backends (their
// /proc/<pid>/stat utime + stime, found by application_name; the server
// must be on this machine, and the WAL writer and checkpointer are not
// counted), rows inserted, updated and HOT-updated (pg_stat_user_tables of
// the schema, read after the store's backends have exited and flushed
// them), WAL bytes (pg_stat_wal: the whole server, other clients
// included), and the schema's tables and indexes on disk.
//
//	go test ./ledger/postgres/ -run '^$' -bench TaskCost -benchtime 4000x
//
// SWITCHYARD_BENCH_GROUP_WAIT (a duration, 0 for none) sets the store's
// GroupWait, SWITCHYARD_BENCH_POOL_CONNS its pool size (the writers are one
// fewer).
func BenchmarkTaskCost(b *testing.B) {
	for _, keys := range []bool{false, true} {
		b.Run(fmt.Sprintf("keys=%v", keys), func(b *testing.B) { benchTaskCost(b, keys) })
	}
}

func benchTaskCost(b *testing.B, keys bool) {
	ctx := context.Background()
	dsn, schema := freshSchema(b)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	opts := &postgres.Options{Schema: schema}
	if v := os.Getenv("SWITCHYARD_BENCH_GROUP_WAIT"); v != "" {
		if opts.GroupWait, err = time.ParseDuration(v); err != nil {
			b.Fatal(err)
		}
		if opts.GroupWait == 0 {
			opts.GroupWait = -1
		}
	}
	extra := os.Getenv("SWITCHYARD_BENCH_POOL_CONNS")
	if extra != "" {
		extra = "&pool_max_conns=" + extra
	}
	s, err := postgres.Open(ctx, dsn+sep+"application_name="+schema+extra, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for range 8 {
		s.Get(ctx, "warm-up") // opens the pool's connections
	}
	type counters struct{ ins, upd, hot, wal, size int64 }
	read := func() (c counters) {
		if err := conn.QueryRow(ctx, `SELECT COALESCE(sum(n_tup_ins), 0)::bigint, COALESCE(sum(n_tup_upd), 0)::bigint, COALESCE(sum(n_tup_hot_upd), 0)::bigint,
				(SELECT wal_bytes::bigint FROM pg_stat_wal),
				(SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
					WHERE n.nspname = $1 AND c.relkind = 'r')
			FROM pg_stat_user_tables WHERE schemaname = $1`, schema).Scan(&c.ins, &c.upd, &c.hot, &c.wal, &c.size); err != nil {
			b.Fatal(err)
		}
		return c
	}
	c0, cpu0 := read(), backendCPU(ctx, b, conn, schema)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				in := &ledger.Task{Kind: "bench", Lane: "batch", Args: []byte(`{"n":1}`)}
				if keys {
					in.IdempotencyKey = "k-" + strconv.FormatInt(i, 10)
				}
				tk, _, err := s.Create(ctx, in)
				if err != nil {
					b.Error(err)
					return
				}
				if keys {
					if _, _, err := s.Claim(ctx, "batch", "", in.IdempotencyKey, tk.ID); err != nil {
						b.Error(err)
						return
					}
				}
				r, err := s.BeginRun(ctx, ledger.RunStart{ID: tk.ID, Attempt: 1, Worker: "w", Lease: time.Minute})
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: tk.ID, Number: r.Attempt, Outcome: "ok", Duration: time.Millisecond},
					Transition: &ledger.TransitionRequest{ID: tk.ID, From: []ledger.State{ledger.Running}, To: ledger.Completed, Reason: "succeeded", Attempt: r.Attempt}}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu1 := backendCPU(ctx, b, conn, schema)
	groups, writes, splits := s.GroupStats()
	waited, full := s.GroupStarts()
	arrays, arrayWrites := s.ArrayStats()
	s.Close() // its backends exit and flush their statistics
	time.Sleep(time.Second)
	c1 := read()
	n := float64(b.N)
	b.ReportMetric((cpu1-cpu0)*1e6/n, "pg-cpu-µs/task")
	b.ReportMetric(float64(c1.ins-c0.ins)/n, "rows-ins/task")
	b.ReportMetric(float64(c1.upd-c0.upd)/n, "rows-upd/task")
	b.ReportMetric(float64(c1.hot-c0.hot)/n, "hot-upd/task")
	b.ReportMetric(float64(c1.wal-c0.wal)/n, "wal-B/task")
	b.ReportMetric(float64(c1.size-c0.size)/n, "disk-B/task")
	if groups > 0 {
		b.ReportMetric(float64(writes)/float64(groups), "writes/group")
		b.ReportMetric(float64(splits)/float64(groups), "splits/group")
		b.ReportMetric(float64(waited+full)/float64(groups), "overflow/group")
	}
	if arrays > 0 {
		b.ReportMetric(float64(arrayWrites)/float64(arrays), "writes/array")
	}
	if writes > 0 {
		b.ReportMetric(float64(writes-arrayWrites+arrays)/float64(writes), "stmts/write")
	}
}

// backendCPU is the CPU time, in seconds, of the PostgreSQL backends whose
// application_name is app (read from /proc: the server runs on this
// machine).
func backendCPU(ctx context.Context, b *testing.B, conn *pgx.Conn, app string) (sec float64) {
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue // not on this machine, or gone
		}
		st := string(raw)
		f := strings.Fields(st[strings.LastIndexByte(st, ')')+2:])
		u, _ := strconv.ParseFloat(f[11], 64)
		k, _ := strconv.ParseFloat(f[12], 64)
		sec += (u + k) / 100 // clock ticks
	}
	return sec
}
