package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// StartAttempt implements front.Backend. Starting an attempt number that
// is already recorded updates its worker and start time.
func (s backend) StartAttempt(ctx context.Context, op string, a ledger.Attempt) error {
	// The attempt's row takes the end the task row may hold for it
	// (migration 0014), as an existing row keeps its own.
	_, err := s.pool.Exec(ctx, `INSERT INTO ledger_attempts (task_id, number, worker, start_at, duration_ns, outcome, class, error, stack)
		SELECT $1::text, $2::integer, $3::text, $4::timestamptz, COALESCE(r.d, 0), COALESCE(r.o, ''), COALESCE(r.c, ''), COALESCE(r.e, ''), COALESCE(r.st, '')
		FROM (SELECT 1) one LEFT JOIN (
			SELECT run_duration AS d, run_outcome AS o, run_class AS c, run_error AS e, run_stack AS st
			FROM ledger_tasks WHERE id = $1::text AND run_attempt = $2::integer) r ON true
		ON CONFLICT (task_id, number) DO UPDATE SET worker = EXCLUDED.worker, start_at = EXCLUDED.start_at`,
		a.TaskID, a.Number, a.Worker, a.Start)
	if isFK(err) {
		return store.NotFound(op, "task %s", a.TaskID)
	}
	return classify(op, err, true)
}

// finishAttemptSQL records an attempt's outcome ($1 task … $9 stack):
// FinishAttempt, and EndRun's statements (run.go). An empty worker and a
// NULL start keep what is recorded: the attempt's row, or, before it has
// one, its start in the task row (beginRunSQL).
const finishAttemptSQL = finishAttemptSelect + `
		` + finishAttemptConflict

// finishAttemptSelect and finishAttemptConflict are finishAttemptSQL's
// two halves, for EndRun's statement to put its condition between.
const (
	finishAttemptSelect = `INSERT INTO ledger_attempts (task_id, number, worker, start_at, duration_ns, outcome, class, error, stack)
		SELECT $1::text, $2::integer, CASE WHEN $3::text <> '' THEN $3::text ELSE COALESCE(r.w, '') END,
			COALESCE($4::timestamptz, r.s), $5::bigint, $6::text, $7::text, $8::text, $9::text
		FROM (SELECT 1) one LEFT JOIN (
			SELECT run_worker AS w, run_start AS s FROM ledger_tasks WHERE id = $1::text AND run_attempt = $2::integer) r ON true`
	finishAttemptConflict = `ON CONFLICT (task_id, number) DO UPDATE SET
			worker = CASE WHEN EXCLUDED.worker <> '' THEN EXCLUDED.worker ELSE ledger_attempts.worker END,
			start_at = COALESCE(EXCLUDED.start_at, ledger_attempts.start_at),
			duration_ns = EXCLUDED.duration_ns, outcome = EXCLUDED.outcome, class = EXCLUDED.class,
			error = EXCLUDED.error, stack = EXCLUDED.stack`
)

// FinishAttempt implements front.Backend. Empty Worker and zero Start keep
// what StartAttempt recorded.
func (s backend) FinishAttempt(ctx context.Context, op string, a ledger.Attempt) error {
	_, err := s.pool.Exec(ctx, finishAttemptSQL,
		a.TaskID, a.Number, a.Worker, tsOrNil(a.Start), int64(a.Duration), a.Outcome, a.Class, a.Error, a.Stack)
	if isFK(err) {
		return store.NotFound(op, "task %s", a.TaskID)
	}
	return classify(op, err, true)
}

// Attempts implements front.Backend. An unknown task has no attempts.
func (s backend) Attempts(ctx context.Context, op string, taskID string) ([]ledger.Attempt, error) {
	// The attempt the task row holds, when it has no row yet, is read
	// from there (beginRunSQL, endRunSQL): its end is NULL while it runs.
	rows, err := s.pool.Query(ctx, `SELECT number, worker, start_at, duration_ns, outcome, class, error, stack
			FROM ledger_attempts WHERE task_id = $1
		UNION ALL
		SELECT run_attempt, run_worker, run_start, COALESCE(run_duration, 0), COALESCE(run_outcome, ''), COALESCE(run_class, ''),
			COALESCE(run_error, ''), COALESCE(run_stack, '') FROM ledger_tasks t
			WHERE id = $1 AND run_attempt IS NOT NULL
				AND NOT EXISTS (SELECT 1 FROM ledger_attempts a WHERE a.task_id = $1 AND a.number = t.run_attempt)
		ORDER BY 1`, taskID)
	if err != nil {
		return nil, classify(op, err, false)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Attempt, error) {
		a := ledger.Attempt{TaskID: taskID}
		var start *time.Time
		var dur int64
		err := r.Scan(&a.Number, &a.Worker, &start, &dur, &a.Outcome, &a.Class, &a.Error, &a.Stack)
		if start != nil {
			a.Start = *start
		}
		a.Duration = time.Duration(dur)
		return a, err
	})
	return out, classify(op, err, false)
}

