package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// createManySQL inserts a whole batch, passed as arrays, in one
// statement (the "enqueued" events are derived, not rows); rows whose ID or (tenant,
// idempotency key) is taken are skipped and looked up afterwards.
const createManySQL = `WITH v AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bytea[],
			$8::int[], $9::int[], $10::timestamptz[], $11::timestamptz[], $12::text[], $13::bytea[], $14::text[])
			WITH ORDINALITY AS v(id, tenant, idem_key, kind, lane, ordering_key, args, attempt, max_attempts,
				run_at, deadline, metadata, result, last_error, ord)),
	ins AS (
		INSERT INTO ledger_tasks (` + taskCols + `, event_seq)
		SELECT id, tenant, idem_key, kind, lane, ordering_key, args, 'queued', attempt, max_attempts,
			run_at, deadline, metadata::jsonb, result, last_error, $15, $15, NULL::timestamptz, 1
		FROM v ORDER BY ord
		ON CONFLICT DO NOTHING
		RETURNING ` + taskCols + `)
	SELECT ` + taskCols + ` FROM ins`

// existingSQL finds the tasks holding some IDs or (tenant, idempotency
// key) pairs.
const existingSQL = `SELECT ` + taskCols + ` FROM ledger_tasks
	WHERE id = ANY($1::text[])
	   OR (idem_key <> '' AND (tenant, idem_key) IN (SELECT * FROM unnest($2::text[], $3::text[])))`

// CreateMany implements front.Backend: the batch goes in as arrays to one
// INSERT … SELECT FROM unnest … ON CONFLICT DO NOTHING (one round
// trip, one transaction); only when some task's ID or
// idempotency key was taken does a second query fetch the tasks holding
// them. A task repeating an earlier one's idempotency key (or ID) in the
// same batch is not sent: it gets the earlier one's task, Created=false.
func (s backend) CreateMany(ctx context.Context, op string, ts []*ledger.Task, res []ledger.CreateResult) error {
	var now time.Time // the tasks' creation time: the front's, one for all
	metas := make([]*string, len(ts))
	follows := make([]int, len(ts)) // -1, or the earlier task this one repeats
	byKey := map[[2]string]int{}
	byID := map[string]int{}
	var todo []int
	for i, c := range ts {
		follows[i] = -1
		if c == nil {
			continue
		}
		now = c.CreatedAt
		if len(c.Metadata) > 0 {
			b, err := json.Marshal(c.Metadata)
			if err != nil {
				res[i].Err, ts[i] = store.Invalid(op, "metadata: %v", err), nil
				continue
			}
			m := string(b)
			metas[i] = &m
		}
		k := [2]string{c.Tenant, c.IdempotencyKey}
		if j, ok := byKey[k]; ok && c.IdempotencyKey != "" {
			follows[i] = j
			continue
		}
		if j, ok := byID[c.ID]; ok {
			follows[i] = j
			continue
		}
		if c.IdempotencyKey != "" {
			byKey[k] = i
		}
		byID[c.ID] = i
		todo = append(todo, i)
	}
	// A task whose conflicting row vanished between the insert and the
	// lookup (a prune) is tried again, as Create does.
	for range 3 {
		if len(todo) == 0 {
			break
		}
		var err error
		if todo, err = s.createBatch(ctx, ts, metas, todo, now, res); err != nil {
			return classify(op, err, true)
		}
	}
	for _, i := range todo {
		res[i].Err = classify(op, fmt.Errorf("task %s: insert conflicted but no conflicting task was found, three times", ts[i].ID), true)
	}
	for i, j := range follows {
		if j < 0 {
			continue
		}
		res[i] = ledger.CreateResult{Task: res[j].Task, Err: res[j].Err}
	}
	return nil
}

// createBatch inserts ts[todo], fills res for them and returns those
// neither inserted nor found.
func (s *Store) createBatch(ctx context.Context, ts []*ledger.Task, metas []*string, todo []int, now time.Time, res []ledger.CreateResult) ([]int, error) {
	n := len(todo)
	var (
		ids, tenants, keys, kinds, lanes, ords, errs = make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		args, results     = make([][]byte, n), make([][]byte, n)
		attempts, maxes   = make([]int32, n), make([]int32, n)
		runAts, deadlines = make([]*time.Time, n), make([]*time.Time, n)
		meta              = make([]*string, n)
	)
	for k, i := range todo {
		t := ts[i]
		ids[k], tenants[k], keys[k], kinds[k], lanes[k], ords[k], errs[k] = t.ID, t.Tenant, t.IdempotencyKey, t.Kind, t.Lane, t.OrderingKey, t.LastError
		args[k], results[k] = t.Args, t.Result
		attempts[k], maxes[k] = int32(t.Attempt), int32(t.MaxAttempts)
		if !t.RunAt.IsZero() {
			runAts[k] = &t.RunAt
		}
		if !t.Deadline.IsZero() {
			deadlines[k] = &t.Deadline
		}
		meta[k] = metas[i]
	}
	rows, err := s.pool.Query(ctx, createManySQL, ids, tenants, keys, kinds, lanes, ords, args, attempts, maxes,
		runAts, deadlines, meta, results, errs, now)
	if err != nil {
		return nil, err
	}
	inserted := map[string]*ledger.Task{}
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		inserted[t.ID] = t
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var missing []int
	for _, i := range todo {
		if t := inserted[ts[i].ID]; t != nil {
			res[i] = ledger.CreateResult{Task: t, Created: true}
			continue
		}
		missing = append(missing, i)
	}
	if len(missing) == 0 {
		return nil, nil
	}
	var mids, mtenants, mkeys []string
	for _, i := range missing {
		mids = append(mids, ts[i].ID)
		if ts[i].IdempotencyKey != "" {
			mtenants = append(mtenants, ts[i].Tenant)
			mkeys = append(mkeys, ts[i].IdempotencyKey)
		}
	}
	rows, err = s.pool.Query(ctx, existingSQL, mids, mtenants, mkeys)
	if err != nil {
		return nil, err
	}
	byKey := map[[2]string]*ledger.Task{}
	byID := map[string]*ledger.Task{}
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		byID[t.ID] = t
		if t.IdempotencyKey != "" {
			byKey[[2]string{t.Tenant, t.IdempotencyKey}] = t
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var again []int
	for _, i := range missing {
		t := ts[i]
		e := byKey[[2]string{t.Tenant, t.IdempotencyKey}]
		if t.IdempotencyKey == "" || e == nil {
			e = byID[t.ID]
		}
		if e == nil {
			again = append(again, i)
			continue
		}
		res[i] = ledger.CreateResult{Task: e}
	}
	return again, nil
}
