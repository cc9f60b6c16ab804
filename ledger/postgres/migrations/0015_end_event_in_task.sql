-- 0015: a task's hot path writes one row (issue 15, seventh pass).
--
-- The event of EndRun's move (to completed, failed, dead, retry_wait,
-- awaiting_review …) is kept in the task row (end_ev_*: its seq, time,
-- from-state, to-state, reason, detail and actor) instead of a
-- ledger_events row, as 0014 keeps the start event (run_ev_*); Events and
-- ReadStream read it from there beside the rows. Its row is written when
-- the next EndRun replaces it (a retried or replayed task's next end).
-- Tasks from before have NULL here and their events are all rows.
ALTER TABLE ledger_tasks ADD COLUMN end_ev_seq bigint, ADD COLUMN end_ev_at timestamptz, ADD COLUMN end_ev_from text,
	ADD COLUMN end_ev_to text, ADD COLUMN end_ev_reason text, ADD COLUMN end_ev_detail text, ADD COLUMN end_ev_actor text;

-- The note of an event kept in the task row is sent by EndRun's statement
-- itself (pg_notify, same channel and payload, at commit). The trigger
-- sends the notes of the events inserted as rows (an operator's
-- Transition, AppendEvent), but not for an event row that is not its
-- task's latest event: that is an event the task row held and a later
-- EndRun wrote as its row, whose note was sent when it happened. Every
-- other statement that inserts an event makes it its task's latest
-- (event_seq) in the same statement.
--
-- It is a row trigger again, with 0010's WHEN clause (checked by the
-- executor, no call): the hot path's statements (BeginRun, EndRun) insert
-- no row that notifies, so they no longer pay 0014's statement trigger
-- (a PL/pgSQL call and a query over the transition table, once per
-- statement that may insert events, rows or none); an operator's move
-- that notifies pays one call.
DROP TRIGGER ledger_events_note ON ledger_events;
-- The task is looked up in the trigger's own schema, whatever the
-- inserting session's search_path.
CREATE OR REPLACE FUNCTION ledger_events_note() RETURNS trigger AS $$
DECLARE
	latest boolean;
BEGIN
	EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.ledger_tasks t WHERE t.id = $1 AND t.event_seq = $2)', TG_TABLE_SCHEMA)
		INTO latest USING NEW.task_id, NEW.seq;
	IF latest THEN
		PERFORM pg_notify('sy_' || left(md5(TG_TABLE_SCHEMA), 16),
			'state|' || NEW.to_state || '|' || octet_length(NEW.task_id) || '|' || NEW.task_id);
	END IF;
	RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_events_note AFTER INSERT ON ledger_events
	FOR EACH ROW
	WHEN (NEW.to_state IN ('completed', 'failed', 'dead', 'rejected', 'cancelled', 'awaiting_review')
		AND NEW.to_state IS DISTINCT FROM NEW.from_state)
	EXECUTE FUNCTION ledger_events_note();

-- A task's two updates (BeginRun, EndRun) are HOT only when its page has
-- room for the new versions; at fillfactor 70 (0012) about 0.6 updates a
-- task were not (each a new entry in every index of the table), more with
-- the wider row. At 30 nearly all are (TaskCost: 1.99 HOT of 2 updates a
-- task, WAL −20 %). It applies to the pages written from now on.
ALTER TABLE ledger_tasks SET (fillfactor = 30);