// enqueuedEventSQL is a task's "enqueued" event (seq 1), derived from its
// row ($1 is the task's ID): since migration 0012 no path writes it as a
// row (every task is created queued, at created_at, by no actor). A task
// created before keeps its row, and then nothing is derived.
const enqueuedEventSQL = `SELECT 1::bigint AS seq, created_at AS at, ''::text AS from_state, 'queued'::text AS to_state,
		'enqueued'::text AS reason, ''::text AS detail, ''::text AS actor
	FROM ledger_tasks WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM ledger_events WHERE task_id = $1 AND seq = 1)`

// startEventSQL is the start event of the attempt the task row holds
// ($1 is the task's ID): since migration 0014 BeginRun keeps it in the
// task row (run_ev_*) and writes its row only when the next BeginRun
// replaces it, so no row has its seq.
const startEventSQL = `SELECT run_ev_seq AS seq, run_ev_at AS at, run_ev_from AS from_state, 'running'::text AS to_state,
		run_ev_reason AS reason, run_ev_detail AS detail, run_ev_actor AS actor
	FROM ledger_tasks WHERE id = $1 AND run_ev_seq IS NOT NULL`

// endEventSQL is the event of the last EndRun's move ($1 is the task's
// ID): since migration 0015 EndRun keeps it in the task row (end_ev_*)
// and writes its row only when the next EndRun replaces it, so no row has
// its seq.
const endEventSQL = `SELECT end_ev_seq AS seq, end_ev_at AS at, end_ev_from AS from_state, end_ev_to AS to_state,
		end_ev_reason AS reason, end_ev_detail AS detail, end_ev_actor AS actor
	FROM ledger_tasks WHERE id = $1 AND end_ev_seq IS NOT NULL`

// Events implements front.Backend. An unknown task has no events.
func (s backend) Events(ctx context.Context, op string, taskID string) ([]ledger.Event, error) {
	rows, err := s.pool.Query(ctx, enqueuedEventSQL+`
		UNION ALL
		`+startEventSQL+`
		UNION ALL
		`+endEventSQL+`
		UNION ALL
		SELECT seq, at, from_state, to_state, reason, detail, actor FROM ledger_events WHERE task_id = $1
		ORDER BY 1`, taskID)
	if err != nil {
		return nil, classify(op, err, false)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Event, error) {
		e := ledger.Event{TaskID: taskID}
		var from, to string
		err := r.Scan(&e.Seq, &e.At, &from, &to, &e.Reason, &e.Detail, &e.Actor)
		e.From, e.To = ledger.State(from), ledger.State(to)
		return e, err
	})
	return out, classify(op, err, false)
}

// AppendEvent implements front.Backend. e.Seq is assigned; a zero e.At is
// now.
func (s backend) AppendEvent(ctx context.Context, op string, e ledger.Event) error {
	tag, err := s.pool.Exec(ctx, `WITH u AS (
			UPDATE ledger_tasks SET event_seq = event_seq + 1 WHERE id = $1 RETURNING id, event_seq)
		INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
		SELECT id, event_seq, $2, $3, $4, $5, $6, $7 FROM u`,
		e.TaskID, e.At, string(e.From), string(e.To), e.Reason, e.Detail, e.Actor)
	if err != nil {
		return classify(op, err, true)
	}
	if tag.RowsAffected() == 0 {
		return store.NotFound(op, "task %s", e.TaskID)
	}
	return nil
}

// GetStep implements front.Backend.
func (s backend) GetStep(ctx context.Context, op string, taskID, name string) ([]byte, bool, error) {
	var out []byte
	err := s.pool.QueryRow(ctx, `SELECT output FROM ledger_steps WHERE task_id = $1 AND name = $2`, taskID, name).Scan(&out)
	if isNoRows(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, classify(op, err, false)
	}
	return out, true, nil
}

