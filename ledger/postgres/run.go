package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/internal/store"
)

// beginRunSQL is BeginRun in one statement: lock the row, decide the run
// (store.NextRun's rules, with the lease compared by the database's
// clock, so that workers on machines whose clocks differ agree), move it
// to running with its new lease, append the event and record the
// attempt's start.
//
// The start of an attempt is recorded in the task row (run_attempt,
// run_worker, run_start; migration 0012), not as a ledger_attempts row:
// EndRun writes the attempt's one row when it ends, and Attempts shows the
// running one from the task. An attempt number that already has a row (a
// snooze or a return spends none) gets the new worker and start there
// too, as before. When the task's previous run never got its row (its
// holder died, or it was moved without EndRun), that row is written now,
// before the task row forgets it.
//
// $1 id, $2 the delivery's attempt, $3 the lease in microseconds, $4 now
// (the store's clock, for updated_at and the event), $5 worker, $6 start.
const beginRunSQL = `WITH cur AS (
		SELECT id, state AS old_state, attempt AS old_attempt, lease_until AS old_lease,
			run_attempt AS prev_attempt, run_worker AS prev_worker, run_start AS prev_start
		FROM ledger_tasks WHERE id = $1 FOR UPDATE),
	nx AS (
		SELECT id, old_state, prev_attempt, prev_worker, prev_start,
			CASE WHEN old_state = 'queued' THEN GREATEST($2::integer, old_attempt, 1)
				WHEN old_state = 'running' AND old_lease IS NULL THEN $2::integer
				ELSE GREATEST($2::integer, old_attempt + 1) END AS n,
			CASE WHEN old_state = 'running' THEN 'lease_expired' ELSE 'attempt_started' END AS reason,
			CASE WHEN old_state <> 'running' THEN ''
				WHEN old_lease IS NULL THEN format('attempt %s was running without a lease; a newer delivery takes it over', old_attempt)
				ELSE format('attempt %s''s lease ended at %s without a renewal: its holder is gone', old_attempt, old_lease) END AS detail
		FROM cur
		WHERE old_state IN ('queued', 'retry_wait')
			OR (old_state = 'running' AND (old_lease <= clock_timestamp() OR (old_lease IS NULL AND $2::integer > old_attempt)))),
	u AS (
		UPDATE ledger_tasks t SET state = 'running', attempt = nx.n,
			lease_until = clock_timestamp() + $3::bigint * interval '1 microsecond',
			updated_at = $4, event_seq = t.event_seq + 1,
			run_attempt = nx.n, run_worker = $5, run_start = $6
		FROM nx WHERE t.id = nx.id
		RETURNING nx.old_state, nx.reason, nx.detail, nx.prev_attempt, nx.prev_worker, nx.prev_start, t.event_seq, ` + tTaskCols + `),
	ev AS (
		INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
		SELECT id, event_seq, $4, old_state, 'running', reason, detail, $5 FROM u),
	prev AS (
		INSERT INTO ledger_attempts (task_id, number, worker, start_at)
		SELECT id, prev_attempt, prev_worker, prev_start FROM u WHERE prev_attempt IS NOT NULL AND prev_attempt <> attempt
		ON CONFLICT (task_id, number) DO NOTHING),
	att AS (
		UPDATE ledger_attempts a SET worker = $5, start_at = $6 FROM u WHERE a.task_id = u.id AND a.number = u.attempt)
	SELECT ` + taskCols + ` FROM u`

