-- 0008: the transactional outbox (Client.EnqueueTx, reliable push). A row
-- is a task waiting to be published to its broker; the relay claims rows
-- by lease (lease_until, Unix nanoseconds, 0 for free), publishes them and
-- deletes them. ledger_identity marks this database, so that a transaction
-- opened on another database is refused instead of written there.
CREATE TABLE ledger_outbox (
	seq         INTEGER PRIMARY KEY AUTOINCREMENT,
	task_id     TEXT    NOT NULL,
	ordering_key TEXT   NOT NULL DEFAULT '', -- the task's: a row waits for earlier rows of its key
	headers     TEXT,
	created_at  INTEGER NOT NULL,
	lease_until INTEGER NOT NULL DEFAULT 0,
	owner       TEXT    NOT NULL DEFAULT '',
	tries       INTEGER NOT NULL DEFAULT 0,
	last_error  TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX ledger_outbox_lease ON ledger_outbox (lease_until, seq);
CREATE INDEX ledger_outbox_task ON ledger_outbox (task_id);
CREATE INDEX ledger_outbox_ordering ON ledger_outbox (ordering_key, seq) WHERE ordering_key <> '';
CREATE TABLE ledger_identity (id TEXT NOT NULL);
INSERT INTO ledger_identity (id) VALUES (lower(hex(randomblob(16))));
