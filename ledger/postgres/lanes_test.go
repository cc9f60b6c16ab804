package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger/postgres"
)

// TestOpen_MigrateLaneEvents: a schema at version 2 (lane pauses, no lane
// history) is upgraded by Open: the lanes paused then start their history
// with that pause, and new changes append after it.
func TestOpen_MigrateLaneEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, schema := freshSchema(t)
	s, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != 4 {
		s.Close()
		t.Fatalf("schema version %d %v, want 4", v, err)
	}
	// Take it back to version 2 with two lanes paused.
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, q := range []string{
		`DROP TABLE ledger_lane_events`,
		`ALTER TABLE ledger_tasks DROP COLUMN lease_until`,
		`DELETE FROM ledger_schema_version WHERE version >= 3`,
		`INSERT INTO ledger_lane_pauses (lane, actor, since) VALUES ('batch', 'operator:ann', $1), ('interactive', '', $2)`,
	} {
		args := []any{}
		if q[0] == 'I' {
			args = []any{since, since.Add(time.Minute)}
		}
		if _, err := s.Pool().Exec(ctx, q, args...); err != nil {
			s.Close()
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()

	s, err = postgres.Open(ctx, dsn, &postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := s.SchemaVersion(ctx); err != nil || v != 4 {
		t.Fatalf("schema version after reopening %d %v, want 4", v, err)
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
