-- 0013: the provider-batch lane and spend accounting (package
-- providerbatch, store providerbatch/sqlstore). Times are Unix nanoseconds;
-- money is integer micro-units of the price table's currency.
--
-- One row per task whose model call goes through the batch lane.
CREATE TABLE switchyard_pbatch_items (
	task_id    text    PRIMARY KEY,
	provider   text    NOT NULL,
	model      text    NOT NULL,
	tenant     text    NOT NULL DEFAULT '',
	kind       text    NOT NULL DEFAULT '',
	run_id     text    NOT NULL DEFAULT '',
	cache_key  text    NOT NULL DEFAULT '',
	params     bytea   NOT NULL,
	state      text    NOT NULL,
	batch_id   text,
	attempts   bigint  NOT NULL DEFAULT 0,
	created_at bigint  NOT NULL,
	result     bytea,
	err        text    NOT NULL DEFAULT ''
);
CREATE INDEX switchyard_pbatch_items_pending ON switchyard_pbatch_items (provider, state, created_at);
CREATE INDEX switchyard_pbatch_items_batch ON switchyard_pbatch_items (batch_id);

-- One row per provider batch; provider_id is recorded before any poll.
CREATE TABLE switchyard_pbatches (
	local_id    text    PRIMARY KEY,
	provider    text    NOT NULL,
	provider_id text    NOT NULL DEFAULT '',
	state       text    NOT NULL,
	items       bigint  NOT NULL DEFAULT 0,
	created_at  bigint  NOT NULL,
	next_poll   bigint  NOT NULL DEFAULT 0,
	closed_at   bigint  NOT NULL DEFAULT 0
);
CREATE INDEX switchyard_pbatches_open ON switchyard_pbatches (provider, state);

-- The pump lease: one process at a time submits and polls a provider.
CREATE TABLE switchyard_pbatch_leases (
	provider text    PRIMARY KEY,
	holder   text    NOT NULL,
	until    bigint  NOT NULL
);

-- One row per task's model call: reserved (estimate) at admission, then
-- settled to the provider's reported usage.
CREATE TABLE switchyard_spend (
	task_id      text    PRIMARY KEY,
	tenant       text    NOT NULL DEFAULT '',
	kind         text    NOT NULL DEFAULT '',
	run_id       text    NOT NULL DEFAULT '',
	provider     text    NOT NULL,
	model        text    NOT NULL,
	cache_key    text    NOT NULL DEFAULT '',
	mode         text    NOT NULL,
	state        text    NOT NULL,
	input        bigint  NOT NULL DEFAULT 0,
	cached_input bigint  NOT NULL DEFAULT 0,
	output       bigint  NOT NULL DEFAULT 0,
	micros       bigint  NOT NULL,
	at           bigint  NOT NULL
);
CREATE INDEX switchyard_spend_tenant_at ON switchyard_spend (tenant, at);
