package sqlite

import (
	"context"
	"database/sql"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// CreateMany implements front.Backend: the valid tasks are recorded in one
// write transaction (one fsync), each as Create records it, in order, so a
// task repeating an earlier one's idempotency key finds it.
func (s backend) CreateMany(ctx context.Context, op string, ts []*ledger.Task, res []ledger.CreateResult) error {
	metas := make([]any, len(ts))
	for i, t := range ts {
		if t == nil {
			continue
		}
		var err error
		if metas[i], err = metaJSON(t.Metadata); err != nil {
			res[i].Err, ts[i] = store.Invalid(op, "metadata: %v", err), nil
		}
	}
	items := make([]*createItem, 0, len(ts))
	at := make([]int, 0, len(ts))
	for i, t := range ts {
		if t != nil {
			items = append(items, &createItem{t: t, meta: metas[i]})
			at = append(at, i)
		}
	}
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.createMany(ctx, tx, items); err != nil {
			return err
		}
		for j, it := range items {
			if it.existing != nil {
				res[at[j]] = ledger.CreateResult{Task: it.existing}
			} else {
				res[at[j]] = ledger.CreateResult{Task: it.t, Created: true}
			}
		}
		return nil
	})
}

// createInTx records t (validated, with its metadata encoded) in tx, as
// Create does, and returns the task that already held its idempotency key
// or ID, if one did.
func (s *Store) createInTx(ctx context.Context, tx *sql.Tx, t *ledger.Task, meta any) (*ledger.Task, error) {
	return createIn(ctx, execWriter{s, tx}, t, meta)
}
