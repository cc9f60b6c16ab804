package sqlite

import (
	"context"
	"database/sql"

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
	for _, r := range res {
		if r.Created {
			s.claims.Add(r.Task.ID, r.Task.Tenant, r.Task.IdempotencyKey)
		}
	}
	return res, nil
}

// createInTx records t (validated, with its metadata encoded) in tx, as
// Create does, and returns the task that already held its idempotency key
// or ID, if one did.
func (s *Store) createInTx(ctx context.Context, tx *sql.Tx, t *ledger.Task, meta any) (*ledger.Task, error) {
	return createIn(ctx, execWriter{s, tx}, t, meta)
}
