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

// The end of the attempt the task row holds (migration 0014; NULL while
// it runs), read by BeginRun before it begins the next.
const (
	prevEndCols  = `run_duration AS prev_duration, run_outcome AS prev_outcome, run_class AS prev_class, run_error AS prev_error, run_stack AS prev_stack`
	tPrevEndCols = `t.run_duration AS prev_duration, t.run_outcome AS prev_outcome, t.run_class AS prev_class, t.run_error AS prev_error, t.run_stack AS prev_stack`
	prevEnd      = `prev_duration, prev_outcome, prev_class, prev_error, prev_stack`
	nxPrevEnd    = `nx.prev_duration, nx.prev_outcome, nx.prev_class, nx.prev_error, nx.prev_stack`
	// runEndKept: a run of the attempt number the task row holds keeps
	// its recorded end, as its row would (a snooze or a return spends no
	// number); a new number has none yet.
	runEndKept = `run_duration = CASE WHEN nx.n = nx.prev_attempt THEN nx.prev_duration END,
			run_outcome = CASE WHEN nx.n = nx.prev_attempt THEN nx.prev_outcome END,
			run_class = CASE WHEN nx.n = nx.prev_attempt THEN nx.prev_class END,
			run_error = CASE WHEN nx.n = nx.prev_attempt THEN nx.prev_error END,
			run_stack = CASE WHEN nx.n = nx.prev_attempt THEN nx.prev_stack END`
	// The start event the task row holds (run_ev_*), read by BeginRun
	// before it replaces it.
	prevEvCols  = `run_ev_seq AS pev_seq, run_ev_at AS pev_at, run_ev_from AS pev_from, run_ev_reason AS pev_reason, run_ev_detail AS pev_detail, run_ev_actor AS pev_actor`
	tPrevEvCols = `t.run_ev_seq AS pev_seq, t.run_ev_at AS pev_at, t.run_ev_from AS pev_from, t.run_ev_reason AS pev_reason, t.run_ev_detail AS pev_detail, t.run_ev_actor AS pev_actor`
	prevEv      = `pev_seq, pev_at, pev_from, pev_reason, pev_detail, pev_actor`
	nxPrevEv    = `nx.pev_seq, nx.pev_at, nx.pev_from, nx.pev_reason, nx.pev_detail, nx.pev_actor`
	// prevEventSQL writes the row of the start event the task row held
	// (u is the task's update, which holds the new one).
	prevEventSQL = `INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
		SELECT id, pev_seq, pev_at, pev_from, 'running', pev_reason, pev_detail, pev_actor FROM u WHERE pev_seq IS NOT NULL`
	// prevAttemptSQL writes the row of the task's previous attempt, with
	// its end when it had one, when the run begins another number (u is
	// the task's update). An attempt that has its row already keeps it.
	prevAttemptSQL = `INSERT INTO ledger_attempts (task_id, number, worker, start_at, duration_ns, outcome, class, error, stack)
		SELECT id, prev_attempt, prev_worker, prev_start, COALESCE(prev_duration, 0), COALESCE(prev_outcome, ''),
			COALESCE(prev_class, ''), COALESCE(prev_error, ''), COALESCE(prev_stack, '')
		FROM u WHERE prev_attempt IS NOT NULL AND prev_attempt <> attempt`
)

