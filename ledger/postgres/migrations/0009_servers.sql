-- 0009: the fleet (ledger.Servers). Every scheduler sharing the ledger
-- registers itself, refreshes its row every heartbeat and deletes it when
-- it stops. lanes is comma-separated; interval_ns is the heartbeat
-- interval in nanoseconds.
CREATE TABLE ledger_servers (
	id          text        NOT NULL PRIMARY KEY,
	host        text        NOT NULL DEFAULT '',
	pid         integer     NOT NULL DEFAULT 0,
	lanes       text        NOT NULL DEFAULT '',
	slots       integer     NOT NULL DEFAULT 0,
	busy        integer     NOT NULL DEFAULT 0,
	version     text        NOT NULL DEFAULT '',
	started     timestamptz NOT NULL,
	heartbeat   timestamptz NOT NULL,
	interval_ns bigint      NOT NULL DEFAULT 0
);
CREATE INDEX ledger_servers_heartbeat ON ledger_servers (heartbeat);
