-- 0001: the initial ledger schema. Unqualified names: the tables go to the
-- schema the store was opened with (search_path).
CREATE TABLE ledger_tasks (
	seq          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- List pages by it
	id           text        NOT NULL UNIQUE,
	tenant       text        NOT NULL DEFAULT '',
	idem_key     text        NOT NULL DEFAULT '',
	kind         text        NOT NULL,
	lane         text        NOT NULL,
	ordering_key text        NOT NULL DEFAULT '',
	args         bytea,
	state        text        NOT NULL,
	attempt      integer     NOT NULL DEFAULT 0,
	max_attempts integer     NOT NULL DEFAULT 0,
	run_at       timestamptz,
	deadline     timestamptz,
	metadata     jsonb,
	result       bytea,
	last_error   text        NOT NULL DEFAULT '',
	created_at   timestamptz NOT NULL,
	updated_at   timestamptz NOT NULL,
	event_seq    bigint      NOT NULL DEFAULT 0 -- the last event's Seq
);
CREATE UNIQUE INDEX ledger_tasks_idem ON ledger_tasks (tenant, idem_key) WHERE idem_key <> '';
CREATE INDEX ledger_tasks_state_updated ON ledger_tasks (state, updated_at);
CREATE INDEX ledger_tasks_tenant_seq ON ledger_tasks (tenant, seq);

CREATE TABLE ledger_attempts (
	task_id     text    NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	number      integer NOT NULL,
	worker      text    NOT NULL DEFAULT '',
	start_at    timestamptz,
	duration_ns bigint  NOT NULL DEFAULT 0,
	outcome     text    NOT NULL DEFAULT '',
	class       text    NOT NULL DEFAULT '',
	error       text    NOT NULL DEFAULT '',
	stack       text    NOT NULL DEFAULT '',
	PRIMARY KEY (task_id, number)
);

CREATE TABLE ledger_steps (
	task_id    text        NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	name       text        NOT NULL,
	output     bytea       NOT NULL,
	created_at timestamptz NOT NULL,
	PRIMARY KEY (task_id, name)
);

CREATE TABLE ledger_effects (
	task_id    text        NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	key        text        NOT NULL,
	state      text        NOT NULL,
	attempt    integer     NOT NULL,
	result     bytea,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (task_id, key)
);

CREATE TABLE ledger_events (
	task_id    text        NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	seq        bigint      NOT NULL,
	at         timestamptz NOT NULL,
	from_state text        NOT NULL DEFAULT '',
	to_state   text        NOT NULL DEFAULT '',
	reason     text        NOT NULL,
	detail     text        NOT NULL DEFAULT '',
	actor      text        NOT NULL DEFAULT '',
	PRIMARY KEY (task_id, seq)
);

CREATE TABLE ledger_dedup (
	lane       text        NOT NULL,
	tenant     text        NOT NULL,
	key        text        NOT NULL,
	id         text        NOT NULL,
	claimed_at timestamptz NOT NULL,
	PRIMARY KEY (lane, tenant, key)
);
CREATE INDEX ledger_dedup_claimed ON ledger_dedup (claimed_at);