// The event of EndRun's move is kept in the task row (end_ev_*;
// migration 0015), where Events and ReadStream read it (endEventSQL): no
// ledger_events row. The one the task row held before (an earlier end of
// a retried or replayed task) is written as its row then.
const (
	prevEndEvCols  = `end_ev_seq AS pe_seq, end_ev_at AS pe_at, end_ev_from AS pe_from, end_ev_to AS pe_to, end_ev_reason AS pe_reason, end_ev_detail AS pe_detail, end_ev_actor AS pe_actor`
	tPrevEndEvCols = `t.end_ev_seq AS pe_seq, t.end_ev_at AS pe_at, t.end_ev_from AS pe_from, t.end_ev_to AS pe_to, t.end_ev_reason AS pe_reason, t.end_ev_detail AS pe_detail, t.end_ev_actor AS pe_actor`
	curPrevEndEv   = `cur.pe_seq, cur.pe_at, cur.pe_from, cur.pe_to, cur.pe_reason, cur.pe_detail, cur.pe_actor`
	// prevEndEventSQL writes the row of the end event the task row held
	// (u is the task's update, which holds the new one). Its note was sent
	// when it happened: the trigger sends none for an event that is not
	// its task's latest (0015).
	prevEndEventSQL = `INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
		SELECT id, pe_seq, pe_at, pe_from, pe_to, pe_reason, pe_detail, pe_actor FROM u WHERE pe_seq IS NOT NULL`
	// endNoteJoin sends the note of the move u made (u.old_state →
	// u.new_state), as the trigger of 0014 sent it for its event row: same
	// channel, payload and condition, at commit, once per task in the
	// order of the rows — but only when the task is watched (u.watched,
	// the row u wrote: the latest version, read under its row lock;
	// migration 0016, Watch), or the move is to cancelled (the note the
	// servers' cancel watchers listen for).
	endNoteJoin = `LEFT JOIN LATERAL (SELECT pg_notify('sy_' || left(md5(current_schema()), 16),
			'state|' || u.new_state || '|' || octet_length(u.id) || '|' || u.id)
		WHERE u.new_state IN ('completed', 'failed', 'dead', 'rejected', 'cancelled', 'awaiting_review')
			AND u.new_state IS DISTINCT FROM u.old_state AND (u.watched OR u.new_state = 'cancelled')) note ON true`
)

// beginRunSQL is BeginRun in one statement: lock the row, decide the run
// (store.NextRun's rules, with the lease compared by the database's
// clock, so that workers on machines whose clocks differ agree), move it
// to running with its new lease, record the event and the attempt's
// start.
//
// The event (attempt started, or lease expired) is kept in the task row
// (run_ev_*; migration 0014), where Events and ReadStream read it
// (startEventSQL): no ledger_events row. The previous one the task row
// held is written as its row now, before the task row forgets it.
//
// The attempt is recorded in the task row (run_attempt, run_worker,
// run_start; migration 0012), and so is its end when EndRun moves the
// task (run_duration … run_stack; migration 0014), not as a
// ledger_attempts row; Attempts shows it from the task. An attempt number
// that already has a row (a snooze or a return spends none) gets the new
// worker and start there too, as before; the same number with no row
// keeps the end the task row holds, as its row would. When the run begins
// another number, the previous attempt's row, with its end if it had one,
// is written now, before the task row forgets it (unless it has its row
// already).
//
// $1 id, $2 the delivery's attempt, $3 the lease in microseconds, $4 now
// (the store's clock, for updated_at and the event), $5 worker, $6 start.
const beginRunSQL = `WITH cur AS (
		SELECT id, state AS old_state, attempt AS old_attempt, lease_until AS old_lease,
			run_attempt AS prev_attempt, run_worker AS prev_worker, run_start AS prev_start, ` + prevEndCols + `, ` + prevEvCols + `
		FROM ledger_tasks WHERE id = $1 FOR UPDATE),
	nx AS (
		SELECT id, old_state, prev_attempt, prev_worker, prev_start, ` + prevEnd + `, ` + prevEv + `,
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
			run_attempt = nx.n, run_worker = $5, run_start = $6, ` + runEndKept + `,
			run_ev_seq = t.event_seq + 1, run_ev_at = $4, run_ev_from = nx.old_state, run_ev_reason = nx.reason,
			run_ev_detail = nx.detail, run_ev_actor = $5
		FROM nx WHERE t.id = nx.id
		RETURNING nx.old_state, nx.reason, nx.detail, nx.prev_attempt, nx.prev_worker, nx.prev_start, ` + nxPrevEnd + `, ` + nxPrevEv + `, t.event_seq, ` + tTaskCols + `),
	ev AS (
		` + prevEventSQL + `),
	prev AS (
		` + prevAttemptSQL + `
		ON CONFLICT (task_id, number) DO NOTHING),
	att AS (
		UPDATE ledger_attempts a SET worker = $5, start_at = $6 FROM u WHERE a.task_id = u.id AND a.number = u.attempt)
	SELECT ` + taskCols + ` FROM u`

