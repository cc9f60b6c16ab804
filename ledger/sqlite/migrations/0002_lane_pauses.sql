-- 0002: lanes paused through the ledger (ledger.LaneControls), seen by
-- every process sharing it. since is Unix nanoseconds.
CREATE TABLE ledger_lane_pauses (
	lane  TEXT    NOT NULL PRIMARY KEY,
	actor TEXT    NOT NULL DEFAULT '',
	since INTEGER NOT NULL
) WITHOUT ROWID;
