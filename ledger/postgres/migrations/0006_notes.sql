-- 0006: the control channel (ledger.Notes) over LISTEN/NOTIFY. Every event
-- whose new state is terminal or awaiting_review notifies, in the same
-- transaction as the move (delivered at commit), on the schema's channel
-- 'sy_' || the first 16 hex digits of md5(schema), with the payload
-- ledger.EncodeNote makes: topic|state|len(task)|task.
CREATE OR REPLACE FUNCTION ledger_events_note() RETURNS trigger AS $$
BEGIN
	IF NEW.to_state IN ('completed', 'failed', 'dead', 'rejected', 'cancelled', 'awaiting_review')
			AND NEW.to_state IS DISTINCT FROM NEW.from_state THEN
		PERFORM pg_notify('sy_' || left(md5(TG_TABLE_SCHEMA), 16),
			'state|' || NEW.to_state || '|' || octet_length(NEW.task_id) || '|' || NEW.task_id);
	END IF;
	RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_events_note AFTER INSERT ON ledger_events
	FOR EACH ROW EXECUTE FUNCTION ledger_events_note();
