package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

const taskCols = `id, tenant, idem_key, kind, lane, ordering_key, args, state, attempt, max_attempts,
	run_at, deadline, metadata, result, last_error, created_at, updated_at, lease_until`

// tTaskCols is taskCols qualified with the table alias t.
const tTaskCols = `t.id, t.tenant, t.idem_key, t.kind, t.lane, t.ordering_key, t.args, t.state, t.attempt, t.max_attempts,
	t.run_at, t.deadline, t.metadata, t.result, t.last_error, t.created_at, t.updated_at, t.lease_until`

func scanTask(r pgx.Row) (*ledger.Task, error) {
	var (
		t               ledger.Task
		state           string
		runAt, deadline *time.Time
		leaseUntil      *time.Time
		meta            []byte
	)
	if err := r.Scan(&t.ID, &t.Tenant, &t.IdempotencyKey, &t.Kind, &t.Lane, &t.OrderingKey, &t.Args, &state,
		&t.Attempt, &t.MaxAttempts, &runAt, &deadline, &meta, &t.Result, &t.LastError, &t.CreatedAt, &t.UpdatedAt, &leaseUntil); err != nil {
		return nil, err
	}
	t.State = ledger.State(state)
	if runAt != nil {
		t.RunAt = *runAt
	}
	if deadline != nil {
		t.Deadline = *deadline
	}
	if leaseUntil != nil {
		t.LeaseUntil = *leaseUntil
	}
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &t.Metadata); err != nil {
			return nil, err
		}
	}
	return &t, nil
}

func tsOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// createKind is Create's write: the task's row, unless its ID or its
// (tenant, idempotency key) is taken. In a group, all Creates are one
// INSERT … SELECT over the unnested arguments (argRows, batch.go).
var createKind = &batchKind{
	ordinals: true,
	name:     "create",
	single: `INSERT INTO ledger_tasks (` + taskCols + `, event_seq)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb, $14, $15, $16, $16, NULL, 1)
		ON CONFLICT DO NOTHING
		RETURNING ` + taskCols,
	array: `WITH v AS (
			` + argRows("id text", "tenant text", "idem_key text", "kind text", "lane text", "ordering_key text", "args bytea",
		"state text", "attempt integer", "max_attempts integer", "run_at timestamptz", "deadline timestamptz", "metadata text",
		"result bytea", "last_error text", "created_at timestamptz") + `),
		ins AS (
			INSERT INTO ledger_tasks (` + taskCols + `, event_seq)
			SELECT id, tenant, idem_key, kind, lane, ordering_key, args, state, attempt, max_attempts,
				run_at, deadline, metadata::jsonb, result, last_error, created_at, created_at, NULL::timestamptz, 1
			FROM v ORDER BY ord
			ON CONFLICT DO NOTHING
			RETURNING ` + taskCols + `)
		SELECT v.ord, ` + tTaskCols + ` FROM ins t JOIN v ON v.id = t.id`,
}

// Create implements front.Backend with INSERT … ON CONFLICT DO NOTHING.
// The task's "enqueued" event (seq 1) is not a row: Events derives it from
// the task's created_at (enqueuedEventSQL).
func (s backend) Create(ctx context.Context, op string, t *ledger.Task) (*ledger.Task, bool, error) {
	var meta any
	if len(t.Metadata) > 0 {
		b, err := json.Marshal(t.Metadata)
		if err != nil {
			return nil, false, store.Invalid(op, "metadata: %v", err)
		}
		meta = string(b)
	}
	// A conflicting row can vanish between the insert and the lookup (a
	// prune); try again then.
	for range 3 {
		var got *ledger.Task
		err := s.queryRowKind(ctx, createKind, func(r pgx.Row) (err error) { got, err = scanTask(r); return err },
			t.ID, t.Tenant, t.IdempotencyKey, t.Kind, t.Lane, t.OrderingKey, t.Args, string(t.State), t.Attempt, t.MaxAttempts,
			tsOrNil(t.RunAt), tsOrNil(t.Deadline), meta, t.Result, t.LastError, t.CreatedAt)
		if err == nil {
			return got, true, nil
		}
		if !isNoRows(err) {
			return nil, false, classify(op, err, true)
		}
		if t.IdempotencyKey != "" {
			got, err = scanTask(s.pool.QueryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE tenant = $1 AND idem_key = $2 AND idem_key <> ''`, t.Tenant, t.IdempotencyKey))
			if err == nil {
				return got, false, nil
			}
			if !isNoRows(err) {
				return nil, false, classify(op, err, false)
			}
		}
		got, err = scanTask(s.pool.QueryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE id = $1`, t.ID))
		if err == nil {
			return got, false, nil
		}
		if !isNoRows(err) {
			return nil, false, classify(op, err, false)
		}
	}
	return nil, false, classify(op, fmt.Errorf("task %s: insert conflicted but no conflicting task was found, three times", t.ID), true)
}

