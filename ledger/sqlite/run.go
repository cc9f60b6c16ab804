package sqlite

import (
	"context"
	"database/sql"
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
	// Alone or in a group, the grouped statements of batch.go (alone, over
	// one row: runAlone).
	it := &beginItem{op: op, req: req}
	err := s.writeKind(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		return runAlone(ctx, s.Store, tx, runBeginBatch, it)
	}, beginRunKind, it)
	if err != nil {
		return nil, err
	}
	return it.out, it.conflict
}

// runAlone runs one BeginRun or EndRun with a transition by itself, with its
// kind's grouped statements (batch.go) over one row: the same statements
// and decisions whether it shares them or not, so the events it keeps in
// the task row (migration 0015) are kept there alone too. Its refusal is
// its error; its result and conflict are in it.
func runAlone(ctx context.Context, s *Store, tx *sql.Tx, run func(context.Context, *Store, *sql.Tx, []*writeReq) error, it batchItem) error {
	r := &writeReq{item: it}
	if err := run(ctx, s, tx, []*writeReq{r}); err != nil {
		return err
	}
	return r.err
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
	// With a transition, alone or in a group, the grouped statements of
	// batch.go (alone, over one row: runAlone); without one, the
	// statements below.
	it := &endItem{op: op, req: req, from: from}
	var (
		kind *batchKind
		item batchItem
	)
	if req.Transition != nil {
		kind, item = endRunKind, it
	}
	err := s.writeKind(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		if req.Transition != nil {
			return runAlone(ctx, s.Store, tx, runEndBatch, it)
		}
		_, err := s.txExec(ctx, tx, finishAttemptSQL,
			a.TaskID, a.Number, a.Worker, nanos(a.Start), int64(a.Duration), a.Outcome, a.Class, a.Error, a.Stack)
		if isFK(err) {
			return store.NotFound(op, "task %s", a.TaskID)
		}
		if err != nil {
			return err
		}
		// No transition: the lease ends now (not NULL, which marks a run
		// from before leases): the next delivery takes the task over at
		// once.
		_, err = s.txExec(ctx, tx, `UPDATE ledger_tasks SET lease_until = ? WHERE id = ? AND state = 'running' AND attempt = ?`,
			s.opts.Now().UnixNano(), a.TaskID, a.Number)
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
