-- 0001: the initial ledger schema. Times are Unix nanoseconds (NULL for a
-- zero time); byte fields are BLOBs; metadata is JSON text.
CREATE TABLE ledger_tasks (
	seq          INTEGER PRIMARY KEY AUTOINCREMENT, -- creation order, never reused: List pages by it
	id           TEXT    NOT NULL UNIQUE,
	tenant       TEXT    NOT NULL DEFAULT '',
	idem_key     TEXT    NOT NULL DEFAULT '',
	kind         TEXT    NOT NULL,
	lane         TEXT    NOT NULL,
	ordering_key TEXT    NOT NULL DEFAULT '',
	args         BLOB,
	state        TEXT    NOT NULL,
	attempt      INTEGER NOT NULL DEFAULT 0,
	max_attempts INTEGER NOT NULL DEFAULT 0,
	run_at       INTEGER,
	deadline     INTEGER,
	metadata     TEXT,
	result       BLOB,
	last_error   TEXT    NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL,
	event_seq    INTEGER NOT NULL DEFAULT 0 -- the last event's Seq
);
CREATE UNIQUE INDEX ledger_tasks_idem ON ledger_tasks (tenant, idem_key) WHERE idem_key <> '';
CREATE INDEX ledger_tasks_state_updated ON ledger_tasks (state, updated_at);
CREATE INDEX ledger_tasks_tenant_seq ON ledger_tasks (tenant, seq);

CREATE TABLE ledger_attempts (
	task_id     TEXT    NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	number      INTEGER NOT NULL,
	worker      TEXT    NOT NULL DEFAULT '',
	start_at    INTEGER,
	duration_ns INTEGER NOT NULL DEFAULT 0,
	outcome     TEXT    NOT NULL DEFAULT '',
	class       TEXT    NOT NULL DEFAULT '',
	error       TEXT    NOT NULL DEFAULT '',
	stack       TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (task_id, number)
) WITHOUT ROWID;

CREATE TABLE ledger_steps (
	task_id    TEXT    NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	name       TEXT    NOT NULL,
	output     BLOB    NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (task_id, name)
) WITHOUT ROWID;

CREATE TABLE ledger_effects (
	task_id    TEXT    NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	key        TEXT    NOT NULL,
	state      TEXT    NOT NULL,
	attempt    INTEGER NOT NULL,
	result     BLOB,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (task_id, key)
) WITHOUT ROWID;

CREATE TABLE ledger_events (
	task_id    TEXT    NOT NULL REFERENCES ledger_tasks (id) ON DELETE CASCADE,
	seq        INTEGER NOT NULL,
	at         INTEGER NOT NULL,
	from_state TEXT    NOT NULL DEFAULT '',
	to_state   TEXT    NOT NULL DEFAULT '',
	reason     TEXT    NOT NULL,
	detail     TEXT    NOT NULL DEFAULT '',
	actor      TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;

CREATE TABLE ledger_dedup (
	lane       TEXT    NOT NULL,
	tenant     TEXT    NOT NULL,
	key        TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	claimed_at INTEGER NOT NULL,
	PRIMARY KEY (lane, tenant, key)
) WITHOUT ROWID;
CREATE INDEX ledger_dedup_claimed ON ledger_dedup (claimed_at);
