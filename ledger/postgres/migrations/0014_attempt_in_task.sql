-- 0014: a task's hot path writes two rows fewer, and the notify trigger runs
-- once per statement (issue 15, sixth pass).
--
-- The attempt a task ran last is recorded in the task row, start and end:
-- 0012 kept a running attempt's worker and start there (run_attempt,
-- run_worker, run_start); its outcome (run_duration, run_outcome,
-- run_class, run_error, run_stack; NULL while it runs) now goes there too
-- when EndRun moves the task, instead of a ledger_attempts row. The rule
-- readers and writers keep: an attempt's record is its ledger_attempts row
-- when it has one, else, for the task's run_attempt, these columns. Its row
-- is written when the next attempt begins (with the outcome), or at once
-- when the attempt already has a row or EndRun's move is refused. Tasks
-- from before have NULL here: every attempt of theirs that ended has its
-- row, and one still running gets its end here like any other.
ALTER TABLE ledger_tasks ADD COLUMN run_duration bigint, ADD COLUMN run_outcome text, ADD COLUMN run_class text,
	ADD COLUMN run_error text, ADD COLUMN run_stack text;

-- Likewise the event of the attempt's start (to_state 'running'): its
-- seq, time, from-state, reason, detail and actor stay in the task row
-- (run_ev_*) instead of a ledger_events row; Events and ReadStream read it
-- from there, and its row is written when the next BeginRun replaces it.
-- Tasks from before have NULL here and their events are all rows.
ALTER TABLE ledger_tasks ADD COLUMN run_ev_seq bigint, ADD COLUMN run_ev_at timestamptz, ADD COLUMN run_ev_from text,
	ADD COLUMN run_ev_reason text, ADD COLUMN run_ev_detail text, ADD COLUMN run_ev_actor text;

-- The notify trigger of 0006/0010 called its PL/pgSQL function once per
-- event that notifies; it now runs once per statement that inserts events,
-- over the statement's new rows (a transition table), and sends the same
-- notes (same channel, payload and order, at commit).
DROP TRIGGER ledger_events_note ON ledger_events;
CREATE OR REPLACE FUNCTION ledger_events_note() RETURNS trigger AS $$
BEGIN
	PERFORM pg_notify('sy_' || left(md5(TG_TABLE_SCHEMA), 16),
		'state|' || n.to_state || '|' || octet_length(n.task_id) || '|' || n.task_id)
	FROM ledger_events_new n
	WHERE n.to_state IN ('completed', 'failed', 'dead', 'rejected', 'cancelled', 'awaiting_review')
		AND n.to_state IS DISTINCT FROM n.from_state;
	RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_events_note AFTER INSERT ON ledger_events REFERENCING NEW TABLE AS ledger_events_new
	FOR EACH STATEMENT EXECUTE FUNCTION ledger_events_note();
