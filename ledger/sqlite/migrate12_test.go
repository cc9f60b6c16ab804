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

// TestOpen_Migrate12: a database at version 11 (the state index, an
// "enqueued" event row per task) with tasks in every state is upgraded
// by Open: every task, its events (one "enqueued" each, not two) and its
// attempts read as before, Prune finds the terminal ones by the new
// index, and a task created after the migration gets its derived event.
func TestOpen_Migrate12(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	states := []ledger.State{ledger.Queued, ledger.Running, ledger.RetryWait, ledger.Completed,
		ledger.Failed, ledger.Dead, ledger.AwaitingReview, ledger.Rejected, ledger.Cancelled, ledger.AwaitingEvent}
	terminal := map[ledger.State]bool{ledger.Completed: true, ledger.Failed: true, ledger.Dead: true, ledger.Rejected: true, ledger.Cancelled: true}

	s, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, st := range states {
		tk, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch", IdempotencyKey: "key-" + string(st), Args: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
		if st == ledger.Running || st == ledger.Completed {
			r, err := s.BeginRun(ctx, ledger.RunStart{ID: tk.ID, Attempt: 1, Worker: "w1", Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if st == ledger.Completed {
				_, err = s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: tk.ID, Number: r.Attempt, Outcome: "ok", Duration: time.Millisecond},
					Transition: &ledger.TransitionRequest{ID: tk.ID, To: ledger.Completed, Result: []byte(`"done"`), Reason: "succeeded"}})
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	s.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The other states, moved by SQL as a version-11 ledger could hold them.
	for i, st := range states {
		if st != ledger.Queued && st != ledger.Running && st != ledger.Completed {
			exec(`UPDATE ledger_tasks SET state = ?, updated_at = updated_at + 1000000000 WHERE id = ?`, string(st), ids[i])
		}
	}
	read := func() map[string]ledgertest.TaskRecord {
		t.Helper()
		s, err := sqlite.Open(ctx, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if v, err := s.SchemaVersion(ctx); err != nil || v != 15 {
			t.Fatalf("schema version %d %v, want 15", v, err)
		}
		return ledgertest.Snapshot(ctx, t, s, ids)
	}
	before := read()
	for id, sn := range before {
		if len(sn.Events) == 0 || sn.Events[0].Seq != 1 || sn.Events[0].Reason != "enqueued" {
			t.Fatalf("events of %s: %+v", id, sn.Events)
		}
	}
	// Take it back to version 11, as that version wrote it: the state
	// index, and an "enqueued" row for every task.
	undo15(ctx, t, db) // 0015, applied again
	exec(`DROP INDEX ledger_tasks_created`)
	exec(`CREATE INDEX ledger_tasks_state_updated ON ledger_tasks (state, updated_at)`)
	exec(`INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason) SELECT id, 1, created_at, '', 'queued', 'enqueued' FROM ledger_tasks`)
	for _, tbl := range []string{"switchyard_spend", "switchyard_pbatch_leases", "switchyard_pbatches", "switchyard_pbatch_items"} {
		exec(`DROP TABLE ` + tbl) // 0013, applied again after 0012
	}
	// Before 0014 a run's start was its attempt's row.
	exec(`INSERT INTO ledger_attempts (task_id, number, worker, start_at)
		SELECT id, run_attempt, run_worker, run_start FROM ledger_tasks WHERE run_attempt IS NOT NULL ON CONFLICT DO NOTHING`)
	for _, col := range []string{"run_attempt", "run_worker", "run_start"} {
		exec(`ALTER TABLE ledger_tasks DROP COLUMN ` + col) // 0014, applied again
	}
	exec(`DELETE FROM ledger_schema_version WHERE version >= 12`)

	after := read() // migrates
	if !reflect.DeepEqual(before, after) {
		for _, id := range ids {
			if !reflect.DeepEqual(before[id], after[id]) {
				t.Errorf("task %s before the migration:\n%+v\nafter:\n%+v", id, before[id], after[id])
			}
		}
	}
	var rows, idx int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM ledger_events WHERE seq = 1`).Scan(&rows); err != nil || rows != len(ids) {
		t.Errorf("version-11 enqueued rows after the migration: %d %v, want %d kept", rows, err, len(ids))
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN ('ledger_tasks_created', 'ledger_tasks_state_updated')`).Scan(&idx); err != nil || idx != 1 {
		t.Errorf("indexes: %d %v", idx, err)
	}

	s = openFile(t, path, nil)
	for i, st := range states {
		ts, err := s.List(ctx, ledger.Filter{States: []ledger.State{st}})
		if err != nil || len(ts) != 1 || ts[0].ID != ids[i] {
			t.Errorf("List(%s) = %d tasks, %v; want %s", st, len(ts), err, ids[i])
		}
	}
	if _, created, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch", IdempotencyKey: "key-completed"}); err != nil || created {
		t.Errorf("repeating a migrated key: created=%v %v", created, err)
	}
	fresh, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	es, err := s.Events(ctx, fresh.ID)
	if err != nil || len(es) != 1 || es[0].Seq != 1 || es[0].Reason != "enqueued" || es[0].To != ledger.Queued || !es[0].At.Equal(fresh.CreatedAt) {
		t.Errorf("events of a new task: %+v %v", es, err)
	}
	n, err := s.Prune(ctx, time.Now().Add(time.Hour))
	if err != nil || n != len(terminal) {
		t.Errorf("Prune removed %d tasks, %v; want the %d terminal ones", n, err, len(terminal))
	}
	for i, st := range states {
		if _, err := s.Get(ctx, ids[i]); terminal[st] == (err == nil) {
			t.Errorf("after Prune, Get(%s task) = %v", st, err)
		}
	}
}
