package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"
)

// TestOpen_MigrateLaneEvents: a database at schema version 2 (lane pauses,
// no lane history) is upgraded by Open: the lanes paused then start their
// history with that pause, and new changes append after it.
func TestOpen_MigrateLaneEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := openFile(t, path, nil)
	if v, err := s.SchemaVersion(ctx); err != nil || v != 15 {
		t.Fatalf("schema version %d %v, want 15", v, err)
	}
	s.Close()
	// Take it back to version 2 with two lanes paused.
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	undo15(ctx, t, db)
	for _, q := range []string{
		`ALTER TABLE ledger_tasks DROP COLUMN run_attempt`, // 0014
		`ALTER TABLE ledger_tasks DROP COLUMN run_worker`,
		`ALTER TABLE ledger_tasks DROP COLUMN run_start`,
		`DROP TABLE switchyard_spend`, // 0013
		`DROP TABLE switchyard_pbatch_leases`,
		`DROP TABLE switchyard_pbatches`,
		`DROP TABLE switchyard_pbatch_items`,
		`DROP INDEX ledger_tasks_created`, // 0012
		`CREATE INDEX ledger_tasks_state_updated ON ledger_tasks (state, updated_at)`,
		`DROP TABLE ledger_history`, // 0011
		`DROP TABLE ledger_servers`, // 0009
		`DROP TABLE ledger_outbox`,  // 0008
		`DROP TABLE ledger_identity`,
		`DROP TABLE ledger_stream`, // 0007
		`DROP TABLE ledger_waits`,
		`DROP TABLE ledger_order_done`, // 0005
		`DROP TABLE ledger_order_keys`,
		`DROP TABLE ledger_lane_events`,
		`DROP TRIGGER ledger_events_note`,
		`DROP TABLE ledger_notes`,
		`ALTER TABLE ledger_tasks DROP COLUMN lease_until`,
		`DELETE FROM ledger_schema_version WHERE version >= 3`,
		`INSERT INTO ledger_lane_pauses (lane, actor, since) VALUES ('batch', 'operator:ann', ?), ('interactive', '', ?)`,
	} {
		args := []any{}
		if q[0] == 'I' {
			args = []any{since.UnixNano(), since.Add(time.Minute).UnixNano()}
		}
		if _, err := db.Exec(q, args...); err != nil {
			db.Close()
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s = openFile(t, path, nil)
	if v, err := s.SchemaVersion(ctx); err != nil || v != 15 {
		t.Fatalf("schema version after reopening %d %v, want 15", v, err)
	}
	es, err := s.LaneEvents(ctx, "", 0)
	if err != nil || len(es) != 2 {
		t.Fatalf("LaneEvents after the migration = %+v, %v; want the two pauses", es, err)
	}
	if es[0].Lane != "interactive" || !es[0].Paused || es[0].Actor != "" || !es[0].At.Equal(since.Add(time.Minute)) ||
		es[1].Lane != "batch" || !es[1].Paused || es[1].Actor != "operator:ann" || !es[1].At.Equal(since) {
		t.Errorf("migrated events = %+v", es)
	}
	if err := s.SetLanePaused(ctx, "batch", false, "operator:bob"); err != nil {
		t.Fatal(err)
	}
	es, err = s.LaneEvents(ctx, "batch", 0)
	if err != nil || len(es) != 2 || es[0].Paused || es[0].Actor != "operator:bob" || es[1].Actor != "operator:ann" {
		t.Errorf("batch's history after a resume = %+v, %v", es, err)
	}
}
