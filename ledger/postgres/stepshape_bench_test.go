package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// The PutStep, BeginEffect and SetEffect array statements as they were
// before they opened with argRows (issue 15, fourteenth pass, round 2):
// unnest(…) WITH ORDINALITY in FROM. Kept here as BenchmarkStepArray's
// reference.
const (
	putStepArrayOld = `WITH v AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::timestamptz[])
				WITH ORDINALITY AS v(task_id, name, output, created_at, ord)),
		ins AS (
			INSERT INTO ledger_steps (task_id, name, output, created_at)
			SELECT task_id, name, output, created_at FROM v ORDER BY task_id, name
			ON CONFLICT (task_id, name) DO NOTHING RETURNING task_id, name, output)
		SELECT v.ord, ins.output FROM ins JOIN v ON v.task_id = ins.task_id AND v.name = ins.name`
	beginEffectArrayOld = `WITH v AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::timestamptz[])
				WITH ORDINALITY AS v(task_id, key, state, attempt, at, ord)),
		ins AS (
			INSERT INTO ledger_effects (task_id, key, state, attempt, created_at, updated_at)
			SELECT task_id, key, state, attempt, at, at FROM v ORDER BY task_id, key
			ON CONFLICT (task_id, key) DO NOTHING RETURNING task_id, ` + effectCols + `)
		SELECT v.ord, ins.key, ins.state, ins.attempt, ins.result, ins.updated_at
		FROM ins JOIN v ON v.task_id = ins.task_id AND v.key = ins.key`
	setEffectArrayOld = `WITH v AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::timestamptz[])
				WITH ORDINALITY AS v(task_id, key, state, result, at, ord))
		UPDATE ledger_effects e SET state = v.state, result = COALESCE(v.result, e.result), updated_at = v.at
		FROM v WHERE e.task_id = v.task_id AND e.key = v.key AND e.state <> 'confirmed'
		RETURNING v.ord, 1`
)

// BenchmarkStepArray compares, on one connection and backend, the
// PutStep, BeginEffect and SetEffect array statements (argRows) with the
// unnest … WITH ORDINALITY forms they replaced, alternated round by
// round: per round, groups of g tasks each get a PutStep, a BeginEffect
// and a SetEffect array statement (each one pgx batch after arrayPlanSQL,
// one transaction, every row read). It reports the backend's CPU per
// task (three statements' share) of each (/proc; the server must be on
// this machine):
//
//	go test ./ledger/postgres/ -run '^$' -bench StepArray -benchtime 8000x
func BenchmarkStepArray(b *testing.B) {
	for _, g := range []int{8, 32} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			ctx := context.Background()
			_, c, cpu := benchBackend(b)
			// Tasks to hang steps and effects on.
			ids := make([]string, g)
			now := time.Now()
			for i := range ids {
				ids[i] = broker.NewID()
				if _, err := c.Exec(ctx, createKind.single, ids[i], "", "", "k", "batch", "", []byte(`{"n":1}`), "queued", 0, 0, nil, nil, nil, nil, "", now); err != nil {
					b.Fatal(err)
				}
			}
			newK := &batchKind{ordinals: true}
			oldK := &batchKind{}
			one := func(k *batchKind, sql string, args func(i int) []any) {
				rs := make([]*groupReq, g)
				for i := range rs {
					rs[i] = &groupReq{args: args(i)}
				}
				sendArray(ctx, b, c, k, sql, rs)
			}
			seq := 0
			send := func(old bool, n int) float64 {
				k, put, begin, set := newK, putStepKind.array, beginEffectKind.array, setEffectKind.array
				if old {
					k, put, begin, set = oldK, putStepArrayOld, beginEffectArrayOld, setEffectArrayOld
				}
				c0 := cpu()
				for range max(n/g, 1) {
					seq++
					name := fmt.Sprintf("s%d", seq)
					at := time.Now()
					one(k, put, func(i int) []any { return []any{ids[i], name, []byte(`"out"`), at} })
					one(k, begin, func(i int) []any { return []any{ids[i], name, "pending", 1, at} })
					one(k, set, func(i int) []any { return []any{ids[i], name, "confirmed", []byte(`"r"`), at} })
				}
				return cpu() - c0
			}
			send(false, 4*g)
			send(true, 4*g)
			const rounds = 8
			per := max(b.N/rounds/g, 1) * g
			var argRowsCPU, oldCPU float64
			b.ResetTimer()
			for r := range rounds {
				if r%2 == 0 {
					argRowsCPU += send(false, per)
					oldCPU += send(true, per)
				} else {
					oldCPU += send(true, per)
					argRowsCPU += send(false, per)
				}
			}
			b.StopTimer()
			b.ReportMetric(argRowsCPU*1e6/float64(rounds*per), "argrows-pg-µs/task")
			b.ReportMetric(oldCPU*1e6/float64(rounds*per), "ordinality-pg-µs/task")
		})
	}
}
