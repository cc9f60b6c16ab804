-- 0011: per-lane, per-minute task counts (ledger.History). Every
-- scheduler writes its own running totals for its current minutes once a
-- heartbeat, replacing its earlier row; readers sum over servers. minute
-- is minutes since the Unix epoch.
CREATE TABLE ledger_history (
	minute    INTEGER NOT NULL,
	lane      TEXT    NOT NULL,
	server    TEXT    NOT NULL,
	processed INTEGER NOT NULL DEFAULT 0,
	failed    INTEGER NOT NULL DEFAULT 0,
	dead      INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (minute, lane, server)
) WITHOUT ROWID;
