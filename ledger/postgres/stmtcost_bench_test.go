package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/broker"
)

// BenchmarkStmtCost separates what each hot-path statement costs the
// server's backend, commits apart: on one connection, tasks go through
// Create, BeginRun and EndRun (each kind's single statement, as a lone
// write or a kind's only write in a group runs it), per statement kind
// in pgx batches of 64 inside one explicit transaction (one commit per
// 64 statements), and the CPU of that one backend (/proc/<pid>/stat; the
// server must be on this machine) is reported per statement of each
// kind, beside a trivial statement's (SELECT $1, the protocol's own
// cost) and a read-only transaction's (BEGIN, SELECT 1, COMMIT in one
// round trip), and the lean first-run BeginRun/EndRun statements beside
// the full ones. docs/BENCHMARKS.md (issue 15, twelfth pass) has its
// figures:
//
//	go test ./ledger/postgres/ -run '^$' -bench StmtCost -benchtime 4000x
func BenchmarkStmtCost(b *testing.B) {
	ctx := context.Background()
	_, c, cpu := benchBackend(b)
	const per = 64
	// run sends the statements in batches of per, each batch one
	// transaction, and returns the backend's CPU in seconds.
	run := func(sql string, args [][]any) float64 {
		c0 := cpu()
		for i := 0; i < len(args); i += per {
			bt := &pgx.Batch{}
			bt.Queue("BEGIN")
			for _, a := range args[i:min(i+per, len(args))] {
				bt.Queue(sql, a...)
			}
			bt.Queue("COMMIT")
			if err := c.SendBatch(ctx, bt).Close(); err != nil {
				b.Fatal(err)
			}
		}
		return cpu() - c0
	}
	n := b.N
	now := time.Now()
	tasks := func() (cr, br, er [][]any) {
		for range n {
			id := broker.NewID()
			cr = append(cr, []any{id, "", "", "k", "batch", "", []byte(`{"n":1}`), "queued", 0, 0, nil, nil, nil, nil, "", now})
			br = append(br, []any{id, 1, time.Minute.Microseconds(), now, "w", now})
			er = append(er, []any{id, "completed", now, 1, false, []byte{}, nil, nil, []string{"running"}, "succeeded", "", "", 0,
				id, 1, "", nil, int64(time.Millisecond), "ok", "", "", ""})
		}
		return cr, br, er
	}
	var triv [][]any
	for i := range n {
		triv = append(triv, []any{int64(i)})
	}
	cr, br, er := tasks()
	cr2, br2, er2 := tasks()
	b.ResetTimer()
	tc := run(`SELECT $1::bigint`, triv)
	cc := run(createKind.single, cr)
	bc := run(beginRunKind.single, br)
	ec := run(endRunKind.single, er)
	cc2 := run(createKind.single, cr2)
	bl := run(beginRunLeanKind.single, br2)
	el := run(endRunLeanKind.single, er2)
	// Bare commits: n/8 transactions with one trivial statement, one
	// round trip each.
	c0 := cpu()
	for range n / 8 {
		bt := &pgx.Batch{}
		bt.Queue("BEGIN")
		bt.Queue(`SELECT 1`)
		bt.Queue("COMMIT")
		if err := c.SendBatch(ctx, bt).Close(); err != nil {
			b.Fatal(err)
		}
	}
	rt := (cpu() - c0) / float64(n/8)
	b.StopTimer()
	var done int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM ledger_tasks WHERE state = 'completed' AND run_outcome = 'ok' AND end_ev_seq = 3`).Scan(&done); err != nil {
		b.Fatal(err)
	}
	if done != 2*n {
		b.Fatalf("%d tasks completed, want %d", done, 2*n)
	}
	f := float64(n)
	b.ReportMetric(tc*1e6/f, "trivial-µs/stmt")
	b.ReportMetric((cc+cc2)*1e6/f/2, "create-µs/stmt")
	b.ReportMetric(bc*1e6/f, "beginrun-µs/stmt")
	b.ReportMetric(ec*1e6/f, "endrun-µs/stmt")
	b.ReportMetric(bl*1e6/f, "beginrun-lean-µs/stmt")
	b.ReportMetric(el*1e6/f, "endrun-lean-µs/stmt")
	b.ReportMetric(rt*1e6, "readonly-xact-µs")
}
