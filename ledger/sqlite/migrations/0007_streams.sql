-- 0007: task streams (progress and chunks) and durable waits. A stream
-- entry's seq comes from the task's event counter (ledger_tasks.event_seq),
-- shared with ledger_events, so events and entries merge in write order.
CREATE TABLE ledger_stream (
	task_id  TEXT    NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	seq      INTEGER NOT NULL,
	at       INTEGER NOT NULL,
	kind     TEXT    NOT NULL,
	attempt  INTEGER NOT NULL DEFAULT 0,
	fraction REAL    NOT NULL DEFAULT 0,
	message  TEXT    NOT NULL DEFAULT '',
	data     BLOB,
	PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
CREATE INDEX ledger_stream_at ON ledger_stream (at);
CREATE INDEX ledger_stream_progress ON ledger_stream (task_id, seq) WHERE kind = 'progress';

CREATE TABLE ledger_waits (
	task_id    TEXT    NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	name       TEXT    NOT NULL,
	tenant     TEXT    NOT NULL DEFAULT '',
	corr_key   TEXT    NOT NULL DEFAULT '',
	token_hash BLOB,
	state      TEXT    NOT NULL,
	payload    BLOB,
	timeout_ns INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (task_id, name)
) WITHOUT ROWID;
CREATE UNIQUE INDEX ledger_waits_corr ON ledger_waits (tenant, corr_key) WHERE corr_key <> '' AND state = 'pending';
CREATE UNIQUE INDEX ledger_waits_token ON ledger_waits (token_hash) WHERE token_hash IS NOT NULL;
