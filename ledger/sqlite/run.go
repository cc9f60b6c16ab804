package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// BeginRun implements front.Backend: the move to running, the lease, the
// run's start and the event in one write (group-committed with the
// writes of other tasks).
//
// The run's start is kept in the task row (run_attempt, run_worker,
// run_start; migration 0014), not as a ledger_attempts row: EndRun writes
// the attempt's one row when it ends, and Attempts shows the running one
// from the task. An attempt number that already has a row (a snooze or a
// return spends none) gets the new worker and start there too, as
// before. When the task's previous run never got its row (its holder
// died, or it was moved without EndRun), that row is written now, before
// the task row forgets it.
func (s backend) BeginRun(ctx context.Context, op string, req ledger.RunStart) (*ledger.Task, error) {
	// Alone, the statements below; in a group, with the other BeginRuns'
	// (batch.go).
	it := &beginItem{op: op, req: req}
	err := s.writeKind(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		out, conflict := &it.out, &it.conflict
		*out, *conflict = nil, nil
		var p prevRun
		cur, err := scanTaskExtra(s.txQueryRow(ctx, tx, `SELECT `+taskCols+`, run_attempt, run_worker, run_start FROM ledger_tasks WHERE id = ?`, req.ID),
			&p.attempt, &p.worker, &p.start)
		if errors.Is(err, sql.ErrNoRows) {
			return store.NotFound(op, "task %s", req.ID)
		}
		if err != nil {
			return err
		}
		now := s.opts.Now()
		n, reason, detail, ok := store.NextRun(cur, req.Attempt, now)
		if !ok {
			*out, *conflict = cur, store.RunConflict(op, cur)
			return nil
		}
		start := req.Start
		if start.IsZero() {
			start = now
		}
		*out, err = scanTask(s.txQueryRow(ctx, tx, `UPDATE ledger_tasks SET state = 'running', attempt = ?, lease_until = ?,
				updated_at = ?, event_seq = event_seq + 1, run_attempt = ?, run_worker = ?, run_start = ?
			WHERE id = ? AND state = ? RETURNING `+taskCols,
			n, now.Add(req.Lease).UnixNano(), now.UnixNano(), n, req.Worker, start.UnixNano(), req.ID, string(cur.State)))
		if err != nil {
			return err
		}
		if _, err := s.txExec(ctx, tx, `INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
			SELECT id, event_seq, ?, ?, 'running', ?, ?, ? FROM ledger_tasks WHERE id = ?`,
			now.UnixNano(), string(cur.State), reason, detail, req.Worker, req.ID); err != nil {
			return err
		}
		if p.flush(n) {
			if _, err := s.txExec(ctx, tx, prevAttemptSQL.sql(1), req.ID, p.attempt.Int64, p.worker.String, p.start); err != nil {
				return err
			}
		}
		_, err = s.txExec(ctx, tx, `UPDATE ledger_attempts SET worker = ?, start_at = ? WHERE task_id = ? AND number = ?`,
			req.Worker, start.UnixNano(), req.ID, n)
		return err
	}, beginRunKind, it)
	if err != nil {
		return nil, err
	}
	return it.out, it.conflict
}

// prevRun is the run a task row holds (run_attempt, run_worker,
// run_start), all NULL when none.
type prevRun struct {
	attempt sql.NullInt64
	worker  sql.NullString
	start   sql.NullInt64
}

// flush says whether a run numbered n replaces a held run whose attempt
// row must be written first (its number differs; a row it already has is
// kept: ON CONFLICT DO NOTHING).
func (p prevRun) flush(n int) bool { return p.attempt.Valid && p.attempt.Int64 != int64(n) }

// of returns the worker and start of attempt number: the held run's when
// it is that attempt, else an empty worker and a nil start.
func (p prevRun) of(number int) (string, any) {
	if !p.attempt.Valid || p.attempt.Int64 != int64(number) {
		return "", nil
	}
	var start any
	if p.start.Valid {
		start = p.start.Int64
	}
	return p.worker.String, start
}

// EndRun implements front.Backend: the attempt's outcome and the
// transition in one write.
func (s backend) EndRun(ctx context.Context, op string, req ledger.RunEnd, from []ledger.State) (*ledger.Task, error) {
	a := req.Attempt
	// With a transition: alone, the statements below; in a group, with
	// the other EndRuns' (batch.go).
	it := &endItem{op: op, req: req, from: from}
	var (
		kind *batchKind
		item batchItem
	)
	if req.Transition != nil {
		kind, item = endRunKind, it
	}
	err := s.writeKind(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		out, conflict := &it.out, &it.conflict
		*out, *conflict = nil, nil
		_, err := s.txExec(ctx, tx, finishAttemptSQL,
			a.TaskID, a.Number, a.Worker, nanos(a.Start), int64(a.Duration), a.Outcome, a.Class, a.Error, a.Stack)
		if isFK(err) {
			return store.NotFound(op, "task %s", a.TaskID)
		}
		if err != nil {
			return err
		}
		if req.Transition == nil {
			// The lease ends now (not NULL, which marks a run from before
			// leases): the next delivery takes the task over at once.
			_, err := s.txExec(ctx, tx, `UPDATE ledger_tasks SET lease_until = ? WHERE id = ? AND state = 'running' AND attempt = ?`,
				s.opts.Now().UnixNano(), a.TaskID, a.Number)
			return err
		}
		*out, err = s.transitionTx(ctx, tx, op, req.Transition, from)
		if errors.Is(err, ledger.ErrConflict) {
			// The attempt stays recorded; the move is refused.
			*conflict = err
			*out, err = scanTask(s.txQueryRow(ctx, tx, `SELECT `+taskCols+` FROM ledger_tasks WHERE id = ?`, a.TaskID))
		}
		return err
	}, kind, item)
	if err != nil {
		return nil, err
	}
	return it.out, it.conflict
}

// RenewLeases implements front.Backend.
func (s backend) RenewLeases(ctx context.Context, op string, leases []ledger.Lease, d time.Duration) ([]string, error) {
	var lost []string
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		lost = lost[:0]
		until := s.opts.Now().Add(d).UnixNano()
		for _, l := range leases {
			res, err := s.txExec(ctx, tx, `UPDATE ledger_tasks SET lease_until = ? WHERE id = ? AND attempt = ? AND state = 'running'`,
				until, l.ID, l.Attempt)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				lost = append(lost, l.ID)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lost, nil
}
