-- 0002: lanes paused through the ledger (ledger.LaneControls), seen by
-- every process sharing it.
CREATE TABLE ledger_lane_pauses (
	lane  text        NOT NULL PRIMARY KEY,
	actor text        NOT NULL DEFAULT '',
	since timestamptz NOT NULL
);
