package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/ledgertest"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
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

// TestOpen_Migrate15: a version-14 file (every event a row) with queued,
// running, retried, dead and awaiting-review tasks is upgraded by Open:
// every task, its events and attempts read exactly as before; runs after
// it keep their events in the task row, the events from before stay rows,
// and a move from an event row from before writes its note once.
func TestOpen_Migrate15(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) string { return createTask(ctx, t, s, name) }
	begin := func(s *sqlite.Store, id string, n int, worker string) {
		beginRun(ctx, t, s, ledger.RunStart{ID: id, Attempt: n, Worker: worker})
	}
	end := func(s *sqlite.Store, id string, n int, from, to ledger.State, reason, actor string) {
		t.Helper()
		var lastErr *string
		if to == ledger.RetryWait {
			e := "boom"
			lastErr = &e
		}
		if _, err := s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: n, Outcome: reason},
			Transition: &ledger.TransitionRequest{ID: id, From: []ledger.State{from}, To: to, Reason: reason, Detail: "d-" + reason,
				Actor: actor, LastError: lastErr}}); err != nil {
			t.Fatal(err)
		}
	}
	queued, running, retry, dead, review := create("queued"), create("running"), create("retry"), create("dead"), create("review")
	begin(s, running, 1, "w1")
	begin(s, retry, 1, "w1")
	end(s, retry, 1, ledger.Running, ledger.RetryWait, "failed", "w1")
	begin(s, dead, 1, "w1")
	end(s, dead, 1, ledger.Running, ledger.Dead, "exhausted", "w1")
	begin(s, review, 1, "w1")
	end(s, review, 1, ledger.Running, ledger.AwaitingReview, "needs_review", "w1")
	ids := []string{queued, running, retry, dead, review}
	before := ledgertest.Snapshot(ctx, t, s, ids)
	s.Close()

	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	notes := func(id string) []string {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT state FROM ledger_notes WHERE topic = 'state' AND task_id = ? ORDER BY seq`, id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var st string
			if err := rows.Scan(&st); err != nil {
				t.Fatal(err)
			}
			out = append(out, st)
		}
		return out
	}
	eventRows := func() int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM ledger_events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := eventRows(); n != 0 {
		t.Fatalf("%d event rows at version 15, want none (all in the task rows)", n)
	}
	undo15(ctx, t, db)
	rows14 := eventRows()
	if rows14 != 7 {
		t.Fatalf("%d event rows at version 14, want 7", rows14)
	}

	s = openFile(t, path, nil) // migrates
	if v, err := s.SchemaVersion(ctx); err != nil || v != 15 {
		t.Fatalf("schema version %d %v, want 15", v, err)
	}
	if after := ledgertest.Snapshot(ctx, t, s, ids); !reflect.DeepEqual(before, after) {
		for _, id := range ids {
			if !reflect.DeepEqual(before[id], after[id]) {
				t.Errorf("task %s before the migration:\n%+v\nafter:\n%+v", id, before[id], after[id])
			}
		}
	}
	// Runs after the upgrade: their events go to the task rows.
	end(s, running, 1, ledger.Running, ledger.Completed, "succeeded", "w1")
	begin(s, retry, 2, "w2")
	end(s, retry, 2, ledger.Running, ledger.Completed, "succeeded", "w2")
	begin(s, queued, 1, "w2")
	end(s, review, 1, ledger.AwaitingReview, ledger.Rejected, "rejected", "operator:ann")
	if _, err := s.Transition(ctx, ledger.TransitionRequest{ID: dead, From: []ledger.State{ledger.Dead}, To: ledger.Queued, Reason: "replayed", Actor: "operator:bob"}); err != nil {
		t.Fatal(err)
	}
	begin(s, dead, 2, "w3")
	end(s, dead, 2, ledger.Running, ledger.Completed, "succeeded", "w3")
	if n := eventRows(); n != rows14+1 {
		t.Errorf("%d event rows after the runs, want %d (those from before and the replay's)", n, rows14+1)
	}
	for id, want := range map[string][]string{running: {"completed"}, retry: {"completed"}, dead: {"dead", "completed"},
		review: {"awaiting_review", "rejected"}, queued: nil} {
		if got := notes(id); !reflect.DeepEqual(got, want) {
			t.Errorf("notes of %s: %v, want %v", id, got, want)
		}
	}
	es, err := s.Events(ctx, retry)
	if err != nil || len(es) != 5 || es[2].To != ledger.RetryWait || es[2].Detail != "d-failed" || es[3].Actor != "w2" ||
		es[4].To != ledger.Completed || es[4].Actor != "w2" || es[4].Seq != 5 {
		t.Errorf("events of the retried task: %+v %v", es, err)
	}
	es, err = s.Events(ctx, dead)
	if err != nil || len(es) != 6 || es[2].To != ledger.Dead || es[3].Reason != "replayed" || es[3].Actor != "operator:bob" ||
		es[4].Actor != "w3" || es[5].To != ledger.Completed {
		t.Errorf("events of the replayed task: %+v %v", es, err)
	}
}

// createTask creates a queued task keyed name in the batch lane (the
// migration tests' set-up).
func createTask(ctx context.Context, t *testing.T, s *sqlite.Store, name string) string {
	t.Helper()
	tk, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch", IdempotencyKey: name, Args: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return tk.ID
}

// beginRun begins run r with a one-minute lease.
func beginRun(ctx context.Context, t *testing.T, s *sqlite.Store, r ledger.RunStart) {
	t.Helper()
	r.Lease = time.Minute
	if _, err := s.BeginRun(ctx, r); err != nil {
		t.Fatal(err)
	}
}
