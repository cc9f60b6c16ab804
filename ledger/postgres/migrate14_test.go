package postgres_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/ledger/ledgertest"
	"github.com/switchyard-dev/switchyard/ledger/postgres"
)

// TestOpen_Migrate14: a schema at version 13 (every ended attempt in its
// ledger_attempts row, a running one in the task row, the notify trigger
// per row) with a running, a completed and a retry_wait task is upgraded
// by Open: every task, its events and attempts read as before; the
// running task's end and the retried task's next attempt are recorded as
// version 14 records them and read right; the notify trigger is a row
// trigger (0014's statement trigger, made a row trigger again by 0015)
// and a completion still sends its note.
func TestOpen_Migrate14(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, schema := freshSchema(t)
	s, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	mk := func() string {
		tk, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch", Args: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.BeginRun(ctx, ledger.RunStart{ID: tk.ID, Attempt: 1, Worker: "w1", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		return tk.ID
	}
	end := func(s *postgres.Store, id string, n int, to ledger.State, outcome string) {
		t.Helper()
		req := ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: n, Outcome: outcome, Error: "e-" + outcome, Duration: time.Duration(n) * time.Millisecond},
			Transition: &ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: to, Reason: outcome}}
		if to == ledger.RetryWait {
			req.Transition.RunAt = time.Now()
		}
		if _, err := s.EndRun(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	running, done, retry := mk(), mk(), mk()
	end(s, done, 1, ledger.Completed, "ok")
	end(s, retry, 1, ledger.RetryWait, "retry")
	ids := []string{running, done, retry}
	read := func(s *postgres.Store) map[string]ledgertest.TaskRecord {
		t.Helper()
		return ledgertest.Snapshot(ctx, t, s, ids)
	}
	before := read(s)
	// Back to version 13, as it wrote the ledger: an ended attempt has its
	// row; the trigger runs per row.
	for _, q := range []string{
		`INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
			SELECT id, end_ev_seq, end_ev_at, end_ev_from, end_ev_to, end_ev_reason, end_ev_detail, end_ev_actor
			FROM ledger_tasks WHERE end_ev_seq IS NOT NULL`, // 0015
		`ALTER TABLE ledger_tasks DROP COLUMN end_ev_seq, DROP COLUMN end_ev_at, DROP COLUMN end_ev_from, DROP COLUMN end_ev_to,
			DROP COLUMN end_ev_reason, DROP COLUMN end_ev_detail, DROP COLUMN end_ev_actor`,
		`INSERT INTO ledger_attempts (task_id, number, worker, start_at, duration_ns, outcome, class, error, stack)
			SELECT id, run_attempt, run_worker, run_start, run_duration, run_outcome, run_class, run_error, run_stack
			FROM ledger_tasks WHERE run_outcome IS NOT NULL`,
		`INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
			SELECT id, run_ev_seq, run_ev_at, run_ev_from, 'running', run_ev_reason, run_ev_detail, run_ev_actor
			FROM ledger_tasks WHERE run_ev_seq IS NOT NULL`,
		`ALTER TABLE ledger_tasks DROP COLUMN run_duration, DROP COLUMN run_outcome, DROP COLUMN run_class, DROP COLUMN run_error, DROP COLUMN run_stack,
			DROP COLUMN run_ev_seq, DROP COLUMN run_ev_at, DROP COLUMN run_ev_from, DROP COLUMN run_ev_reason, DROP COLUMN run_ev_detail,
			DROP COLUMN run_ev_actor`,
		`DROP TRIGGER ledger_events_note ON ledger_events`,
		rowNoteFunc,
		rowNoteTrigger,
		`ALTER TABLE ledger_tasks DROP COLUMN watched`, // 0016
		`DELETE FROM ledger_schema_version WHERE version >= 14`,
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			s.Close()
			t.Fatalf("%s: %v", q, err)
		}
	}
	var rows, starts int
	if err := s.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger_attempts), (SELECT count(*) FROM ledger_events WHERE to_state = 'running')`).Scan(&rows, &starts); err != nil || rows != 2 || starts != 3 {
		s.Close()
		t.Fatalf("version 13: %d attempt rows, %d start events, %v; want 2 (the ended attempts) and 3", rows, starts, err)
	}
	s.Close()

	s, err = postgres.Open(ctx, dsn, &postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := s.SchemaVersion(ctx); err != nil || v != 16 {
		t.Fatalf("schema version after the migration %d %v, want 16", v, err)
	}
	if got := read(s); !reflect.DeepEqual(got, before) {
		t.Fatalf("after the migration:\n%+v\nwant\n%+v", got, before)
	}
	var perRow bool
	if err := s.Pool().QueryRow(ctx, `SELECT tgtype & 1 = 1 FROM pg_trigger WHERE tgname = 'ledger_events_note' AND tgrelid = 'ledger_events'::regclass`).Scan(&perRow); err != nil || !perRow {
		t.Fatalf("the notify trigger after the migration: per row %v, %v; want a row trigger (0015)", perRow, err)
	}
	notes, err := s.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{running, retry} { // watched, so that EndRun notes (0016)
		if _, err := s.WatchTask(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// The running task ends; the retried one runs attempt 2 and ends.
	end(s, running, 1, ledger.Completed, "ok")
	if _, err := s.BeginRun(ctx, ledger.RunStart{ID: retry, Attempt: 2, Worker: "w2", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	end(s, retry, 2, ledger.Completed, "ok")
	brief := func(as []ledger.Attempt) (out [][3]any) {
		for _, a := range as {
			out = append(out, [3]any{a.Number, a.Worker, a.Outcome + "/" + a.Error + "/" + a.Duration.String()})
		}
		return out
	}
	after := read(s)
	for id, want := range map[string][][3]any{
		running: {{1, "w1", "ok/e-ok/1ms"}},
		done:    {{1, "w1", "ok/e-ok/1ms"}},
		retry:   {{1, "w1", "retry/e-retry/1ms"}, {2, "w2", "ok/e-ok/2ms"}},
	} {
		if got := brief(after[id].Attempts); !reflect.DeepEqual(got, want) {
			t.Errorf("attempts of %s: %v, want %v", id, got, want)
		}
		if after[id].Task.State != ledger.Completed {
			t.Errorf("task %s: %s, want completed", id, after[id].Task.State)
		}
	}
	if n := len(after[retry].Events); n != len(before[retry].Events)+2 {
		t.Errorf("retried task: %d events, want %d", n, len(before[retry].Events)+2)
	}
	seen := map[string]bool{}
	for !seen[running] || !seen[retry] {
		select {
		case n := <-notes:
			if n.Topic == ledger.TopicState && n.State == ledger.Completed {
				seen[n.TaskID] = true
			}
		case <-ctx.Done():
			t.Fatalf("completion notes after the migration: %v, want %s and %s", seen, running, retry)
		}
	}
}
