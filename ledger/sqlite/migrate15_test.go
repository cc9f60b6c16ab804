package sqlite_test

import (
	"context"
	"database/sql"
	"testing"
)

// undo15 takes a version-15 file back to version 14 as that version
// wrote it: the events the task rows hold become rows (with the trigger
// of 0006 off, as their notes were written when they happened), the
// trigger of 0006 comes back and the columns of 0015 go.
func undo15(ctx context.Context, t *testing.T, db *sql.DB) {
	t.Helper()
	for _, q := range []string{
		`DROP TRIGGER ledger_events_note`,
		`INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
			SELECT id, run_ev_seq, run_ev_at, run_ev_from, 'running', run_ev_reason, run_ev_detail, COALESCE(run_worker, '')
			FROM ledger_tasks WHERE run_ev_seq IS NOT NULL`,
		`INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
			SELECT id, end_ev_seq, end_ev_at, end_ev_from, end_ev_to, end_ev_reason, end_ev_detail, end_ev_actor
			FROM ledger_tasks WHERE end_ev_seq IS NOT NULL`,
		`CREATE TRIGGER ledger_events_note AFTER INSERT ON ledger_events
			WHEN NEW.to_state IN ('completed', 'failed', 'dead', 'rejected', 'cancelled', 'awaiting_review')
				AND NEW.to_state IS NOT NEW.from_state
		BEGIN
			INSERT INTO ledger_notes (at, topic, task_id, state) VALUES (NEW.at, 'state', NEW.task_id, NEW.to_state);
		END`,
		`DELETE FROM ledger_schema_version WHERE version >= 15`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, c := range []string{"run_ev_seq", "run_ev_at", "run_ev_from", "run_ev_reason", "run_ev_detail",
		"end_ev_seq", "end_ev_at", "end_ev_from", "end_ev_to", "end_ev_reason", "end_ev_detail", "end_ev_actor"} {
		if _, err := db.ExecContext(ctx, `ALTER TABLE ledger_tasks DROP COLUMN `+c); err != nil {
			t.Fatalf("drop %s: %v", c, err)
		}
	}
}
