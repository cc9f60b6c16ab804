-- 0010: the notify trigger of 0006 fires only for the events it notifies
-- of (a WHEN clause, checked by the executor), instead of calling its
-- PL/pgSQL function for every event and testing the state inside: a task's
-- created and running events no longer pay a function call. The function
-- keeps its own test, so what is notified is unchanged.
DROP TRIGGER ledger_events_note ON ledger_events;
CREATE TRIGGER ledger_events_note AFTER INSERT ON ledger_events
	FOR EACH ROW
	WHEN (NEW.to_state IN ('completed', 'failed', 'dead', 'rejected', 'cancelled', 'awaiting_review')
		AND NEW.to_state IS DISTINCT FROM NEW.from_state)
	EXECUTE FUNCTION ledger_events_note();
