-- 0009: the fleet (ledger.Servers). Every scheduler sharing the ledger
-- registers itself, refreshes its row every heartbeat and deletes it when
-- it stops. lanes is comma-separated; started and heartbeat are Unix
-- nanoseconds, interval_ns the heartbeat interval in nanoseconds.
CREATE TABLE ledger_servers (
	id          TEXT    NOT NULL PRIMARY KEY,
	host        TEXT    NOT NULL DEFAULT '',
	pid         INTEGER NOT NULL DEFAULT 0,
	lanes       TEXT    NOT NULL DEFAULT '',
	slots       INTEGER NOT NULL DEFAULT 0,
	busy        INTEGER NOT NULL DEFAULT 0,
	version     TEXT    NOT NULL DEFAULT '',
	started     INTEGER NOT NULL,
	heartbeat   INTEGER NOT NULL,
	interval_ns INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX ledger_servers_heartbeat ON ledger_servers (heartbeat);
