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

// TestOpen_Migrate14: a database at version 13, where BeginRun wrote a
// run's attempt row when it began, is upgraded by Open (the run's start
// moves to the task row for the runs that begin after it): every task,
// its events and its attempts read as before; a run begun before the
// upgrade ends with the worker and start its row holds; a run begun after
// it writes no attempt row until it ends, and Attempts shows it from the
// task row meanwhile.
func TestOpen_Migrate14(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	start := time.Unix(1764669600, 0)

	s, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) string { return createTask(ctx, t, s, name) }
	begin := func(s *sqlite.Store, id string, n int, worker string) {
		beginRun(ctx, t, s, ledger.RunStart{ID: id, Attempt: n, Worker: worker, Start: start.Add(time.Duration(n) * time.Second)})
	}
	end := func(s *sqlite.Store, id string, a ledger.Attempt, to ledger.State, reason string) {
		t.Helper()
		a.TaskID = id
		var lastErr *string
		if to == ledger.RetryWait {
			e := "boom"
			lastErr = &e
		}
		if _, err := s.EndRun(ctx, ledger.RunEnd{Attempt: a, Transition: &ledger.TransitionRequest{ID: id, To: to, Reason: reason, LastError: lastErr}}); err != nil {
			t.Fatal(err)
		}
	}
	queued, running, completed, retry := create("queued"), create("running"), create("completed"), create("retry")
	begin(s, running, 1, "w1")
	begin(s, completed, 1, "w1")
	end(s, completed, ledger.Attempt{Number: 1, Worker: "w1", Start: start.Add(time.Second), Duration: time.Millisecond, Outcome: "ok"}, ledger.Completed, "succeeded")
	begin(s, retry, 1, "w1")
	end(s, retry, ledger.Attempt{Number: 1, Worker: "w1", Start: start.Add(time.Second), Duration: time.Millisecond, Outcome: "error", Error: "boom"}, ledger.RetryWait, "failed")
	ids := []string{queued, running, completed, retry}

	read := func(s *sqlite.Store) map[string]ledgertest.TaskRecord {
		t.Helper()
		return ledgertest.Snapshot(ctx, t, s, ids)
	}
	before := read(s)
	if as := before[running].Attempts; len(as) != 1 || as[0].Number != 1 || as[0].Worker != "w1" || !as[0].Start.Equal(start.Add(time.Second)) || as[0].Outcome != "" {
		t.Fatalf("attempts of the running task: %+v", as)
	}
	s.Close()

	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	count := func(id string) int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM ledger_attempts WHERE task_id = ?`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Version 14 wrote no row for the running attempt; version 13 did, when
	// it began. Take the file back to version 13 as that version wrote it.
	if n := count(running); n != 0 {
		t.Fatalf("a running attempt has %d rows, want none (its start is in the task row)", n)
	}
	undo15(ctx, t, db) // 0015, applied again
	exec(`INSERT INTO ledger_attempts (task_id, number, worker, start_at)
		SELECT id, run_attempt, run_worker, run_start FROM ledger_tasks WHERE run_attempt IS NOT NULL ON CONFLICT DO NOTHING`)
	for _, col := range []string{"run_attempt", "run_worker", "run_start"} {
		exec(`ALTER TABLE ledger_tasks DROP COLUMN ` + col)
	}
	exec(`DELETE FROM ledger_schema_version WHERE version >= 14`)

	s = openFile(t, path, nil) // migrates
	if v, err := s.SchemaVersion(ctx); err != nil || v != 15 {
		t.Fatalf("schema version %d %v, want 15", v, err)
	}
	if after := read(s); !reflect.DeepEqual(before, after) {
		for _, id := range ids {
			if !reflect.DeepEqual(before[id], after[id]) {
				t.Errorf("task %s before the migration:\n%+v\nafter:\n%+v", id, before[id], after[id])
			}
		}
	}

	// The run begun before the upgrade ends without naming its worker or
	// start: its row keeps them.
	end(s, running, ledger.Attempt{Number: 1, Duration: time.Millisecond, Outcome: "ok"}, ledger.Completed, "succeeded")
	as, err := s.Attempts(ctx, running)
	if err != nil || len(as) != 1 || as[0].Worker != "w1" || !as[0].Start.Equal(start.Add(time.Second)) || as[0].Outcome != "ok" {
		t.Errorf("attempts of the run begun before the upgrade: %+v %v", as, err)
	}
	// Runs begun after it: no row until they end; Attempts shows them.
	begin(s, queued, 1, "w2")
	begin(s, retry, 2, "w2")
	if n, m := count(queued), count(retry); n != 0 || m != 1 {
		t.Errorf("attempt rows after BeginRun: %d and %d, want 0 and 1 (the failed attempt's)", n, m)
	}
	as, err = s.Attempts(ctx, retry)
	if err != nil || len(as) != 2 || as[0].Outcome != "error" || as[1].Number != 2 || as[1].Worker != "w2" ||
		!as[1].Start.Equal(start.Add(2*time.Second)) || as[1].Outcome != "" {
		t.Errorf("attempts of the retried task while it runs: %+v %v", as, err)
	}
	end(s, queued, ledger.Attempt{Number: 1, Duration: time.Millisecond, Outcome: "ok"}, ledger.Completed, "succeeded")
	as, err = s.Attempts(ctx, queued)
	if err != nil || len(as) != 1 || as[0].Worker != "w2" || !as[0].Start.Equal(start.Add(time.Second)) || as[0].Outcome != "ok" || count(queued) != 1 {
		t.Errorf("attempts after the run ends (worker and start from the task row): %+v %v", as, err)
	}
}