// Get implements front.Backend.
func (s backend) Get(ctx context.Context, op string, id string) (*ledger.Task, error) {
	t, err := scanTask(s.pool.QueryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE id = $1`, id))
	if isNoRows(err) {
		return nil, store.NotFound(op, "task %s", id)
	}
	return t, classify(op, err, false)
}

// GetByKey implements front.Backend.
func (s backend) GetByKey(ctx context.Context, op string, tenant, key string) (*ledger.Task, error) {
	t, err := scanTask(s.pool.QueryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE tenant = $1 AND idem_key = $2 AND idem_key <> ''`, tenant, key))
	if isNoRows(err) {
		return nil, store.NotFound(op, "idempotency key %q of tenant %q", key, tenant)
	}
	return t, classify(op, err, false)
}

// transitionSQL is one statement: lock the row if its state is one of $9
// (and its attempt is below $13 when $13 > 0), update it, append the event with the old state, return the new row.
const transitionSQL = `WITH cur AS (
		SELECT id, state AS old_state FROM ledger_tasks
		WHERE id = $1 AND state = ANY($9::text[]) AND ($13::integer <= 0 OR attempt < $13::integer) FOR UPDATE),
	u AS (
		UPDATE ledger_tasks t SET state = $2, updated_at = $3, event_seq = t.event_seq + 1,
			attempt = CASE WHEN $4::integer > 0 THEN $4::integer ELSE t.attempt END,
			result = CASE WHEN $5::boolean THEN $6::bytea ELSE t.result END,
			last_error = COALESCE($7::text, t.last_error),
			run_at = COALESCE($8::timestamptz, t.run_at),
			lease_until = CASE WHEN $2 = 'running' THEN t.lease_until ELSE NULL END
		FROM cur WHERE t.id = cur.id
		RETURNING cur.old_state, t.event_seq, ` + tTaskCols + `),
	ev AS (
		INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
		SELECT id, event_seq, $3, old_state, $2, $10, $11, $12 FROM u)
	SELECT ` + taskCols + ` FROM u`

// transitionLaneSQL is transitionSQL that also sets the task's lane ($14):
// a separate statement, so that endRunSQL's numbering of the parameters
// after $13 stays its own.
var transitionLaneSQL = strings.Replace(transitionSQL, "run_at = COALESCE($8::timestamptz, t.run_at),",
	"run_at = COALESCE($8::timestamptz, t.run_at),\n\t\t\tlane = $14::text,", 1)

