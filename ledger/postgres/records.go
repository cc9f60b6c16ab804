package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// StartAttempt implements ledger.Ledger. Starting an attempt number that
// is already recorded updates its worker and start time.
func (s *Store) StartAttempt(ctx context.Context, a ledger.Attempt) error {
	const op = "postgres: start attempt"
	if err := store.Attempt(op, &a); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	if a.Start.IsZero() {
		a.Start = s.opts.Now()
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO ledger_attempts (task_id, number, worker, start_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (task_id, number) DO UPDATE SET worker = EXCLUDED.worker, start_at = EXCLUDED.start_at`,
		a.TaskID, a.Number, a.Worker, a.Start)
	if isFK(err) {
		return store.NotFound(op, "task %s", a.TaskID)
	}
	return classify(op, err, true)
}

// finishAttemptSQL records an attempt's outcome ($1 task … $9 stack):
// FinishAttempt, and EndRun's statements (run.go).
const finishAttemptSQL = `INSERT INTO ledger_attempts (task_id, number, worker, start_at, duration_ns, outcome, class, error, stack)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (task_id, number) DO UPDATE SET
			worker = CASE WHEN EXCLUDED.worker <> '' THEN EXCLUDED.worker ELSE ledger_attempts.worker END,
			start_at = COALESCE(EXCLUDED.start_at, ledger_attempts.start_at),
			duration_ns = EXCLUDED.duration_ns, outcome = EXCLUDED.outcome, class = EXCLUDED.class,
			error = EXCLUDED.error, stack = EXCLUDED.stack`

// FinishAttempt implements ledger.Ledger. Empty Worker and zero Start keep
// what StartAttempt recorded.
func (s *Store) FinishAttempt(ctx context.Context, a ledger.Attempt) error {
	const op = "postgres: finish attempt"
	if err := store.Attempt(op, &a); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, finishAttemptSQL,
		a.TaskID, a.Number, a.Worker, tsOrNil(a.Start), int64(a.Duration), a.Outcome, a.Class, a.Error, a.Stack)
	if isFK(err) {
		return store.NotFound(op, "task %s", a.TaskID)
	}
	return classify(op, err, true)
}

// Attempts implements ledger.Ledger. An unknown task has no attempts.
func (s *Store) Attempts(ctx context.Context, taskID string) ([]ledger.Attempt, error) {
	const op = "postgres: attempts"
	if err := store.ID(op, taskID); err != nil {
		return nil, err
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT number, worker, start_at, duration_ns, outcome, class, error, stack
		FROM ledger_attempts WHERE task_id = $1 ORDER BY number`, taskID)
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
	if len(out) == 0 {
		out = nil
	}
	return out, classify(op, err, false)
}

// Events implements ledger.Ledger. An unknown task has no events.
func (s *Store) Events(ctx context.Context, taskID string) ([]ledger.Event, error) {
	const op = "postgres: events"
	if err := store.ID(op, taskID); err != nil {
		return nil, err
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, at, from_state, to_state, reason, detail, actor
		FROM ledger_events WHERE task_id = $1 ORDER BY seq`, taskID)
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
	if len(out) == 0 {
		out = nil
	}
	return out, classify(op, err, false)
}

// AppendEvent implements ledger.Ledger. e.Seq is assigned; a zero e.At is
// now.
func (s *Store) AppendEvent(ctx context.Context, e ledger.Event) error {
	const op = "postgres: append event"
	if err := store.Event(op, &e); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	if e.At.IsZero() {
		e.At = s.opts.Now()
	}
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

// GetStep implements ledger.Ledger.
func (s *Store) GetStep(ctx context.Context, taskID, name string) ([]byte, bool, error) {
	const op = "postgres: get step"
	if err := store.ID(op, taskID); err != nil {
		return nil, false, err
	}
	if err := store.Key(op, "step name", name); err != nil {
		return nil, false, err
	}
	if err := s.check(op); err != nil {
		return nil, false, err
	}
	var out []byte
	err := s.pool.QueryRow(ctx, `SELECT output FROM ledger_steps WHERE task_id = $1 AND name = $2`, taskID, name).Scan(&out)
	if isNoRows(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, classify(op, err, false)
	}
	if out == nil {
		out = []byte{}
	}
	return out, true, nil
}

// PutStep implements ledger.Ledger with INSERT … ON CONFLICT DO NOTHING. A
// nil output is stored as empty.
func (s *Store) PutStep(ctx context.Context, taskID, name string, output []byte) ([]byte, error) {
	const op = "postgres: put step"
	if err := store.ID(op, taskID); err != nil {
		return nil, err
	}
	if err := store.Key(op, "step name", name); err != nil {
		return nil, err
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	if output == nil {
		output = []byte{}
	}
	// A conflicting insert waits for the first writer to commit, so the
	// stored row is visible to the statement that follows.
	var stored []byte
	err := s.queryRow(ctx, `WITH ins AS (
			INSERT INTO ledger_steps (task_id, name, output, created_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (task_id, name) DO NOTHING RETURNING output)
		SELECT output FROM ins`, func(r pgx.Row) error { return r.Scan(&stored) }, taskID, name, output, s.opts.Now())
	if isFK(err) {
		return nil, store.NotFound(op, "task %s", taskID)
	}
	if isNoRows(err) {
		err = s.pool.QueryRow(ctx, `SELECT output FROM ledger_steps WHERE task_id = $1 AND name = $2`, taskID, name).Scan(&stored)
	}
	if err != nil {
		return nil, classify(op, err, true)
	}
	if stored == nil {
		stored = []byte{}
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

// BeginEffect implements ledger.Ledger.
func (s *Store) BeginEffect(ctx context.Context, taskID, key string, attempt int) (ledger.Effect, bool, error) {
	const op = "postgres: begin effect"
	if err := store.ID(op, taskID); err != nil {
		return ledger.Effect{}, false, err
	}
	if err := store.Key(op, "effect key", key); err != nil {
		return ledger.Effect{}, false, err
	}
	if attempt < 0 {
		return ledger.Effect{}, false, store.Invalid(op, "attempt %d is negative", attempt)
	}
	if err := s.check(op); err != nil {
		return ledger.Effect{}, false, err
	}
	now := s.opts.Now()
	var e ledger.Effect
	err := s.queryRow(ctx, `INSERT INTO ledger_effects (task_id, key, state, attempt, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (task_id, key) DO NOTHING RETURNING `+effectCols,
		func(r pgx.Row) (err error) { e, err = scanEffect(taskID, r); return err },
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

// SetEffect implements ledger.Ledger with an UPDATE guarded by
// state <> 'confirmed'. A nil result keeps the stored one.
func (s *Store) SetEffect(ctx context.Context, taskID, key string, state ledger.EffectState, result []byte) error {
	const op = "postgres: set effect"
	if err := store.ID(op, taskID); err != nil {
		return err
	}
	if err := store.Key(op, "effect key", key); err != nil {
		return err
	}
	if err := store.EffectState(op, state); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	tag, err := s.exec(ctx, `UPDATE ledger_effects SET state = $3, result = COALESCE($4::bytea, result), updated_at = $5
		WHERE task_id = $1 AND key = $2 AND state <> 'confirmed'`, taskID, key, string(state), result, s.opts.Now())
	if err != nil {
		return classify(op, err, true)
	}
	if tag.RowsAffected() == 1 {
		return nil
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

// Effects implements ledger.Ledger, in the order they were begun.
func (s *Store) Effects(ctx context.Context, taskID string) ([]ledger.Effect, error) {
	const op = "postgres: effects"
	if err := store.ID(op, taskID); err != nil {
		return nil, err
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+effectCols+` FROM ledger_effects WHERE task_id = $1 ORDER BY created_at, key`, taskID)
	if err != nil {
		return nil, classify(op, err, false)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Effect, error) { return scanEffect(taskID, r) })
	if len(out) == 0 {
		out = nil
	}
	return out, classify(op, err, false)
}

// Claim implements broker.DedupStore with an upsert that replaces only an
// expired claim.
func (s *Store) Claim(ctx context.Context, lane, tenant, key, id string) (string, bool, error) {
	const op = "postgres: dedup claim"
	if err := store.Dedup(op, lane, tenant, key, id); err != nil {
		return "", false, err
	}
	if err := s.check(op); err != nil {
		return "", false, err
	}
	for range 3 {
		now := s.opts.Now()
		var got string
		err := s.queryRow(ctx, `INSERT INTO ledger_dedup (lane, tenant, key, id, claimed_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (lane, tenant, key) DO UPDATE SET id = EXCLUDED.id, claimed_at = EXCLUDED.claimed_at
			WHERE ledger_dedup.claimed_at < $6
			RETURNING id`, func(r pgx.Row) error { return r.Scan(&got) }, lane, tenant, key, id, now, now.Add(-s.opts.DedupWindow))
		if err == nil {
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

// Release implements broker.DedupStore: it forgets the claim when id still
// holds it.
func (s *Store) Release(ctx context.Context, lane, tenant, key, id string) error {
	const op = "postgres: dedup release"
	if err := store.Dedup(op, lane, tenant, key, id); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM ledger_dedup WHERE lane = $1 AND tenant = $2 AND key = $3 AND id = $4`, lane, tenant, key, id)
	return classify(op, err, true)
}
