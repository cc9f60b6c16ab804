package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// StartAttempt implements front.Backend.
func (s backend) StartAttempt(ctx context.Context, op string, a ledger.Attempt) error {
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.txExec(ctx, tx, `INSERT INTO ledger_attempts (task_id, number, worker, start_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (task_id, number) DO UPDATE SET worker = excluded.worker, start_at = excluded.start_at`,
			a.TaskID, a.Number, a.Worker, a.Start.UnixNano())
		if isFK(err) {
			return store.NotFound(op, "task %s", a.TaskID)
		}
		return err
	})
}

// finishAttemptSQL records an attempt's outcome (FinishAttempt, EndRun
// alone): ?1 task … ?9 stack. An empty worker and a NULL start keep what
// is recorded: the attempt's row, or, before it has one, its start in the
// task row (BeginRun keeps a run's start there since migration 0014 and
// writes no attempt row).
const finishAttemptSQL = `INSERT INTO ledger_attempts (task_id, number, worker, start_at, duration_ns, outcome, class, error, stack)
		SELECT ?1, ?2, CASE WHEN ?3 <> '' THEN ?3 ELSE COALESCE(r.run_worker, '') END, COALESCE(?4, r.run_start), ?5, ?6, ?7, ?8, ?9
		FROM (SELECT 1) one LEFT JOIN ledger_tasks r ON r.id = ?1 AND r.run_attempt = ?2
		WHERE true` + finishAttemptTail

// finishAttemptHead and finishAttemptTail surround a grouped EndRun's
// rows (batch.go), whose empty workers and NULL starts the group has
// already taken from the task rows it read.
const finishAttemptHead = `INSERT INTO ledger_attempts (task_id, number, worker, start_at, duration_ns, outcome, class, error, stack) VALUES `

const finishAttemptTail = `
			ON CONFLICT (task_id, number) DO UPDATE SET
				worker = CASE WHEN excluded.worker <> '' THEN excluded.worker ELSE worker END,
				start_at = COALESCE(excluded.start_at, start_at),
				duration_ns = excluded.duration_ns, outcome = excluded.outcome, class = excluded.class,
				error = excluded.error, stack = excluded.stack`

// FinishAttempt implements front.Backend.
func (s backend) FinishAttempt(ctx context.Context, op string, a ledger.Attempt) error {
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.txExec(ctx, tx, finishAttemptSQL,
			a.TaskID, a.Number, a.Worker, nanos(a.Start), int64(a.Duration), a.Outcome, a.Class, a.Error, a.Stack)
		if isFK(err) {
			return store.NotFound(op, "task %s", a.TaskID)
		}
		return err
	})
}

// Attempts implements front.Backend.
func (s backend) Attempts(ctx context.Context, op, taskID string) ([]ledger.Attempt, error) {
	// A running attempt without its row yet is in the task row (BeginRun).
	rows, err := s.rQuery(ctx, `SELECT number, worker, start_at, duration_ns, outcome, class, error, stack
			FROM ledger_attempts WHERE task_id = ?1
		UNION ALL
		SELECT run_attempt, COALESCE(run_worker, ''), run_start, 0, '', '', '', '' FROM ledger_tasks t
			WHERE id = ?1 AND run_attempt IS NOT NULL
				AND NOT EXISTS (SELECT 1 FROM ledger_attempts a WHERE a.task_id = ?1 AND a.number = t.run_attempt)
		ORDER BY 1`, taskID)
	if err != nil {
		return nil, s.classify(op, err)
	}
	defer rows.Close()
	var out []ledger.Attempt
	for rows.Next() {
		a := ledger.Attempt{TaskID: taskID}
		var start sql.NullInt64
		var dur int64
		if err := rows.Scan(&a.Number, &a.Worker, &start, &dur, &a.Outcome, &a.Class, &a.Error, &a.Stack); err != nil {
			return nil, s.classify(op, err)
		}
		a.Start, a.Duration = fromNanos(start), time.Duration(dur)
		out = append(out, a)
	}
	return out, s.classify(op, rows.Err())
}

// enqueuedEventSQL is a task's "enqueued" event (seq 1), derived from its
// row (both parameters are the task's ID): since migration 0012 no path
// writes it as a row (every task is created queued, at created_at, by no
// actor). A task created before keeps its row, and then nothing is
// derived.
const enqueuedEventSQL = `SELECT 1 AS seq, created_at AS at, '' AS from_state, 'queued' AS to_state,
		'enqueued' AS reason, '' AS detail, '' AS actor
	FROM ledger_tasks WHERE id = ? AND NOT EXISTS (SELECT 1 FROM ledger_events WHERE task_id = ? AND seq = 1)`

// heldEventsSQL is the events a task row holds (migration 0015: the last
// run's start, BeginRun's, whose actor is the run's worker, and the last
// EndRun's move), each until the next BeginRun or EndRun writes it as a
// row; both parameters are the task's ID.
const heldEventsSQL = `SELECT run_ev_seq AS seq, run_ev_at AS at, run_ev_from AS from_state, 'running' AS to_state,
		run_ev_reason AS reason, run_ev_detail AS detail, COALESCE(run_worker, '') AS actor
	FROM ledger_tasks WHERE id = ? AND run_ev_seq IS NOT NULL
	UNION ALL
	SELECT end_ev_seq, end_ev_at, end_ev_from, end_ev_to, end_ev_reason, end_ev_detail, end_ev_actor
	FROM ledger_tasks WHERE id = ? AND end_ev_seq IS NOT NULL`

