package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

const taskCols = `id, tenant, idem_key, kind, lane, ordering_key, args, state, attempt, max_attempts,
	run_at, deadline, metadata, result, last_error, created_at, updated_at, lease_until`

type scanner interface{ Scan(dest ...any) error }

func scanTask(r scanner) (*ledger.Task, error) { return scanTaskExtra(r) }

// scanTaskExtra is scanTask for a row with more columns after
// taskCols, scanned into extra.
func scanTaskExtra(r scanner, extra ...any) (*ledger.Task, error) {
	var (
		t                ledger.Task
		state            string
		runAt, deadline  sql.NullInt64
		leaseUntil       sql.NullInt64
		meta             sql.NullString
		created, updated int64
		args, result     []byte
	)
	if err := r.Scan(append([]any{&t.ID, &t.Tenant, &t.IdempotencyKey, &t.Kind, &t.Lane, &t.OrderingKey, &args, &state,
		&t.Attempt, &t.MaxAttempts, &runAt, &deadline, &meta, &result, &t.LastError, &created, &updated, &leaseUntil}, extra...)...); err != nil {
		return nil, err
	}
	t.State = ledger.State(state)
	t.Args, t.Result = args, result
	t.RunAt, t.Deadline, t.LeaseUntil = fromNanos(runAt), fromNanos(deadline), fromNanos(leaseUntil)
	t.CreatedAt, t.UpdatedAt = time.Unix(0, created), time.Unix(0, updated)
	if meta.Valid && meta.String != "" {
		if err := json.Unmarshal([]byte(meta.String), &t.Metadata); err != nil {
			return nil, err
		}
	}
	return &t, nil
}

func nanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64)
}

func metaJSON(m map[string]string) (any, error) {
	if len(m) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// Create implements front.Backend.
func (s backend) Create(ctx context.Context, op string, t *ledger.Task) (*ledger.Task, bool, error) {
	meta, err := metaJSON(t.Metadata)
	if err != nil {
		return nil, false, store.Invalid(op, "metadata: %v", err)
	}
	// Alone it is createIn; in a group, one multi-row INSERT with the
	// other Creates (batch.go).
	it := &createItem{t: t, meta: meta}
	err = s.writeKind(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		it.existing, err = s.createInTx(ctx, tx, t, meta)
		return err
	}, createKind, it)
	if err != nil {
		return nil, false, err
	}
	if it.existing != nil {
		return it.existing, false, nil
	}
	return t, true, nil
}

// Get implements front.Backend.
func (s backend) Get(ctx context.Context, op, id string) (*ledger.Task, error) {
	t, err := scanTask(s.rQueryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NotFound(op, "task %s", id)
	}
	return t, s.classify(op, err)
}

