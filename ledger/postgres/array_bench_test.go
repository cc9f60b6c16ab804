package postgres

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// BenchmarkGroupShape isolates what a group's statements cost the server:
// on one connection, tasks go through Create, BeginRun and EndRun in
// groups of g (one pgx batch, one commit, per kind), either as g single
// statements or as one array statement (after arrayPlanSQL). It reports
// the CPU of that one backend per task (/proc/<pid>/stat; the server must
// be on this machine). Beside the group writer's figures (TaskCost) it
// separates the cost per statement, per commit and per row:
//
//	go test ./ledger/postgres/ -run '^$' -bench GroupShape -benchtime 4000x
func BenchmarkGroupShape(b *testing.B) {
	for _, g := range []int{4, 16, 64} {
		for _, array := range []bool{false, true} {
			name := "single"
			if array {
				name = "array"
			}
			b.Run(fmt.Sprintf("g=%d/%s", g, name), func(b *testing.B) { benchGroupShape(b, g, array) })
		}
	}
}

func benchGroupShape(b *testing.B, g int, array bool) {
	ctx := context.Background()
	_, c, cpu := benchBackend(b)
	send := func(k *batchKind, args [][]any) {
		bt := &pgx.Batch{}
		if array {
			rs := make([]*groupReq, len(args))
			for i, a := range args {
				rs[i] = &groupReq{args: a}
			}
			bt.Queue(arrayPlanSQL)
			bt.Queue(k.array, k.arrays(rs)...)
		} else {
			for _, a := range args {
				bt.Queue(k.single, a...)
			}
		}
		if err := c.SendBatch(ctx, bt).Close(); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := cpu()
	b.ResetTimer()
	for i := 0; i < b.N; i += g {
		n := min(g, b.N-i)
		now := time.Now()
		var cr, br, er [][]any
		for range n {
			id := broker.NewID()
			cr = append(cr, []any{id, "", "", "k", "batch", "", []byte(`{"n":1}`), "queued", 0, 0, nil, nil, nil, nil, "", now})
			br = append(br, []any{id, 1, time.Minute.Microseconds(), now, "w", now})
			er = append(er, []any{id, "completed", now, 1, false, []byte{}, nil, nil, []string{"running"}, "succeeded", "", "", 0,
				id, 1, "", nil, int64(time.Millisecond), "ok", "", "", ""})
		}
		send(createKind, cr)
		send(beginRunKind, br)
		send(endRunKind, er)
	}
	b.StopTimer()
	b.ReportMetric((cpu()-cpu0)*1e6/float64(b.N), "pg-cpu-µs/task")
}

// benchBackend opens a store on a fresh schema (dropped when b ends) and
// one more connection to it, and returns a reader of that connection's
// backend CPU in seconds (utime+stime from /proc; b is skipped when the
// server is not on this machine).
func benchBackend(b *testing.B) (*Store, *pgx.Conn, func() float64) {
	ctx := context.Background()
	dsn := testenv.Postgres.Endpoint(b)
	schema := fmt.Sprintf("ledgerbench_%d", time.Now().UnixNano())
	s, err := Open(ctx, dsn, &Options{Schema: schema, NoGroupCommit: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		s.pool.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		s.Close()
	})
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(ctx) })
	var pid int32
	if err := c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	cpu := func() float64 {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Skipf("the server's backend is not on this machine: %v", err)
		}
		st := string(raw)
		f := strings.Fields(st[strings.LastIndexByte(st, ')')+2:])
		u, _ := strconv.ParseFloat(f[11], 64)
		k, _ := strconv.ParseFloat(f[12], 64)
		return (u + k) / 100
	}
	return s, c, cpu
}

// sendArray runs one array statement of kind k over rs on c, as a group
// does (arrayPlanSQL first, one pgx batch), and fails b unless every
// write got its row.
func sendArray(ctx context.Context, b *testing.B, c *pgx.Conn, k *batchKind, sql string, rs []*groupReq) {
	b.Helper()
	bt := &pgx.Batch{}
	bt.Queue(arrayPlanSQL)
	bt.Queue(sql, k.arrays(rs)...)
	br := c.SendBatch(ctx, bt)
	if _, err := br.Exec(); err != nil {
		b.Fatal(err)
	}
	rows, err := br.Query()
	if err != nil {
		b.Fatal(err)
	}
	got := 0
	for rows.Next() {
		got++
	}
	rows.Close()
	if err := rows.Err(); err != nil || got != len(rs) {
		b.Fatalf("%d rows of %d: %v", got, len(rs), err)
	}
	if err := br.Close(); err != nil {
		b.Fatal(err)
	}
}
