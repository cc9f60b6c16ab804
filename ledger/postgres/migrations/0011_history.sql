-- 0011: per-lane, per-minute task counts (ledger.History). Every
-- scheduler writes its own running totals for its current minutes once a
-- heartbeat, replacing its earlier row; readers sum over servers. minute
-- is minutes since the Unix epoch.
CREATE TABLE ledger_history (
	minute    bigint NOT NULL,
	lane      text   NOT NULL,
	server    text   NOT NULL,
	processed bigint NOT NULL DEFAULT 0,
	failed    bigint NOT NULL DEFAULT 0,
	dead      bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (minute, lane, server)
);
