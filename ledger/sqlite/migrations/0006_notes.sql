-- 0006: the control channel (ledger.Notes). One row per note; listeners
-- poll seq > the last one seen. A trigger writes a 'state' note in the
-- same transaction as every event whose new state is terminal or
-- awaiting_review, so that waiters (Client.Wait) and the workers running
-- a task that was cancelled hear of it whatever moved it. Rows older than
-- a minute are deleted by the listeners' poller.
CREATE TABLE ledger_notes (
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	at      INTEGER NOT NULL,
	topic   TEXT    NOT NULL,
	task_id TEXT    NOT NULL,
	state   TEXT    NOT NULL DEFAULT '',
	detail  TEXT    NOT NULL DEFAULT ''
);
CREATE TRIGGER ledger_events_note AFTER INSERT ON ledger_events
	WHEN NEW.to_state IN ('completed', 'failed', 'dead', 'rejected', 'cancelled', 'awaiting_review')
		AND NEW.to_state IS NOT NEW.from_state
BEGIN
	INSERT INTO ledger_notes (at, topic, task_id, state) VALUES (NEW.at, 'state', NEW.task_id, NEW.to_state);
END;
