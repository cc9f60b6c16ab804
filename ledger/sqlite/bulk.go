package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// CreateMany implements ledger.Ledger: the valid tasks are recorded in one
// write transaction (one fsync), each as Create records it, in order, so a
// task repeating an earlier one's idempotency key finds it.
func (s *Store) CreateMany(ctx context.Context, in []*ledger.Task) ([]ledger.CreateResult, error) {
	const op = "sqlite: create many"
	now := s.opts.Now()
	res := make([]ledger.CreateResult, len(in))
	ts := make([]*ledger.Task, len(in))
	metas := make([]any, len(in))
	valid := 0
	for i, t := range in {
		c, err := store.CreateTask(op, t, now)
		if err == nil {
			metas[i], err = metaJSON(c.Metadata)
			if err != nil {
				err = store.Invalid(op, "metadata: %v", err)
			}
		}
		if err != nil {
			res[i].Err = err
			continue
		}
		ts[i] = c
		valid++
	}
	if valid == 0 {
		return res, nil
	}
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		for i, t := range ts {
			if t == nil {
				continue
			}
			existing, err := s.createInTx(ctx, tx, t, metas[i])
			if err != nil {
				return err
			}
			if existing != nil {
				res[i] = ledger.CreateResult{Task: existing}
			} else {
				res[i] = ledger.CreateResult{Task: t, Created: true}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// createInTx records t (validated, with its metadata encoded) in tx, as
// Create does, and returns the task that already held its idempotency key
// or ID, if one did.
func (s *Store) createInTx(ctx context.Context, tx *sql.Tx, t *ledger.Task, meta any) (*ledger.Task, error) {
	if t.IdempotencyKey != "" {
		// "idem_key <> ''" lets SQLite use the partial unique index on
		// (tenant, idem_key); without it a prepared statement cannot prove
		// the index applies and scans the tenant's tasks.
		e, err := scanTask(s.txQueryRow(ctx, tx, `SELECT `+taskCols+` FROM ledger_tasks WHERE tenant = ? AND idem_key = ? AND idem_key <> ''`, t.Tenant, t.IdempotencyKey))
		if err == nil {
			return e, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
	}
	now := t.CreatedAt.UnixNano()
	r, err := s.txExec(ctx, tx, `INSERT INTO ledger_tasks (`+taskCols+`, event_seq)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 1) ON CONFLICT DO NOTHING`,
		t.ID, t.Tenant, t.IdempotencyKey, t.Kind, t.Lane, t.OrderingKey, t.Args, string(t.State), t.Attempt, t.MaxAttempts,
		nanos(t.RunAt), nanos(t.Deadline), meta, t.Result, t.LastError, now, now)
	if err != nil {
		return nil, err
	}
	if n, err := r.RowsAffected(); err != nil {
		return nil, err
	} else if n == 0 {
		// The ID is taken: the task was already recorded.
		return scanTask(s.txQueryRow(ctx, tx, `SELECT `+taskCols+` FROM ledger_tasks WHERE id = ?`, t.ID))
	}
	_, err = s.txExec(ctx, tx, `INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason) VALUES (?, 1, ?, '', ?, 'enqueued')`,
		t.ID, now, string(ledger.Queued))
	return nil, err
}
