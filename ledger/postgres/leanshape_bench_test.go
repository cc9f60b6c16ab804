package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// beginRunLeanCTE and endRunLeanCTE are the lean array statements as they
// were before the fifteenth pass of issue 15: the rows locked first in a
// CTE, in ID order (ORDER BY t.id FOR UPDATE OF t), then updated. Kept
// to measure the lean statements against (BenchmarkLeanArray).
var (
	beginRunLeanCTE = beginRunArgs + `
		cur AS (
			SELECT t.id, v.ord, v.lease_us, v.at, v.worker, v.start, GREATEST(v.delivered, t.attempt, 1) AS n
			FROM v JOIN ledger_tasks t ON t.id = v.id
			WHERE t.state = 'queued' AND t.run_attempt IS NULL AND t.run_ev_seq IS NULL
			ORDER BY t.id FOR UPDATE OF t),
		u AS (
			UPDATE ledger_tasks t SET state = 'running', attempt = cur.n,
				lease_until = clock_timestamp() + cur.lease_us * interval '1 microsecond',
				updated_at = cur.at, event_seq = t.event_seq + 1,
				run_attempt = cur.n, run_worker = cur.worker, run_start = cur.start,
				run_duration = NULL, run_outcome = NULL, run_class = NULL, run_error = NULL, run_stack = NULL,
				run_ev_seq = t.event_seq + 1, run_ev_at = cur.at, run_ev_from = 'queued', run_ev_reason = 'attempt_started',
				run_ev_detail = '', run_ev_actor = cur.worker
			FROM cur WHERE t.id = cur.id
				AND NOT EXISTS (SELECT 1 FROM ledger_attempts a WHERE a.task_id = cur.id AND a.number = cur.n)
			RETURNING cur.ord, ` + tTaskCols + `)
		SELECT ord, ` + taskCols + ` FROM u`
	endRunLeanCTE = endRunArgs + `
		cur AS (
			SELECT t.id, t.state AS old_state, v.ord, v.to_state, v.at, v.set_attempt, v.set_result, v.result, v.last_error, v.run_at,
				v.reason, v.detail, v.actor, v.a_number, v.a_worker, v.a_start, v.a_duration, v.a_outcome, v.a_class, v.a_error, v.a_stack
			FROM v JOIN ledger_tasks t ON t.id = v.id
			WHERE t.state = ANY(string_to_array(v.from_states, ',')) AND (v.below <= 0 OR t.attempt < v.below)
				AND t.end_ev_seq IS NULL AND v.a_task = v.id AND t.run_attempt = v.a_number
			ORDER BY t.id FOR UPDATE OF t),
		u AS (
			UPDATE ledger_tasks t SET state = cur.to_state, updated_at = cur.at, event_seq = t.event_seq + 1,
				attempt = CASE WHEN cur.set_attempt > 0 THEN cur.set_attempt ELSE t.attempt END,
				result = CASE WHEN cur.set_result THEN cur.result ELSE t.result END,
				last_error = COALESCE(cur.last_error, t.last_error),
				run_at = COALESCE(cur.run_at, t.run_at),
				lease_until = CASE WHEN cur.to_state = 'running' THEN t.lease_until ELSE NULL END,
				run_worker = CASE WHEN cur.a_worker <> '' THEN cur.a_worker ELSE t.run_worker END,
				run_start = COALESCE(cur.a_start, t.run_start),
				run_duration = cur.a_duration, run_outcome = cur.a_outcome, run_class = cur.a_class, run_error = cur.a_error, run_stack = cur.a_stack,
				end_ev_seq = t.event_seq + 1, end_ev_at = cur.at, end_ev_from = cur.old_state, end_ev_to = cur.to_state,
				end_ev_reason = cur.reason, end_ev_detail = cur.detail, end_ev_actor = cur.actor
			FROM cur WHERE t.id = cur.id
				AND NOT EXISTS (SELECT 1 FROM ledger_attempts x WHERE x.task_id = cur.id AND x.number = cur.a_number)
			RETURNING cur.ord, cur.old_state, cur.to_state AS new_state, t.watched, ` + tTaskCols + `)
		SELECT ord, ` + taskCols + ` FROM u ` + endNoteJoin
)

// BenchmarkLeanArray compares, on one connection and backend, the lean
// BeginRun and EndRun array statements (lean.go: one UPDATE … FROM the
// argument rows, the rows in ID order) with the form they replaced
// (beginRunLeanCTE, endRunLeanCTE: locked first in a CTE, ORDER BY t.id
// FOR UPDATE), alternated round by round: groups of g tasks, created
// (not measured), then begun and ended, each array statement one pgx
// batch (arrayPlanSQL, the statement) in one transaction, every row
// read. It reports the backend's CPU per task of each statement of each
// form (/proc; the server must be on this machine):
//
//	go test ./ledger/postgres/ -run '^$' -bench LeanArray -benchtime 8000x
func BenchmarkLeanArray(b *testing.B) {
	for _, g := range []int{8, 32} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			ctx := context.Background()
			_, c, cpu := benchBackend(b)
			create := &batchKind{ordinals: true}
			// send takes n tasks through the lean statements begin and
			// end, g a statement, and returns the backend's CPU in each.
			send := func(begin, end string, n int) (bc, ec float64) {
				for i := 0; i < n; i += g {
					now := time.Now()
					var cr, br, er []*groupReq
					for range min(g, n-i) {
						id := broker.NewID()
						cr = append(cr, &groupReq{args: []any{id, "", "", "k", "batch", "", []byte(`{"n":1}`), "queued", 0, 0, nil, nil, nil, nil, "", now}})
						br = append(br, &groupReq{args: []any{id, 1, time.Minute.Microseconds(), now, "w", now}})
						er = append(er, &groupReq{args: []any{id, "completed", now, 1, false, []byte{}, nil, nil, []string{"running"}, "succeeded", "", "", 0,
							id, 1, "", nil, int64(time.Millisecond), "ok", "", "", ""}})
					}
					sendArray(ctx, b, c, create, createKind.array, cr)
					c0 := cpu()
					sendArray(ctx, b, c, beginRunLeanKind, begin, br)
					c1 := cpu()
					sendArray(ctx, b, c, endRunLeanKind, end, er)
					bc += c1 - c0
					ec += cpu() - c1
				}
				return bc, ec
			}
			// Warm both plans, then alternate in rounds.
			send(beginRunLeanKind.array, endRunLeanKind.array, 4*g)
			send(beginRunLeanCTE, endRunLeanCTE, 4*g)
			const rounds = 8
			per := max(b.N/rounds, g)
			var nb, ne, ob, oe float64
			b.ResetTimer()
			for r := range rounds {
				for i := range 2 {
					if (r+i)%2 == 0 {
						x, y := send(beginRunLeanKind.array, endRunLeanKind.array, per)
						nb, ne = nb+x, ne+y
					} else {
						x, y := send(beginRunLeanCTE, endRunLeanCTE, per)
						ob, oe = ob+x, oe+y
					}
				}
			}
			b.StopTimer()
			f := float64(rounds * per)
			b.ReportMetric((ob+oe)*1e6/f, "cte-pg-µs/task")
			b.ReportMetric((nb+ne)*1e6/f, "update-pg-µs/task")
			b.ReportMetric(ob*1e6/f, "cte-begin-µs/task")
			b.ReportMetric(nb*1e6/f, "update-begin-µs/task")
			b.ReportMetric(oe*1e6/f, "cte-end-µs/task")
			b.ReportMetric(ne*1e6/f, "update-end-µs/task")
		})
	}
}
