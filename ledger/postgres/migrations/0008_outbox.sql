-- 0008: the transactional outbox (Client.EnqueueTx, reliable push). A row
-- is a task waiting to be published to its broker; relays claim rows by
-- lease with SKIP LOCKED, publish them and delete them. A commit that
-- inserted rows notifies channel switchyard_outbox with the schema's name,
-- so a relay publishes a committed task at once. The table's
-- comment is a random marker of this ledger: a transaction opened on
-- another database or schema does not see it and is refused.
CREATE TABLE ledger_outbox (
	seq         bigserial   PRIMARY KEY,
	task_id     text        NOT NULL,
	ordering_key text       NOT NULL DEFAULT '', -- the task's: a row waits for earlier rows of its key
	headers     jsonb,
	created_at  timestamptz NOT NULL,
	lease_until timestamptz NOT NULL DEFAULT '-infinity',
	owner       text        NOT NULL DEFAULT '',
	tries       integer     NOT NULL DEFAULT 0,
	last_error  text        NOT NULL DEFAULT ''
);
CREATE INDEX ledger_outbox_lease ON ledger_outbox (lease_until, seq);
CREATE INDEX ledger_outbox_task ON ledger_outbox (task_id);
CREATE INDEX ledger_outbox_ordering ON ledger_outbox (ordering_key, seq) WHERE ordering_key <> '';
-- The notification is sent at commit (a deferred constraint trigger) and
-- only by one of the transactions committing at the same moment: the
-- others see its advisory lock taken and leave the wake-up to it (the
-- relays poll briefly after every wake-up to catch them). PostgreSQL
-- serialises the commits of transactions that notify, so notifying on
-- every commit would cap the enqueue rate at one commit at a time.
CREATE FUNCTION ledger_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF pg_try_advisory_xact_lock(hashtextextended('switchyard-outbox-notify:' || TG_TABLE_SCHEMA, 0)) THEN
		PERFORM pg_notify('switchyard_outbox', TG_TABLE_SCHEMA);
	END IF;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER ledger_outbox_notify AFTER INSERT ON ledger_outbox
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_outbox_notify();
DO $$ BEGIN
	EXECUTE format('COMMENT ON TABLE ledger_outbox IS %L', 'switchyard-ledger ' || md5(random()::text || clock_timestamp()::text));
END $$;