// beginRunKind is BeginRun's write; in a group, all BeginRuns are one
// statement (batch.go): beginRunSQL over the unnested arguments, the
// rows locked in ID order.
var beginRunKind = &batchKind{
	name:   "begin run",
	single: beginRunSQL,
	array: `WITH v AS (
			SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::timestamptz[], $5::text[], $6::timestamptz[])
				WITH ORDINALITY AS v(id, delivered, lease_us, at, worker, start, ord)),
		cur AS (
			SELECT t.id, v.ord, v.delivered, v.lease_us, v.at, v.worker, v.start,
				t.state AS old_state, t.attempt AS old_attempt, t.lease_until AS old_lease,
				t.run_attempt AS prev_attempt, t.run_worker AS prev_worker, t.run_start AS prev_start
			FROM v JOIN ledger_tasks t ON t.id = v.id ORDER BY t.id FOR UPDATE OF t),
		nx AS (
			SELECT id, ord, lease_us, at, worker, start, old_state, prev_attempt, prev_worker, prev_start,
				CASE WHEN old_state = 'queued' THEN GREATEST(delivered, old_attempt, 1)
					WHEN old_state = 'running' AND old_lease IS NULL THEN delivered
					ELSE GREATEST(delivered, old_attempt + 1) END AS n,
				CASE WHEN old_state = 'running' THEN 'lease_expired' ELSE 'attempt_started' END AS reason,
				CASE WHEN old_state <> 'running' THEN ''
					WHEN old_lease IS NULL THEN format('attempt %s was running without a lease; a newer delivery takes it over', old_attempt)
					ELSE format('attempt %s''s lease ended at %s without a renewal: its holder is gone', old_attempt, old_lease) END AS detail
			FROM cur
			WHERE old_state IN ('queued', 'retry_wait')
				OR (old_state = 'running' AND (old_lease <= clock_timestamp() OR (old_lease IS NULL AND delivered > old_attempt)))),
		u AS (
			UPDATE ledger_tasks t SET state = 'running', attempt = nx.n,
				lease_until = clock_timestamp() + nx.lease_us * interval '1 microsecond',
				updated_at = nx.at, event_seq = t.event_seq + 1,
				run_attempt = nx.n, run_worker = nx.worker, run_start = nx.start
			FROM nx WHERE t.id = nx.id
			RETURNING nx.ord, nx.at AS ev_at, nx.worker AS ev_worker, nx.start AS ev_start, nx.old_state, nx.reason, nx.detail,
				nx.prev_attempt, nx.prev_worker, nx.prev_start, t.event_seq, ` + tTaskCols + `),
		ev AS (
			INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
			SELECT id, event_seq, ev_at, old_state, 'running', reason, detail, ev_worker FROM u),
		prev AS (
			INSERT INTO ledger_attempts (task_id, number, worker, start_at)
			SELECT id, prev_attempt, prev_worker, prev_start FROM u WHERE prev_attempt IS NOT NULL AND prev_attempt <> attempt
			ON CONFLICT (task_id, number) DO NOTHING),
		att AS (
			UPDATE ledger_attempts a SET worker = u.ev_worker, start_at = u.ev_start FROM u WHERE a.task_id = u.id AND a.number = u.attempt)
		SELECT ord, ` + taskCols + ` FROM u`,
}

