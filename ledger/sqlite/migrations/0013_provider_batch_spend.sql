-- 0013: the provider-batch lane and spend accounting (package
-- providerbatch, store providerbatch/sqlstore). Times are Unix nanoseconds;
-- money is integer micro-units of the price table's currency.
--
-- One row per task whose model call goes through the batch lane.
CREATE TABLE switchyard_pbatch_items (
	task_id    TEXT    PRIMARY KEY,
	provider   TEXT    NOT NULL,
	model      TEXT    NOT NULL,
	tenant     TEXT    NOT NULL DEFAULT '',
	kind       TEXT    NOT NULL DEFAULT '',
	run_id     TEXT    NOT NULL DEFAULT '',
	cache_key  TEXT    NOT NULL DEFAULT '',
	params     BLOB    NOT NULL,
	state      TEXT    NOT NULL,
	batch_id   TEXT,
	attempts   INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL,
	result     BLOB,
	err        TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX switchyard_pbatch_items_pending ON switchyard_pbatch_items (provider, state, created_at);
CREATE INDEX switchyard_pbatch_items_batch ON switchyard_pbatch_items (batch_id);

-- One row per provider batch; provider_id is recorded before any poll.
CREATE TABLE switchyard_pbatches (
	local_id    TEXT    PRIMARY KEY,
	provider    TEXT    NOT NULL,
	provider_id TEXT    NOT NULL DEFAULT '',
	state       TEXT    NOT NULL,
	items       INTEGER NOT NULL DEFAULT 0,
	created_at  INTEGER NOT NULL,
	next_poll   INTEGER NOT NULL DEFAULT 0,
	closed_at   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX switchyard_pbatches_open ON switchyard_pbatches (provider, state);

-- The pump lease: one process at a time submits and polls a provider.
CREATE TABLE switchyard_pbatch_leases (
	provider TEXT    PRIMARY KEY,
	holder   TEXT    NOT NULL,
	until    INTEGER NOT NULL
);

-- One row per task's model call: reserved (estimate) at admission, then
-- settled to the provider's reported usage.
CREATE TABLE switchyard_spend (
	task_id      TEXT    PRIMARY KEY,
	tenant       TEXT    NOT NULL DEFAULT '',
	kind         TEXT    NOT NULL DEFAULT '',
	run_id       TEXT    NOT NULL DEFAULT '',
	provider     TEXT    NOT NULL,
	model        TEXT    NOT NULL,
	cache_key    TEXT    NOT NULL DEFAULT '',
	mode         TEXT    NOT NULL,
	state        TEXT    NOT NULL,
	input        INTEGER NOT NULL DEFAULT 0,
	cached_input INTEGER NOT NULL DEFAULT 0,
	output       INTEGER NOT NULL DEFAULT 0,
	micros       INTEGER NOT NULL,
	at           INTEGER NOT NULL
);
CREATE INDEX switchyard_spend_tenant_at ON switchyard_spend (tenant, at);
