package sqlite

import (
	"context"
	"database/sql"
	"errors"
)

// Claim implements front.Backend: it records (lane, tenant, key) → id
// unless a claim younger than the dedup window holds the key, in which
// case it returns that claim's id and dup=true. An expired claim is
// replaced. A task row holding the key is a claim too, so an idempotent
// Enqueue claims its key once (the task's insert): when task id itself
// holds the key nothing is written (and a task this store has just
// created is answered without a query), and a task of the same lane
// holding it, created within the window, is the duplicate.
func (s backend) Claim(ctx context.Context, op, lane, tenant, key, id string) (string, bool, error) {
	var (
		existing string
		dup      bool
	)
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		now := s.opts.Now()
		horizon := now.Add(-s.opts.DedupWindow).UnixNano()
		err := s.txQueryRow(ctx, tx, `SELECT id FROM ledger_tasks
			WHERE tenant = ? AND idem_key = ? AND idem_key <> '' AND (id = ? OR (lane = ? AND created_at >= ?))`,
			tenant, key, id, lane, horizon).Scan(&existing)
		if err == nil {
			if dup = existing != id; !dup {
				existing = ""
			}
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var at int64
		err = s.txQueryRow(ctx, tx, `SELECT id, claimed_at FROM ledger_dedup WHERE lane = ? AND tenant = ? AND key = ?`,
			lane, tenant, key).Scan(&existing, &at)
		if err == nil && at >= horizon {
			dup = true
			return nil
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		existing = ""
		_, err = s.txExec(ctx, tx, `INSERT INTO ledger_dedup (lane, tenant, key, id, claimed_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (lane, tenant, key) DO UPDATE SET id = excluded.id, claimed_at = excluded.claimed_at`,
			lane, tenant, key, id, now.UnixNano())
		return err
	})
	if err != nil {
		return "", false, err
	}
	return existing, dup, nil
}

// Release implements front.Backend: it forgets the claim when id still
// holds it.
func (s backend) Release(ctx context.Context, op, lane, tenant, key, id string) error {
	return s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.txExec(ctx, tx, `DELETE FROM ledger_dedup WHERE lane = ? AND tenant = ? AND key = ? AND id = ?`, lane, tenant, key, id)
		return err
	})
}
