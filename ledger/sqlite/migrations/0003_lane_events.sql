-- 0003: the history of lane pauses and resumes made through the ledger
-- (ledger.LaneControls.LaneEvents): one row for each change of a lane's
-- state, written in the same transaction as the change. at is Unix
-- nanoseconds; seq is the order the changes were made in.
CREATE TABLE ledger_lane_events (
	seq    INTEGER PRIMARY KEY AUTOINCREMENT,
	lane   TEXT    NOT NULL,
	actor  TEXT    NOT NULL DEFAULT '',
	paused INTEGER NOT NULL,
	at     INTEGER NOT NULL
);
CREATE INDEX ledger_lane_events_lane_seq ON ledger_lane_events (lane, seq);
-- A lane paused before this migration starts its history with that pause.
INSERT INTO ledger_lane_events (lane, actor, paused, at)
	SELECT lane, actor, 1, since FROM ledger_lane_pauses ORDER BY since, lane;