// GetByKey implements front.Backend.
func (s backend) GetByKey(ctx context.Context, op, tenant, key string) (*ledger.Task, error) {
	t, err := scanTask(s.rQueryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE tenant = ? AND idem_key = ? AND idem_key <> ''`, tenant, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NotFound(op, "idempotency key %q of tenant %q", key, tenant)
	}
	return t, s.classify(op, err)
}

// Transition implements front.Backend.
func (s backend) Transition(ctx context.Context, op string, req ledger.TransitionRequest, from []ledger.State) (*ledger.Task, error) {
	var out *ledger.Task
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		out, err = s.transitionTx(ctx, tx, op, &req, from)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// transitionTx applies req inside tx: the guarded move, its updates and
// its event. A task that leaves running loses its lease.
func (s *Store) transitionTx(ctx context.Context, tx *sql.Tx, op string, req *ledger.TransitionRequest, from []ledger.State) (*ledger.Task, error) {
	var cur string
	var attempt int
	err := s.txQueryRow(ctx, tx, `SELECT state, attempt FROM ledger_tasks WHERE id = ?`, req.ID).Scan(&cur, &attempt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NotFound(op, "task %s", req.ID)
	}
	if err != nil {
		return nil, err
	}
	if !slices.Contains(from, ledger.State(cur)) || !store.AttemptGuard(req, attempt) {
		return nil, store.Conflict(op, req.ID, ledger.State(cur), req.To)
	}
	now := s.opts.Now().UnixNano()
	var lastErr any
	if req.LastError != nil {
		lastErr = *req.LastError
	}
	var result any
	if req.Result != nil {
		result = req.Result
	}
	var runAt any
	if !req.RunAt.IsZero() {
		runAt = req.RunAt.UnixNano()
	}
	var lane any
	if req.Lane != "" {
		lane = req.Lane
	}
	out, err := scanTask(s.txQueryRow(ctx, tx, `UPDATE ledger_tasks SET
			state = ?, updated_at = ?, event_seq = event_seq + 1,
			attempt = CASE WHEN ? > 0 THEN ? ELSE attempt END,
			result = CASE WHEN ? THEN ? ELSE result END,
			last_error = COALESCE(?, last_error),
			run_at = COALESCE(?, run_at),
			lane = COALESCE(?, lane),
			lease_until = CASE WHEN ? = 'running' THEN lease_until ELSE NULL END
		WHERE id = ? AND state = ?
		RETURNING `+taskCols,
		string(req.To), now, req.Attempt, req.Attempt, req.Result != nil, result, lastErr, runAt, lane, string(req.To), req.ID, cur))
	if err != nil {
		return nil, err
	}
	_, err = s.txExec(ctx, tx, `INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
		SELECT id, event_seq, ?, ?, ?, ?, ?, ? FROM ledger_tasks WHERE id = ?`,
		now, cur, string(req.To), req.Reason, req.Detail, req.Actor, req.ID)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// List implements front.Backend.
func (s backend) List(ctx context.Context, op string, f ledger.Filter) ([]*ledger.Task, error) {
	var (
		where []string
		args  []any
	)
	if f.Tenant != "" {
		where = append(where, "tenant = ?")
		args = append(args, f.Tenant)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if f.Kind != "" {
		where = append(where, "kind = ?")
		args = append(args, f.Kind)
	}
	if f.Lane != "" {
		where = append(where, "lane = ?")
		args = append(args, f.Lane)
	}
	if f.After != "" {
		var seq int64
		err := s.rQueryRow(ctx, `SELECT seq FROM ledger_tasks WHERE id = ?`, f.After).Scan(&seq)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, store.NotFound(op, "page cursor: task %s (pruned?)", f.After)
		}
		if err != nil {
			return nil, s.classify(op, err)
		}
		where = append(where, "seq > ?")
		args = append(args, seq)
	}
	q := `SELECT ` + taskCols + ` FROM ledger_tasks`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY seq LIMIT ?"
	args = append(args, f.Limit)
	rows, err := s.rQuery(ctx, q, args...)
	if err != nil {
		return nil, s.classify(op, err)
	}
	defer rows.Close()
	var out []*ledger.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, s.classify(op, err)
		}
		out = append(out, t)
	}
	return out, s.classify(op, rows.Err())
}

// pruneBatch bounds how many tasks one prune transaction deletes, so the
// writer is never held for long; between two batches the prune waits as
// long as the last one took, so it holds the single writer at most half
// the time and the hot path's writes are never queued behind a run of
// batches (measured: 1,000,000 tasks pruned back to back took the hot
// path from 2,406 to 171 tasks/s).
const pruneBatch = 200

// Prune implements front.Backend.
func (s backend) Prune(ctx context.Context, op string, before time.Time) (int, error) {
	terms := store.TerminalStates()
	args := []any{}
	for _, st := range terms {
		args = append(args, string(st))
	}
	args = append(args, before.UnixNano(), before.UnixNano(), pruneBatch)
	// By created_at (indexed, and never later than updated_at): state and
	// updated_at have no index, so that moving a task updates none.
	q := `DELETE FROM ledger_tasks WHERE id IN (SELECT id FROM ledger_tasks WHERE state IN (?` +
		strings.Repeat(", ?", len(terms)-1) + `) AND created_at < ? AND updated_at < ? LIMIT ?)`
	total := 0
	for {
		var n int64
		began := time.Now()
		err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
			res, err := s.txExec(ctx, tx, q, args...)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += int(n)
		if n < pruneBatch {
			break
		}
		select { // the duty cycle: let the hot path's writes through
		case <-time.After(time.Since(began)):
		case <-ctx.Done():
			return total, s.classify(op, ctx.Err())
		}
	}
	err := s.write(ctx, op, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := s.txExec(ctx, tx, `DELETE FROM ledger_dedup WHERE claimed_at < ?`, s.opts.Now().Add(-s.opts.DedupWindow).UnixNano()); err != nil {
			return err
		}
		// Old notes too, for stores nobody listens to (notes.go).
		if _, err := s.txExec(ctx, tx, `DELETE FROM ledger_notes WHERE at < ?`, s.opts.Now().Add(-noteKeep).UnixNano()); err != nil {
			return err
		}
		// Ordering keys whose every number finished before the horizon
		// (numbers restart from the clock, so a stray old copy stays late).
		_, err := s.txExec(ctx, tx, `DELETE FROM ledger_order_keys WHERE next_start > assigned AND running = 0 AND progress < ?`, before.UnixNano())
		return err
	})
	return total, err
}
