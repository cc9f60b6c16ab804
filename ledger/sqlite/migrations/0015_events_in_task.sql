-- 0015: a task's run writes its two events into the task row (issue 15,
-- eighth pass), as the PostgreSQL store does since its 0014 and 0015.
--
-- The event of a run's start (to_state 'running', BeginRun) is kept in
-- run_ev_* (its seq, time, from-state, reason and detail; its actor is the
-- run's worker, run_worker, which BeginRun sets in the same statement),
-- and the event of EndRun's move (to completed, failed, dead, retry_wait,
-- awaiting_review …) in end_ev_* (seq, time, from-state, to-state,
-- reason, detail, actor), instead of ledger_events rows. Events and
-- ReadStream read them from there beside the rows. A held event's row is
-- written when the next BeginRun (or EndRun) replaces it: a retried or
-- replayed task's earlier events become rows then. Tasks from before have
-- NULL here and their events are all rows; ADD COLUMN rewrites nothing.
ALTER TABLE ledger_tasks ADD COLUMN run_ev_seq INTEGER;
ALTER TABLE ledger_tasks ADD COLUMN run_ev_at INTEGER;
ALTER TABLE ledger_tasks ADD COLUMN run_ev_from TEXT;
ALTER TABLE ledger_tasks ADD COLUMN run_ev_reason TEXT;
ALTER TABLE ledger_tasks ADD COLUMN run_ev_detail TEXT;
ALTER TABLE ledger_tasks ADD COLUMN end_ev_seq INTEGER;
ALTER TABLE ledger_tasks ADD COLUMN end_ev_at INTEGER;
ALTER TABLE ledger_tasks ADD COLUMN end_ev_from TEXT;
ALTER TABLE ledger_tasks ADD COLUMN end_ev_to TEXT;
ALTER TABLE ledger_tasks ADD COLUMN end_ev_reason TEXT;
ALTER TABLE ledger_tasks ADD COLUMN end_ev_detail TEXT;
ALTER TABLE ledger_tasks ADD COLUMN end_ev_actor TEXT;

-- The state note of an event kept in the task row is written by EndRun
-- itself (a ledger_notes row in the same transaction, as the trigger
-- writes it). The trigger writes the notes of the events inserted as rows
-- (an operator's Transition, AppendEvent), but not for an event row that
-- is not its task's latest event: that is an event the task row held and
-- a later BeginRun or EndRun wrote as its row, whose note was written when
-- it happened. Every other statement that inserts an event makes it its
-- task's latest (event_seq) first, in the same transaction.
DROP TRIGGER ledger_events_note;
CREATE TRIGGER ledger_events_note AFTER INSERT ON ledger_events
	WHEN NEW.to_state IN ('completed', 'failed', 'dead', 'rejected', 'cancelled', 'awaiting_review')
		AND NEW.to_state IS NOT NEW.from_state
		AND NEW.seq = (SELECT event_seq FROM ledger_tasks WHERE id = NEW.task_id)
BEGIN
	INSERT INTO ledger_notes (at, topic, task_id, state) VALUES (NEW.at, 'state', NEW.task_id, NEW.to_state);
END;
