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
	if v, err := s.SchemaVersion(ctx); err != nil || v != 16 {
		s.Close()
		t.Fatalf("schema version %d %v, want 16", v, err)
	}
	// Take it back to version 2 with two lanes paused.
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, q := range []string{
		`ALTER TABLE ledger_tasks DROP COLUMN end_ev_seq, DROP COLUMN end_ev_at, DROP COLUMN end_ev_from, DROP COLUMN end_ev_to,
			DROP COLUMN end_ev_reason, DROP COLUMN end_ev_detail, DROP COLUMN end_ev_actor`, // 0015
		`ALTER TABLE ledger_tasks DROP COLUMN run_duration, DROP COLUMN run_outcome, DROP COLUMN run_class, DROP COLUMN run_error, DROP COLUMN run_stack,
			DROP COLUMN run_ev_seq, DROP COLUMN run_ev_at, DROP COLUMN run_ev_from, DROP COLUMN run_ev_reason, DROP COLUMN run_ev_detail,
			DROP COLUMN run_ev_actor`, // 0014
		`DROP TABLE switchyard_spend`, // 0013
		`DROP TABLE switchyard_pbatch_leases`,
		`DROP TABLE switchyard_pbatches`,
		`DROP TABLE switchyard_pbatch_items`,
		`DROP INDEX ledger_tasks_created`, // 0012
		`ALTER TABLE ledger_tasks DROP COLUMN run_attempt, DROP COLUMN run_worker, DROP COLUMN run_start`,
		`ALTER TABLE ledger_events ADD CONSTRAINT ledger_events_task_id_fkey FOREIGN KEY (task_id) REFERENCES ledger_tasks (id) ON DELETE CASCADE`,
		`CREATE INDEX ledger_tasks_state_updated ON ledger_tasks (state, updated_at)`,
		`DROP TABLE ledger_history`, // 0011
		`DROP TABLE ledger_servers`, // 0009
		`DROP TABLE ledger_outbox`,  // 0008
		`DROP FUNCTION ledger_outbox_notify()`,
		`DROP TABLE ledger_stream`, // 0007
		`DROP TABLE ledger_waits`,
		`DROP TABLE ledger_order_done`, // 0005
		`DROP TABLE ledger_order_keys`,
		`DROP TABLE ledger_lane_events`,
		`DROP TRIGGER ledger_events_note ON ledger_events`,
		`DROP FUNCTION ledger_events_note()`,
		`ALTER TABLE ledger_tasks DROP COLUMN lease_until`,
		`ALTER TABLE ledger_tasks DROP COLUMN watched`, // 0016
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
	if v, err := s.SchemaVersion(ctx); err != nil || v != 16 {
		t.Fatalf("schema version after reopening %d %v, want 16", v, err)
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
