package postgres

// Lean statements for a task's first run (issue 15, twelfth pass). The
// full BeginRun and EndRun statements (run.go) carry data-modifying CTEs
// for what a task's first run never needs (the previous attempt's row,
// the previous start or end event's row, an attempt row that already
// exists), and PostgreSQL initialises every one of them (a ModifyTable
// node: the relation and its indexes opened, its projections built, its
// triggers looked up) on every execution, whether it writes a row or not:
// BenchmarkStmtCost measured the single statements at 90–112 µs of
// backend CPU each against 5 for a trivial one, most of it executor
// start-up (docs/BENCHMARKS.md, twelfth pass).
//
// A lean statement updates the task row alone, under guards that hold
// exactly when the full statement's other CTEs would write nothing; when
// a guard does not hold it changes nothing and returns no row, and the
// caller runs the full statement, which decides as before (so a task's
// retry, a takeover, a refused move each cost one more statement). The
// lean statements take the full ones' arguments unchanged.
//
// Their array statements (batch.go) are one UPDATE … FROM the argument
// rows each, the single statement's guards in its WHERE (issue 15,
// fifteenth pass). They used to lock their rows first, in a CTE ordered
// by task ID (SELECT … ORDER BY t.id FOR UPDATE OF t), and update them
// after: a LockRows, a Sort and a CTE scan to start on every execution,
// and a lock written to each row (heap_lock_tuple, its WAL record) before
// the update locked it again. What that ordering gave is kept another
// way:
//
//   - Lock order. Two groups whose statements of one kind touch some of
//     the same tasks must lock them in one order, or each can hold a row
//     the other waits for (a deadlock: one group rolled back and its
//     writes run alone, group.go). The kinds are byID: batchKind.arrays
//     sends the argument rows sorted by task ID (ord still names each
//     row's write), and the plan updates the rows in the order of the
//     argument rows: a nested loop whose outer side is the argument rows
//     and whose inner side is an index scan of ledger_tasks by id, which
//     arrayPlanSQL holds it to (no hash or merge join, no sequential
//     scan; the generic plan). ModifyTable updates, so locks, each row
//     as the loop returns it. TestLeanArrays_PlanShape checks that plan
//     on an empty and a populated table, TestLeanArrays_NoDeadlock that
//     overlapping statements in concurrent transactions do not deadlock
//     (and, with SWITCHYARD_LOCKORDER_CONTROL=1, that they do with the
//     argument rows unsorted).
//   - The guards under concurrency. In READ COMMITTED, an UPDATE that
//     finds its row updated by a transaction that has since committed
//     re-evaluates its whole WHERE (guards, NOT EXISTS, the join to its
//     argument row) on the row's newest version (EvalPlanQual), as the
//     LockRows did, and skips the row if they no longer hold; its SET
//     reads that version too. So a task moved meanwhile gets no row, as
//     before, and its caller runs the full statement.
//   - EndRun's old state: the update keeps it in end_ev_from (the state
//     of the version it updated) and returns it, as the single statement
//     does, rather than reading it in the locking CTE.

// beginRunLeanKind begins a task's first run: the task is queued and its
// row holds no run (run_attempt and run_ev_seq NULL), so the full
// statement's previous-event and previous-attempt rows would be none;
// and the attempt it begins has no ledger_attempts row (which the full
// statement would update). Its update is the full statement's for that
// case: attempt n = max(delivered, attempt, 1), reason attempt_started,
// no detail, the run's end columns cleared.
var beginRunLeanKind = &batchKind{
	ordinals: true,
	name:     "begin run (first)",
	single: `UPDATE ledger_tasks t SET state = 'running', attempt = GREATEST($2::integer, t.attempt, 1),
			lease_until = clock_timestamp() + $3::bigint * interval '1 microsecond',
			updated_at = $4, event_seq = t.event_seq + 1,
			run_attempt = GREATEST($2::integer, t.attempt, 1), run_worker = $5, run_start = $6,
			run_duration = NULL, run_outcome = NULL, run_class = NULL, run_error = NULL, run_stack = NULL,
			run_ev_seq = t.event_seq + 1, run_ev_at = $4, run_ev_from = 'queued', run_ev_reason = 'attempt_started',
			run_ev_detail = '', run_ev_actor = $5
		WHERE t.id = $1 AND t.state = 'queued' AND t.run_attempt IS NULL AND t.run_ev_seq IS NULL
			AND NOT EXISTS (SELECT 1 FROM ledger_attempts a WHERE a.task_id = $1 AND a.number = GREATEST($2::integer, t.attempt, 1))
		RETURNING ` + tTaskCols,
	byID: true,
	array: `UPDATE ledger_tasks t SET state = 'running', attempt = GREATEST(v.delivered, t.attempt, 1),
			lease_until = clock_timestamp() + v.lease_us * interval '1 microsecond',
			updated_at = v.at, event_seq = t.event_seq + 1,
			run_attempt = GREATEST(v.delivered, t.attempt, 1), run_worker = v.worker, run_start = v.start,
			run_duration = NULL, run_outcome = NULL, run_class = NULL, run_error = NULL, run_stack = NULL,
			run_ev_seq = t.event_seq + 1, run_ev_at = v.at, run_ev_from = 'queued', run_ev_reason = 'attempt_started',
			run_ev_detail = '', run_ev_actor = v.worker
		FROM (` + beginRunArgRows + `) v
		WHERE t.id = v.id AND t.state = 'queued' AND t.run_attempt IS NULL AND t.run_ev_seq IS NULL
			AND NOT EXISTS (SELECT 1 FROM ledger_attempts a WHERE a.task_id = v.id AND a.number = GREATEST(v.delivered, t.attempt, 1))
		RETURNING v.ord, ` + tTaskCols,
}