// BeginRun implements front.Backend in one statement (one round trip,
// one commit).
func (s backend) BeginRun(ctx context.Context, op string, req ledger.RunStart) (*ledger.Task, error) {
	now := s.opts.Now()
	start := req.Start
	if start.IsZero() {
		start = now
	}
	for range 3 {
		var t *ledger.Task
		err := s.queryRowKind(ctx, beginRunKind, func(r pgx.Row) (err error) { t, err = scanTask(r); return err },
			req.ID, req.Attempt, req.Lease.Microseconds(), now, req.Worker, start)
		if err == nil {
			return t, nil
		}
		if !isNoRows(err) {
			return nil, classify(op, err, true)
		}
		cur, err := scanTask(s.pool.QueryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE id = $1`, req.ID))
		if isNoRows(err) {
			return nil, store.NotFound(op, "task %s", req.ID)
		}
		if err != nil {
			return nil, classify(op, err, false)
		}
		if cur.State != ledger.Queued && cur.State != ledger.RetryWait {
			return cur, store.RunConflict(op, cur)
		}
		// It became runnable between the two statements: try again.
	}
	return nil, classify(op, fmt.Errorf("task %s: state kept changing under the run", req.ID), true)
}

// attemptUpsert is finishAttemptSQL with its parameters from $14, to
// follow transitionSQL's in one statement.
var attemptUpsert = strings.NewReplacer("$1", "$14", "$2", "$15", "$3", "$16", "$4", "$17", "$5", "$18",
	"$6", "$19", "$7", "$20", "$8", "$21", "$9", "$22").Replace(finishAttemptSQL)

// endRunSQL records the attempt and applies the transition
// (transitionSQL) in one statement: every data-modifying CTE runs, so the
// attempt is recorded even when the move is refused.
var endRunSQL = `WITH a AS (` + attemptUpsert + `), ` + strings.TrimPrefix(transitionSQL, "WITH ")

// endRunLeaseSQL records the attempt and gives its lease up: it ends now
// (not NULL, which marks a run from before leases), so the next delivery
// takes the task over at once.
var endRunLeaseSQL = `WITH a AS (` + finishAttemptSQL + `)
	UPDATE ledger_tasks SET lease_until = clock_timestamp() WHERE id = $1 AND state = 'running' AND attempt = $2`

// endRunKind is EndRun's write with a transition; in a group, all of
// them are one statement (batch.go): the attempts' upsert
// (finishAttemptSQL) and the transitions (transitionSQL) over the
// unnested arguments, the task rows locked in ID order. The states a
// write may move from ($9, an array in the single statement) go in as a
// comma-separated list.
var endRunKind = &batchKind{
	name:   "end run",
	single: endRunSQL,
	array: `WITH v AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::integer[], $5::boolean[], $6::bytea[], $7::text[],
				$8::timestamptz[], $9::text[], $10::text[], $11::text[], $12::text[], $13::integer[],
				$14::text[], $15::integer[], $16::text[], $17::timestamptz[], $18::bigint[], $19::text[], $20::text[], $21::text[], $22::text[])
				WITH ORDINALITY AS v(id, to_state, at, set_attempt, set_result, result, last_error, run_at, from_states, reason, detail, actor, below,
					a_task, a_number, a_worker, a_start, a_duration, a_outcome, a_class, a_error, a_stack, ord)),
		a AS (
			INSERT INTO ledger_attempts (task_id, number, worker, start_at, duration_ns, outcome, class, error, stack)
			SELECT v.a_task, v.a_number, CASE WHEN v.a_worker <> '' THEN v.a_worker ELSE COALESCE(r.run_worker, '') END,
				COALESCE(v.a_start, r.run_start), v.a_duration, v.a_outcome, v.a_class, v.a_error, v.a_stack
			FROM v LEFT JOIN ledger_tasks r ON r.id = v.a_task AND r.run_attempt = v.a_number
			ORDER BY v.a_task
			ON CONFLICT (task_id, number) DO UPDATE SET
				worker = CASE WHEN EXCLUDED.worker <> '' THEN EXCLUDED.worker ELSE ledger_attempts.worker END,
				start_at = COALESCE(EXCLUDED.start_at, ledger_attempts.start_at),
				duration_ns = EXCLUDED.duration_ns, outcome = EXCLUDED.outcome, class = EXCLUDED.class,
				error = EXCLUDED.error, stack = EXCLUDED.stack),
		cur AS (
			SELECT t.id, t.state AS old_state, v.ord, v.to_state, v.at, v.set_attempt, v.set_result, v.result, v.last_error, v.run_at,
				v.reason, v.detail, v.actor
			FROM v JOIN ledger_tasks t ON t.id = v.id
			WHERE t.state = ANY(string_to_array(v.from_states, ',')) AND (v.below <= 0 OR t.attempt < v.below)
			ORDER BY t.id FOR UPDATE OF t),
		u AS (
			UPDATE ledger_tasks t SET state = cur.to_state, updated_at = cur.at, event_seq = t.event_seq + 1,
				attempt = CASE WHEN cur.set_attempt > 0 THEN cur.set_attempt ELSE t.attempt END,
				result = CASE WHEN cur.set_result THEN cur.result ELSE t.result END,
				last_error = COALESCE(cur.last_error, t.last_error),
				run_at = COALESCE(cur.run_at, t.run_at),
				lease_until = CASE WHEN cur.to_state = 'running' THEN t.lease_until ELSE NULL END
			FROM cur WHERE t.id = cur.id
			RETURNING cur.ord, cur.old_state, cur.to_state, cur.at AS ev_at, cur.reason, cur.detail, cur.actor, t.event_seq, ` + tTaskCols + `),
		ev AS (
			INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
			SELECT id, event_seq, ev_at, old_state, to_state, reason, detail, actor FROM u)
		SELECT ord, ` + taskCols + ` FROM u`,
	conv: func(args []any) []any {
		out := append([]any(nil), args...)
		out[8] = strings.Join(args[8].([]string), ",")
		return out
	},
}

// EndRun implements front.Backend in one statement.
func (s backend) EndRun(ctx context.Context, op string, req ledger.RunEnd, from []ledger.State) (*ledger.Task, error) {
	a := req.Attempt
	if req.Transition == nil {
		_, err := s.exec(ctx, endRunLeaseSQL, a.TaskID, a.Number, a.Worker, tsOrNil(a.Start), int64(a.Duration), a.Outcome, a.Class, a.Error, a.Stack)
		if isFK(err) {
			return nil, store.NotFound(op, "task %s", a.TaskID)
		}
		return nil, classify(op, err, true)
	}
	tr := req.Transition
	fromS := make([]string, len(from))
	for i, st := range from {
		fromS[i] = string(st)
	}
	var runAt *time.Time
	if !tr.RunAt.IsZero() {
		runAt = &tr.RunAt
	}
	result := tr.Result
	if result == nil {
		result = []byte{}
	}
	var t *ledger.Task
	err := s.queryRowKind(ctx, endRunKind, func(r pgx.Row) (err error) { t, err = scanTask(r); return err },
		tr.ID, string(tr.To), s.opts.Now(), tr.Attempt,
		tr.Result != nil, result, tr.LastError, runAt, fromS, tr.Reason, tr.Detail, tr.Actor, tr.IfAttemptBelow,
		a.TaskID, a.Number, a.Worker, tsOrNil(a.Start), int64(a.Duration), a.Outcome, a.Class, a.Error, a.Stack)
	if err == nil {
		return t, nil
	}
	if isFK(err) {
		return nil, store.NotFound(op, "task %s", a.TaskID)
	}
	if !isNoRows(err) {
		return nil, classify(op, err, true)
	}
	// The attempt is recorded; the move was refused.
	cur, err := scanTask(s.pool.QueryRow(ctx, `SELECT `+taskCols+` FROM ledger_tasks WHERE id = $1`, tr.ID))
	if isNoRows(err) {
		return nil, store.NotFound(op, "task %s", tr.ID)
	}
	if err != nil {
		return nil, classify(op, err, false)
	}
	return cur, store.Conflict(op, tr.ID, cur.State, tr.To)
}

// RenewLeases implements front.Backend in one statement, by the
// database's clock.
func (s backend) RenewLeases(ctx context.Context, op string, leases []ledger.Lease, d time.Duration) ([]string, error) {
	ids := make([]string, len(leases))
	atts := make([]int32, len(leases))
	for i, l := range leases {
		ids[i], atts[i] = l.ID, int32(l.Attempt)
	}
	rows, err := s.pool.Query(ctx, `UPDATE ledger_tasks t SET lease_until = clock_timestamp() + $3::bigint * interval '1 microsecond'
		FROM unnest($1::text[], $2::integer[]) AS l(id, attempt)
		WHERE t.id = l.id AND t.attempt = l.attempt AND t.state = 'running'
		RETURNING t.id, t.attempt`, ids, atts, d.Microseconds())
	if err != nil {
		return nil, classify(op, err, true)
	}
	held, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ledger.Lease])
	if err != nil {
		return nil, classify(op, err, true)
	}
	kept := make(map[ledger.Lease]bool, len(held))
	for _, l := range held {
		kept[l] = true
	}
	var lost []string
	for _, l := range leases {
		if !kept[l] {
			lost = append(lost, l.ID)
		}
	}
	return lost, nil
}