// Events implements front.Backend.
func (s backend) Events(ctx context.Context, op, taskID string) ([]ledger.Event, error) {
	rows, err := s.rQuery(ctx, enqueuedEventSQL+`
		UNION ALL
		`+heldEventsSQL+`
		UNION ALL
		SELECT seq, at, from_state, to_state, reason, detail, actor FROM ledger_events WHERE task_id = ?
		ORDER BY 1`, taskID, taskID, taskID, taskID, taskID)
	if err != nil {
		return nil, s.classify(op, err)
	}
	defer rows.Close()
	var out []ledger.Event
	for rows.Next() {
		e := ledger.Event{TaskID: taskID}
		var at int64
		var from, to string
		if err := rows.Scan(&e.Seq, &at, &from, &to, &e.Reason, &e.Detail, &e.Actor); err != nil {
			return nil, s.classify(op, err)
		}
		e.At, e.From, e.To = time.Unix(0, at), ledger.State(from), ledger.State(to)
		out = append(out, e)
	}
	return out, s.classify(op, rows.Err())
}

// AppendEvent implements front.Backend.
func (s backend) AppendEvent(ctx context.Context, op string, e ledger.Event) error {
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		var seq int64
		err := s.txQueryRow(ctx, tx, `UPDATE ledger_tasks SET event_seq = event_seq + 1 WHERE id = ? RETURNING event_seq`, e.TaskID).Scan(&seq)
		if errors.Is(err, sql.ErrNoRows) {
			return store.NotFound(op, "task %s", e.TaskID)
		}
		if err != nil {
			return err
		}
		_, err = s.txExec(ctx, tx, `INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, e.TaskID, seq, e.At.UnixNano(), string(e.From), string(e.To), e.Reason, e.Detail, e.Actor)
		return err
	})
}

// GetStep implements front.Backend.
func (s backend) GetStep(ctx context.Context, op, taskID, name string) ([]byte, bool, error) {
	var out []byte
	err := s.rQueryRow(ctx, `SELECT output FROM ledger_steps WHERE task_id = ? AND name = ?`, taskID, name).Scan(&out)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, s.classify(op, err)
	}
	return out, true, nil
}

// PutStep implements front.Backend.
func (s backend) PutStep(ctx context.Context, op, taskID, name string, output []byte) ([]byte, error) {
	var stored []byte
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.txExec(ctx, tx, `INSERT INTO ledger_steps (task_id, name, output, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (task_id, name) DO NOTHING`, taskID, name, output, s.opts.Now().UnixNano())
		if isFK(err) {
			return store.NotFound(op, "task %s", taskID)
		}
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			stored = output
			return nil
		}
		return s.txQueryRow(ctx, tx, `SELECT output FROM ledger_steps WHERE task_id = ? AND name = ?`, taskID, name).Scan(&stored)
	})
	return stored, err
}

const effectCols = `key, state, attempt, result, updated_at`

func scanEffect(taskID string, r scanner) (ledger.Effect, error) {
	e := ledger.Effect{TaskID: taskID}
	var state string
	var at int64
	if err := r.Scan(&e.Key, &state, &e.Attempt, &e.Result, &at); err != nil {
		return e, err
	}
	e.State, e.UpdatedAt = ledger.EffectState(state), time.Unix(0, at)
	return e, nil
}

// BeginEffect implements front.Backend.
func (s backend) BeginEffect(ctx context.Context, op, taskID, key string, attempt int) (ledger.Effect, bool, error) {
	var (
		e     ledger.Effect
		begun bool
	)
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		now := s.opts.Now()
		res, err := s.txExec(ctx, tx, `INSERT INTO ledger_effects (task_id, key, state, attempt, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (task_id, key) DO NOTHING`,
			taskID, key, string(ledger.EffectPending), attempt, now.UnixNano(), now.UnixNano())
		if isFK(err) {
			return store.NotFound(op, "task %s", taskID)
		}
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			e = ledger.Effect{TaskID: taskID, Key: key, State: ledger.EffectPending, Attempt: attempt, UpdatedAt: time.Unix(0, now.UnixNano())}
			begun = true
			return nil
		}
		e, err = scanEffect(taskID, s.txQueryRow(ctx, tx, `SELECT `+effectCols+` FROM ledger_effects WHERE task_id = ? AND key = ?`, taskID, key))
		return err
	})
	return e, begun, err
}

// SetEffect implements front.Backend.
func (s backend) SetEffect(ctx context.Context, op, taskID, key string, state ledger.EffectState, result []byte) error {
	var res any
	if result != nil {
		res = result
	}
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		var cur string
		err := s.txQueryRow(ctx, tx, `SELECT state FROM ledger_effects WHERE task_id = ? AND key = ?`, taskID, key).Scan(&cur)
		if errors.Is(err, sql.ErrNoRows) {
			return store.NotFound(op, "effect %q of task %s", key, taskID)
		}
		if err != nil {
			return err
		}
		if ledger.EffectState(cur) == ledger.EffectConfirmed {
			return store.Conflictf(op, "effect %q of task %s is confirmed and never changes", key, taskID)
		}
		_, err = s.txExec(ctx, tx, `UPDATE ledger_effects SET state = ?, result = COALESCE(?, result), updated_at = ?
			WHERE task_id = ? AND key = ?`, string(state), res, s.opts.Now().UnixNano(), taskID, key)
		return err
	})
}

// Effects implements front.Backend.
func (s backend) Effects(ctx context.Context, op, taskID string) ([]ledger.Effect, error) {
	rows, err := s.rQuery(ctx, `SELECT `+effectCols+` FROM ledger_effects WHERE task_id = ? ORDER BY created_at, key`, taskID)
	if err != nil {
		return nil, s.classify(op, err)
	}
	defer rows.Close()
	var out []ledger.Effect
	for rows.Next() {
		e, err := scanEffect(taskID, rows)
		if err != nil {
			return nil, s.classify(op, err)
		}
		out = append(out, e)
	}
	return out, s.classify(op, rows.Err())
}