// beginRunArgs and endRunArgs open the array forms of the full BeginRun
// and EndRun: the arguments of every write in the group, one row each,
// in the order sent.
var (
	beginRunArgs = `WITH v AS (
			` + beginRunArgRows + `),`
	endRunArgs = `WITH v AS (
			` + endRunArgRows + `),`
	// beginRunArgRows and endRunArgRows are their argument rows (the
	// lean statements, lean.go, join them in FROM).
	beginRunArgRows = argRows("id text", "delivered integer", "lease_us bigint", "at timestamptz", "worker text", "start timestamptz")
	endRunArgRows   = argRows("id text", "to_state text", "at timestamptz", "set_attempt integer", "set_result boolean", "result bytea",
		"last_error text", "run_at timestamptz", "from_states text", "reason text", "detail text", "actor text", "below integer",
		"a_task text", "a_number integer", "a_worker text", "a_start timestamptz", "a_duration bigint", "a_outcome text",
		"a_class text", "a_error text", "a_stack text")
)

// beginRunKind is BeginRun's write; in a group, all BeginRuns are one
// statement (batch.go): beginRunSQL over the unnested arguments, the
// rows locked in ID order (bytewise, COLLATE "C": the order in which the
// lean statement, lean.go, locks them, so a group's full statement and
// another's lean one over the same tasks lock them in one order).
var beginRunKind = &batchKind{
	ordinals: true,
	name:     "begin run",
	single:   beginRunSQL,
	array: beginRunArgs + `
		cur AS (
			SELECT t.id, v.ord, v.delivered, v.lease_us, v.at, v.worker, v.start,
				t.state AS old_state, t.attempt AS old_attempt, t.lease_until AS old_lease,
				t.run_attempt AS prev_attempt, t.run_worker AS prev_worker, t.run_start AS prev_start, ` + tPrevEndCols + `, ` + tPrevEvCols + `
			FROM v JOIN ledger_tasks t ON t.id = v.id ORDER BY t.id COLLATE "C" FOR UPDATE OF t),
		nx AS (
			SELECT id, ord, lease_us, at, worker, start, old_state, prev_attempt, prev_worker, prev_start, ` + prevEnd + `, ` + prevEv + `,
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
				run_attempt = nx.n, run_worker = nx.worker, run_start = nx.start, ` + runEndKept + `,
				run_ev_seq = t.event_seq + 1, run_ev_at = nx.at, run_ev_from = nx.old_state, run_ev_reason = nx.reason,
				run_ev_detail = nx.detail, run_ev_actor = nx.worker
			FROM nx WHERE t.id = nx.id
			RETURNING nx.ord, nx.at AS ev_at, nx.worker AS ev_worker, nx.start AS ev_start, nx.old_state, nx.reason, nx.detail,
				nx.prev_attempt, nx.prev_worker, nx.prev_start, ` + nxPrevEnd + `, ` + nxPrevEv + `, t.event_seq, ` + tTaskCols + `),
		ev AS (
			` + prevEventSQL + `),
		prev AS (
			` + prevAttemptSQL + `
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
	args := []any{req.ID, req.Attempt, req.Lease.Microseconds(), now, req.Worker, start}
	var t *ledger.Task
	scan := func(r pgx.Row) (err error) { t, err = scanTask(r); return err }
	// A task's first run: the lean statement (lean.go); when it does not
	// apply it changes nothing, and the full statement decides.
	err := s.queryRowKind(ctx, beginRunLeanKind, scan, args...)
	if err == nil {
		return t, nil
	}
	if !isNoRows(err) {
		return nil, classify(op, err, true)
	}
	for range 3 {
		err := s.queryRowKind(ctx, beginRunKind, scan, args...)
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

// runEndHere decides, in EndRun's statements, where the attempt's end
// goes (migration 0014): into the task row when it is the attempt the row
// holds (run_attempt) and that attempt has no ledger_attempts row (which
// would hold its record), else into its row. $t and $n are the task's ID
// and the attempt's number; the task is ledger_tasks's current row.
func runEndHere(t, n string) string {
	return `(run_attempt = ` + n + `) IS TRUE AND NOT EXISTS (SELECT 1 FROM ledger_attempts x WHERE x.task_id = ` + t + ` AND x.number = ` + n + `)`
}

// runEndSet is the task row's update that records the attempt's end when
// cur.here (runEndHere): worker, start, duration, outcome, class, error,
// stack, kept as finishAttemptSQL keeps them (an empty worker and a NULL
// start keep what is recorded).
func runEndSet(worker, start, dur, outcome, class, errText, stack string) string {
	return `run_worker = CASE WHEN cur.here AND ` + worker + ` <> '' THEN ` + worker + ` ELSE t.run_worker END,
			run_start = CASE WHEN cur.here THEN COALESCE(` + start + `, t.run_start) ELSE t.run_start END,
			run_duration = CASE WHEN cur.here THEN ` + dur + ` ELSE t.run_duration END,
			run_outcome = CASE WHEN cur.here THEN ` + outcome + ` ELSE t.run_outcome END,
			run_class = CASE WHEN cur.here THEN ` + class + ` ELSE t.run_class END,
			run_error = CASE WHEN cur.here THEN ` + errText + ` ELSE t.run_error END,
			run_stack = CASE WHEN cur.here THEN ` + stack + ` ELSE t.run_stack END`
}

// attemptShift numbers finishAttemptSQL's parameters from $14, to follow
// transitionSQL's in one statement.
var attemptShift = strings.NewReplacer("$1", "$14", "$2", "$15", "$3", "$16", "$4", "$17", "$5", "$18",
	"$6", "$19", "$7", "$20", "$8", "$21", "$9", "$22").Replace

// endRunSQL applies the transition (transitionSQL, $1–$13) and records
// the attempt ($14–$22, finishAttemptSQL's) in one statement: in the task
// row when the move is made and the row holds the attempt (runEndHere),
// else as its ledger_attempts row — also when the move is refused (every
// data-modifying CTE runs).
var endRunSQL = `WITH cur AS (
		SELECT id, state AS old_state, ` + runEndHere("$1", "$15::integer") + ` AS here, ` + prevEndEvCols + ` FROM ledger_tasks
		WHERE id = $1 AND state = ANY($9::text[]) AND ($13::integer <= 0 OR attempt < $13::integer) FOR UPDATE),
	u AS (
		UPDATE ledger_tasks t SET state = $2, updated_at = $3, event_seq = t.event_seq + 1,
			attempt = CASE WHEN $4::integer > 0 THEN $4::integer ELSE t.attempt END,
			result = CASE WHEN $5::boolean THEN $6::bytea ELSE t.result END,
			last_error = COALESCE($7::text, t.last_error),
			run_at = COALESCE($8::timestamptz, t.run_at),
			lease_until = CASE WHEN $2 = 'running' THEN t.lease_until ELSE NULL END,
			` + runEndSet("$16::text", "$17::timestamptz", "$18::bigint", "$19::text", "$20::text", "$21::text", "$22::text") + `,
			end_ev_seq = t.event_seq + 1, end_ev_at = $3, end_ev_from = cur.old_state, end_ev_to = $2,
			end_ev_reason = $10, end_ev_detail = $11, end_ev_actor = $12
		FROM cur WHERE t.id = cur.id
		RETURNING cur.here, cur.old_state, $2::text AS new_state, ` + curPrevEndEv + `, t.event_seq, t.watched, ` + tTaskCols + `),
	a AS (` + attemptShift(finishAttemptSelect) + `
		WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.here)
		` + finishAttemptConflict + `),
	ev AS (
		` + prevEndEventSQL + `)
	SELECT ` + taskCols + ` FROM u ` + endNoteJoin

// endRunLeaseSQL records the attempt and gives its lease up: it ends now
// (not NULL, which marks a run from before leases), so the next delivery
// takes the task over at once.
var endRunLeaseSQL = `WITH a AS (` + finishAttemptSQL + `)
	UPDATE ledger_tasks SET lease_until = clock_timestamp() WHERE id = $1 AND state = 'running' AND attempt = $2`

// endRunKind is EndRun's write with a transition; in a group, all of
// them are one statement (batch.go): endRunSQL over the unnested
// arguments, the task rows locked in ID order (bytewise, as
// beginRunKind's). The states a write may
// move from ($9, an array in the single statement) go in as a
// comma-separated list.
var endRunKind = &batchKind{
	ordinals: true,
	name:     "end run",
	single:   endRunSQL,
	array: endRunArgs + `
		cur AS (
			SELECT t.id, t.state AS old_state, v.ord, v.to_state, v.at, v.set_attempt, v.set_result, v.result, v.last_error, v.run_at,
				v.reason, v.detail, v.actor, v.a_worker, v.a_start, v.a_duration, v.a_outcome, v.a_class, v.a_error, v.a_stack,
				` + runEndHere("v.a_task", "v.a_number") + ` AS here, ` + tPrevEndEvCols + `
			FROM v JOIN ledger_tasks t ON t.id = v.id
			WHERE t.state = ANY(string_to_array(v.from_states, ',')) AND (v.below <= 0 OR t.attempt < v.below)
			ORDER BY t.id COLLATE "C" FOR UPDATE OF t),
		u AS (
			UPDATE ledger_tasks t SET state = cur.to_state, updated_at = cur.at, event_seq = t.event_seq + 1,
				attempt = CASE WHEN cur.set_attempt > 0 THEN cur.set_attempt ELSE t.attempt END,
				result = CASE WHEN cur.set_result THEN cur.result ELSE t.result END,
				last_error = COALESCE(cur.last_error, t.last_error),
				run_at = COALESCE(cur.run_at, t.run_at),
				lease_until = CASE WHEN cur.to_state = 'running' THEN t.lease_until ELSE NULL END,
				` + runEndSet("cur.a_worker", "cur.a_start", "cur.a_duration", "cur.a_outcome", "cur.a_class", "cur.a_error", "cur.a_stack") + `,
				end_ev_seq = t.event_seq + 1, end_ev_at = cur.at, end_ev_from = cur.old_state, end_ev_to = cur.to_state,
				end_ev_reason = cur.reason, end_ev_detail = cur.detail, end_ev_actor = cur.actor
			FROM cur WHERE t.id = cur.id
			RETURNING cur.ord, cur.here, cur.old_state, cur.to_state AS new_state, ` + curPrevEndEv + `, t.event_seq, t.watched, ` + tTaskCols + `),
		a AS (
			INSERT INTO ledger_attempts (task_id, number, worker, start_at, duration_ns, outcome, class, error, stack)
			SELECT v.a_task, v.a_number, CASE WHEN v.a_worker <> '' THEN v.a_worker ELSE COALESCE(r.run_worker, '') END,
				COALESCE(v.a_start, r.run_start), v.a_duration, v.a_outcome, v.a_class, v.a_error, v.a_stack
			FROM v LEFT JOIN ledger_tasks r ON r.id = v.a_task AND r.run_attempt = v.a_number
			WHERE v.ord NOT IN (SELECT ord FROM u WHERE here)
			ORDER BY v.a_task
			` + finishAttemptConflict + `),
		ev AS (
			` + prevEndEventSQL + `)
		SELECT ord, ` + taskCols + ` FROM u ` + endNoteJoin,
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
	scan := func(r pgx.Row) (err error) { t, err = scanTask(r); return err }
	args := []any{tr.ID, string(tr.To), s.opts.Now(), tr.Attempt,
		tr.Result != nil, result, tr.LastError, runAt, fromS, tr.Reason, tr.Detail, tr.Actor, tr.IfAttemptBelow,
		a.TaskID, a.Number, a.Worker, tsOrNil(a.Start), int64(a.Duration), a.Outcome, a.Class, a.Error, a.Stack}
	// The lean statement (lean.go) when the move only updates the task
	// row; when it does not apply it changes nothing, and the full
	// statement decides and records.
	err := s.queryRowKind(ctx, endRunLeanKind, scan, args...)
	if err == nil {
		return t, nil
	}
	if isNoRows(err) {
		err = s.queryRowKind(ctx, endRunKind, scan, args...)
	}
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