// Transition implements front.Backend with a guarded
// UPDATE … WHERE state = ANY(…) and the event insert in one statement.
func (s backend) Transition(ctx context.Context, op string, req ledger.TransitionRequest, from []ledger.State) (*ledger.Task, error) {
	fromS := make([]string, len(from))
	for i, st := range from {
		fromS[i] = string(st)
	}
	var runAt *time.Time
	if !req.RunAt.IsZero() {
		runAt = &req.RunAt
	}
	result := req.Result
	if result == nil {
		result = []byte{}
	}
	// When the state changes between the refused update and the look-up,
	// the move may have become legal: try again (bounded).
	q, args := transitionSQL, []any{req.ID, string(req.To), s.opts.Now(), req.Attempt,
		req.Result != nil, result, req.LastError, runAt, fromS, req.Reason, req.Detail, req.Actor, req.IfAttemptBelow}
	if req.Lane != "" {
		q, args = transitionLaneSQL, append(args, req.Lane)
	}
	for range 3 {
		t, err := scanTask(s.pool.QueryRow(ctx, q, args...))
		if err == nil {
			return t, nil
		}
		if !isNoRows(err) {
			return nil, classify(op, err, true)
		}
		var cur string
		var attempt int
		err = s.pool.QueryRow(ctx, `SELECT state, attempt FROM ledger_tasks WHERE id = $1`, req.ID).Scan(&cur, &attempt)
		if isNoRows(err) {
			return nil, store.NotFound(op, "task %s", req.ID)
		}
		if err != nil {
			return nil, classify(op, err, false)
		}
		if !slices.Contains(from, ledger.State(cur)) || !store.AttemptGuard(&req, attempt) {
			return nil, store.Conflict(op, req.ID, ledger.State(cur), req.To)
		}
	}
	return nil, classify(op, fmt.Errorf("task %s: state kept changing under the transition", req.ID), true)
}

// List implements front.Backend.
func (s backend) List(ctx context.Context, op string, f ledger.Filter) ([]*ledger.Task, error) {
	states := make([]string, len(f.States))
	for i, st := range f.States {
		states[i] = string(st)
	}
	var after int64
	if f.After != "" {
		err := s.pool.QueryRow(ctx, `SELECT seq FROM ledger_tasks WHERE id = $1`, f.After).Scan(&after)
		if isNoRows(err) {
			return nil, store.NotFound(op, "page cursor: task %s (pruned?)", f.After)
		}
		if err != nil {
			return nil, classify(op, err, false)
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT `+taskCols+` FROM ledger_tasks
		WHERE ($1 = '' OR tenant = $1) AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[]))
			AND ($3 = '' OR kind = $3) AND ($4 = '' OR lane = $4) AND seq > $5
		ORDER BY seq LIMIT $6`, f.Tenant, states, f.Kind, f.Lane, after, f.Limit)
	if err != nil {
		return nil, classify(op, err, false)
	}
	defer rows.Close()
	var out []*ledger.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, classify(op, err, false)
		}
		out = append(out, t)
	}
	return out, classify(op, rows.Err(), false)
}

// pruneBatch bounds how many tasks one prune statement deletes.
const pruneBatch = 500

// Prune implements front.Backend, in batches that skip rows other
// transactions hold. It also forgets dedup claims older than the dedup
// window.
func (s backend) Prune(ctx context.Context, op string, before time.Time) (int, error) {
	var terms []string
	for _, st := range store.TerminalStates() {
		terms = append(terms, string(st))
	}
	total := 0
	for {
		// ledger_events has no foreign key (0012): a task's events go in
		// the same statement. No event can be added to a task in between:
		// every event insert updates its task row, which this holds.
		var n int
		err := s.pool.QueryRow(ctx, `WITH d AS (
				DELETE FROM ledger_tasks WHERE id IN (
					SELECT id FROM ledger_tasks WHERE created_at < $2 AND updated_at < $2 AND state = ANY($1::text[])
					LIMIT $3 FOR UPDATE SKIP LOCKED)
				RETURNING id),
			e AS (DELETE FROM ledger_events WHERE task_id IN (SELECT id FROM d))
			SELECT count(*) FROM d`, terms, before, pruneBatch).Scan(&n)
		if err != nil {
			return total, classify(op, err, true)
		}
		total += n
		if n < pruneBatch {
			break
		}
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM ledger_dedup WHERE claimed_at < $1`, s.opts.Now().Add(-s.opts.DedupWindow))
	if err != nil {
		return total, classify(op, err, true)
	}
	// Ordering keys whose every number finished before the horizon (numbers
	// restart from the clock, so a stray old copy stays late).
	_, err = s.pool.Exec(ctx, `DELETE FROM ledger_order_keys WHERE next_start > assigned AND running = 0 AND progress < $1`, before)
	return total, classify(op, err, true)
}