// putStepKind is PutStep's write; in a group, all of them are one
// INSERT … SELECT over the unnested arguments (argRows, batch.go).
var putStepKind = &batchKind{
	ordinals: true,
	name:     "put step",
	single: `WITH ins AS (
			INSERT INTO ledger_steps (task_id, name, output, created_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (task_id, name) DO NOTHING RETURNING output)
		SELECT output FROM ins`,
	array: `WITH v AS (
			` + argRows("task_id text", "name text", "output bytea", "created_at timestamptz") + `),
		ins AS (
			INSERT INTO ledger_steps (task_id, name, output, created_at)
			SELECT task_id, name, output, created_at FROM v ORDER BY task_id, name
			ON CONFLICT (task_id, name) DO NOTHING RETURNING task_id, name, output)
		SELECT v.ord, ins.output FROM ins JOIN v ON v.task_id = ins.task_id AND v.name = ins.name`,
}

// PutStep implements front.Backend with INSERT … ON CONFLICT DO NOTHING. A
// nil output is stored as empty.
func (s backend) PutStep(ctx context.Context, op string, taskID, name string, output []byte) ([]byte, error) {
	if output == nil {
		output = []byte{}
	}
	// A conflicting insert waits for the first writer to commit, so the
	// stored row is visible to the statement that follows.
	var stored []byte
	err := s.queryRowKind(ctx, putStepKind, func(r pgx.Row) error { return r.Scan(&stored) }, taskID, name, output, s.opts.Now())
	if isFK(err) {
		return nil, store.NotFound(op, "task %s", taskID)
	}
	if isNoRows(err) {
		err = s.pool.QueryRow(ctx, `SELECT output FROM ledger_steps WHERE task_id = $1 AND name = $2`, taskID, name).Scan(&stored)
	}
	if err != nil {
		return nil, classify(op, err, true)
	}
	return stored, nil
}

const effectCols = `key, state, attempt, result, updated_at`

func scanEffect(taskID string, r pgx.Row) (ledger.Effect, error) {
	e := ledger.Effect{TaskID: taskID}
	var state string
	err := r.Scan(&e.Key, &state, &e.Attempt, &e.Result, &e.UpdatedAt)
	e.State = ledger.EffectState(state)
	return e, err
}

// beginEffectKind is BeginEffect's write; in a group, all of them are one
// INSERT … SELECT over the unnested arguments (argRows, batch.go).
var beginEffectKind = &batchKind{
	ordinals: true,
	name:     "begin effect",
	single: `INSERT INTO ledger_effects (task_id, key, state, attempt, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (task_id, key) DO NOTHING RETURNING ` + effectCols,
	array: `WITH v AS (
			` + argRows("task_id text", "key text", "state text", "attempt integer", "at timestamptz") + `),
		ins AS (
			INSERT INTO ledger_effects (task_id, key, state, attempt, created_at, updated_at)
			SELECT task_id, key, state, attempt, at, at FROM v ORDER BY task_id, key
			ON CONFLICT (task_id, key) DO NOTHING RETURNING task_id, ` + effectCols + `)
		SELECT v.ord, ins.key, ins.state, ins.attempt, ins.result, ins.updated_at
		FROM ins JOIN v ON v.task_id = ins.task_id AND v.key = ins.key`,
}

// BeginEffect implements front.Backend.
func (s backend) BeginEffect(ctx context.Context, op string, taskID, key string, attempt int) (ledger.Effect, bool, error) {
	now := s.opts.Now()
	var e ledger.Effect
	err := s.queryRowKind(ctx, beginEffectKind, func(r pgx.Row) (err error) { e, err = scanEffect(taskID, r); return err },
		taskID, key, string(ledger.EffectPending), attempt, now)
	if err == nil {
		return e, true, nil
	}
	if isFK(err) {
		return ledger.Effect{}, false, store.NotFound(op, "task %s", taskID)
	}
	if !isNoRows(err) {
		return ledger.Effect{}, false, classify(op, err, true)
	}
	e, err = scanEffect(taskID, s.pool.QueryRow(ctx, `SELECT `+effectCols+` FROM ledger_effects WHERE task_id = $1 AND key = $2`, taskID, key))
	return e, false, classify(op, err, false)
}

// setEffectKind is SetEffect's write; in a group, all of them are one
// UPDATE … FROM the unnested arguments (argRows, batch.go).
var setEffectKind = &batchKind{
	ordinals: true,
	name:     "set effect",
	single: `UPDATE ledger_effects SET state = $3, result = COALESCE($4::bytea, result), updated_at = $5
		WHERE task_id = $1 AND key = $2 AND state <> 'confirmed' RETURNING 1`,
	array: `WITH v AS (
			` + argRows("task_id text", "key text", "state text", "result bytea", "at timestamptz") + `)
		UPDATE ledger_effects e SET state = v.state, result = COALESCE(v.result, e.result), updated_at = v.at
		FROM v WHERE e.task_id = v.task_id AND e.key = v.key AND e.state <> 'confirmed'
		RETURNING v.ord, 1`,
}

