-- 0007: task streams (progress and chunks) and durable waits. A stream
-- entry's seq comes from the task's event counter (ledger_tasks.event_seq),
-- shared with ledger_events, so events and entries merge in write order.
CREATE TABLE ledger_stream (
	task_id  text             NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	seq      bigint           NOT NULL,
	at       timestamptz      NOT NULL,
	kind     text             NOT NULL,
	attempt  integer          NOT NULL DEFAULT 0,
	fraction double precision NOT NULL DEFAULT 0,
	message  text             NOT NULL DEFAULT '',
	data     bytea,
	PRIMARY KEY (task_id, seq)
);
CREATE INDEX ledger_stream_at ON ledger_stream (at);
CREATE INDEX ledger_stream_progress ON ledger_stream (task_id, seq) WHERE kind = 'progress';

CREATE TABLE ledger_waits (
	task_id    text        NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	name       text        NOT NULL,
	tenant     text        NOT NULL DEFAULT '',
	corr_key   text        NOT NULL DEFAULT '',
	token_hash bytea,
	state      text        NOT NULL,
	payload    bytea,
	timeout_ns bigint      NOT NULL DEFAULT 0,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (task_id, name)
);
CREATE UNIQUE INDEX ledger_waits_corr ON ledger_waits (tenant, corr_key) WHERE corr_key <> '' AND state = 'pending';
CREATE UNIQUE INDEX ledger_waits_token ON ledger_waits (token_hash) WHERE token_hash IS NOT NULL;
