package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// createArrayPlain is Create's array statement as a plain INSERT (no CTE,
// no join back to the arguments: its rows would go to their writes by the
// task ID), measured and not kept (issue 15, fourteenth pass, round 2:
// cheaper for the statement alone, not in the closed loop).
var createArrayPlain = `INSERT INTO ledger_tasks (` + taskCols + `, event_seq)
		SELECT id, tenant, idem_key, kind, lane, ordering_key, args, state, attempt, max_attempts,
			run_at, deadline, metadata::jsonb, result, last_error, created_at, created_at, NULL::timestamptz, 1
		FROM (` + argRows("id text", "tenant text", "idem_key text", "kind text", "lane text", "ordering_key text", "args bytea",
	"state text", "attempt integer", "max_attempts integer", "run_at timestamptz", "deadline timestamptz", "metadata text",
	"result bytea", "last_error text", "created_at timestamptz") + `) v
		ORDER BY ord
		ON CONFLICT DO NOTHING
		RETURNING ` + taskCols

// BenchmarkCreateArray compares, on one connection and backend, Create's
// array statement (createKind.array, joined) with createArrayPlain,
// alternated round by round: groups of g Creates, each one pgx batch
// (arrayPlanSQL, the array statement) in one transaction, every row read.
// It reports the backend's CPU per task of each (/proc; the server must
// be on this machine):
//
//	go test ./ledger/postgres/ -run '^$' -bench CreateArray -benchtime 8000x
func BenchmarkCreateArray(b *testing.B) {
	for _, g := range []int{8, 32} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			ctx := context.Background()
			_, c, cpu := benchBackend(b)
			k := &batchKind{ordinals: true}
			send := func(sql string, n int) float64 {
				c0 := cpu()
				now := time.Now()
				for i := 0; i < n; i += g {
					rs := make([]*groupReq, min(g, n-i))
					for j := range rs {
						rs[j] = &groupReq{args: []any{broker.NewID(), "", "", "k", "batch", "", []byte(`{"n":1}`), "queued", 0, 0, nil, nil, nil, nil, "", now}}
					}
					sendArray(ctx, b, c, k, sql, rs)
				}
				return cpu() - c0
			}
			// Warm both plans, then alternate in rounds.
			send(createKind.array, 4*g)
			send(createArrayPlain, 4*g)
			const rounds = 8
			per := max(b.N/rounds, g)
			var plain, joined float64
			b.ResetTimer()
			for r := range rounds {
				if r%2 == 0 {
					joined += send(createKind.array, per)
					plain += send(createArrayPlain, per)
				} else {
					plain += send(createArrayPlain, per)
					joined += send(createKind.array, per)
				}
			}
			b.StopTimer()
			b.ReportMetric(plain*1e6/float64(rounds*per), "plain-pg-µs/task")
			b.ReportMetric(joined*1e6/float64(rounds*per), "joined-pg-µs/task")
		})
	}
}