// endRunLeanKind ends a task's run when the full statement would only
// update the task row: the move is allowed, the row holds the attempt
// (run_attempt) and that attempt has no ledger_attempts row (runEndHere:
// its end goes into the row), and the row holds no earlier end event
// (end_ev_seq NULL: none to write as its row). The attempt's task ($14)
// is the moved task ($1). Its update and note are the full statement's
// for that case (end_ev_from is the state before the move, which the
// note's condition reads).
var endRunLeanKind = &batchKind{
	ordinals: true,
	name:     "end run (first)",
	single: `WITH u AS (
			UPDATE ledger_tasks t SET state = $2, updated_at = $3, event_seq = t.event_seq + 1,
				attempt = CASE WHEN $4::integer > 0 THEN $4::integer ELSE t.attempt END,
				result = CASE WHEN $5::boolean THEN $6::bytea ELSE t.result END,
				last_error = COALESCE($7::text, t.last_error),
				run_at = COALESCE($8::timestamptz, t.run_at),
				lease_until = CASE WHEN $2 = 'running' THEN t.lease_until ELSE NULL END,
				run_worker = CASE WHEN $16::text <> '' THEN $16::text ELSE t.run_worker END,
				run_start = COALESCE($17::timestamptz, t.run_start),
				run_duration = $18::bigint, run_outcome = $19::text, run_class = $20::text, run_error = $21::text, run_stack = $22::text,
				end_ev_seq = t.event_seq + 1, end_ev_at = $3, end_ev_from = t.state, end_ev_to = $2,
				end_ev_reason = $10, end_ev_detail = $11, end_ev_actor = $12
			WHERE t.id = $1 AND t.state = ANY($9::text[]) AND ($13::integer <= 0 OR t.attempt < $13::integer)
				AND t.end_ev_seq IS NULL AND $14::text = $1 AND t.run_attempt = $15::integer
				AND NOT EXISTS (SELECT 1 FROM ledger_attempts x WHERE x.task_id = $1 AND x.number = $15::integer)
			RETURNING t.end_ev_from AS old_state, $2::text AS new_state, t.watched, ` + tTaskCols + `)
		SELECT ` + taskCols + ` FROM u ` + endNoteJoin,
	byID: true,
	array: `WITH u AS (
			UPDATE ledger_tasks t SET state = v.to_state, updated_at = v.at, event_seq = t.event_seq + 1,
				attempt = CASE WHEN v.set_attempt > 0 THEN v.set_attempt ELSE t.attempt END,
				result = CASE WHEN v.set_result THEN v.result ELSE t.result END,
				last_error = COALESCE(v.last_error, t.last_error),
				run_at = COALESCE(v.run_at, t.run_at),
				lease_until = CASE WHEN v.to_state = 'running' THEN t.lease_until ELSE NULL END,
				run_worker = CASE WHEN v.a_worker <> '' THEN v.a_worker ELSE t.run_worker END,
				run_start = COALESCE(v.a_start, t.run_start),
				run_duration = v.a_duration, run_outcome = v.a_outcome, run_class = v.a_class, run_error = v.a_error, run_stack = v.a_stack,
				end_ev_seq = t.event_seq + 1, end_ev_at = v.at, end_ev_from = t.state, end_ev_to = v.to_state,
				end_ev_reason = v.reason, end_ev_detail = v.detail, end_ev_actor = v.actor
			FROM (` + endRunArgRows + `) v
			WHERE t.id = v.id AND t.state = ANY(string_to_array(v.from_states, ',')) AND (v.below <= 0 OR t.attempt < v.below)
				AND t.end_ev_seq IS NULL AND v.a_task = v.id AND t.run_attempt = v.a_number
				AND NOT EXISTS (SELECT 1 FROM ledger_attempts x WHERE x.task_id = v.id AND x.number = v.a_number)
			RETURNING v.ord, t.end_ev_from AS old_state, v.to_state AS new_state, t.watched, ` + tTaskCols + `)
		SELECT ord, ` + taskCols + ` FROM u ` + endNoteJoin,
	conv: endRunKind.conv,
}