// SetEffect implements front.Backend with an UPDATE guarded by
// state <> 'confirmed'. A nil result keeps the stored one.
func (s backend) SetEffect(ctx context.Context, op string, taskID, key string, state ledger.EffectState, result []byte) error {
	err := s.queryRowKind(ctx, setEffectKind, func(r pgx.Row) error { var one int; return r.Scan(&one) },
		taskID, key, string(state), result, s.opts.Now())
	if err == nil {
		return nil
	}
	if !isNoRows(err) {
		return classify(op, err, true)
	}
	var cur string
	err = s.pool.QueryRow(ctx, `SELECT state FROM ledger_effects WHERE task_id = $1 AND key = $2`, taskID, key).Scan(&cur)
	if isNoRows(err) {
		return store.NotFound(op, "effect %q of task %s", key, taskID)
	}
	if err != nil {
		return classify(op, err, false)
	}
	return store.Conflictf(op, "effect %q of task %s is confirmed and never changes", key, taskID)
}

// Effects implements front.Backend, in the order they were begun.
func (s backend) Effects(ctx context.Context, op string, taskID string) ([]ledger.Effect, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+effectCols+` FROM ledger_effects WHERE task_id = $1 ORDER BY created_at, key`, taskID)
	if err != nil {
		return nil, classify(op, err, false)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Effect, error) { return scanEffect(taskID, r) })
	return out, classify(op, err, false)
}

// claimSQL claims (lane $1, tenant $2, key $3) for task $4 at $5, $6
// being the oldest claim still in force. A task row holding the key is a
// claim too, so an idempotent Enqueue claims its key once (the task's
// insert): when task $4 itself holds the key nothing is written, and a
// task of the same lane holding it, created within the window, is the
// duplicate. Otherwise the key is claimed in ledger_dedup (for publishes
// without a task), replacing only an expired claim. Rows: the holder's ID
// and whether it is a duplicate, or none when an unexpired claim holds
// the key.
const claimSQL = `WITH held AS (
		SELECT id, id <> $4 AS dup FROM ledger_tasks
		WHERE tenant = $2 AND idem_key = $3 AND idem_key <> '' AND (id = $4 OR (lane = $1 AND created_at >= $6))),
	ins AS (
		INSERT INTO ledger_dedup (lane, tenant, key, id, claimed_at)
		SELECT $1, $2, $3, $4, $5 WHERE NOT EXISTS (SELECT 1 FROM held)
		ON CONFLICT (lane, tenant, key) DO UPDATE SET id = EXCLUDED.id, claimed_at = EXCLUDED.claimed_at
		WHERE ledger_dedup.claimed_at < $6
		RETURNING id)
	SELECT id, dup FROM held UNION ALL SELECT id, false FROM ins`

// Claim implements front.Backend with claimSQL.
func (s backend) Claim(ctx context.Context, op string, lane, tenant, key, id string) (string, bool, error) {
	for range 3 {
		now := s.opts.Now()
		var got string
		var dup bool
		err := s.queryRow(ctx, claimSQL, func(r pgx.Row) error { return r.Scan(&got, &dup) },
			lane, tenant, key, id, now, now.Add(-s.opts.DedupWindow))
		if err == nil {
			if dup {
				return got, true, nil
			}
			return "", false, nil
		}
		if !isNoRows(err) {
			return "", false, classify(op, err, true)
		}
		err = s.pool.QueryRow(ctx, `SELECT id FROM ledger_dedup WHERE lane = $1 AND tenant = $2 AND key = $3`, lane, tenant, key).Scan(&got)
		if err == nil {
			return got, true, nil
		}
		if !isNoRows(err) {
			return "", false, classify(op, err, false)
		}
		// Released between the two statements: claim again.
	}
	return "", false, classify(op, errRetries, true)
}

// Release implements front.Backend: it forgets the claim when id still
// holds it.
func (s backend) Release(ctx context.Context, op string, lane, tenant, key, id string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM ledger_dedup WHERE lane = $1 AND tenant = $2 AND key = $3 AND id = $4`, lane, tenant, key, id)
	return classify(op, err, true)
}
