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

// migrate12States are the states a task may be in when migration 0012
// runs; every one is carried forward.
var migrate12States = []ledger.State{ledger.Queued, ledger.Running, ledger.RetryWait, ledger.Completed,
	ledger.Failed, ledger.Dead, ledger.AwaitingReview, ledger.Rejected, ledger.Cancelled, ledger.AwaitingEvent}

// rowNoteFunc and rowNoteTrigger put the notify trigger back as
// migrations 0006 and 0010 left it (a PL/pgSQL call per event that
// notifies), for tests that take a schema back to a version before 0014.
const (
	rowNoteFunc = `CREATE OR REPLACE FUNCTION ledger_events_note() RETURNS trigger AS $$
BEGIN
	IF NEW.to_state IN ('completed', 'failed', 'dead', 'rejected', 'cancelled', 'awaiting_review')
			AND NEW.to_state IS DISTINCT FROM NEW.from_state THEN
		PERFORM pg_notify('sy_' || left(md5(TG_TABLE_SCHEMA), 16),
			'state|' || NEW.to_state || '|' || octet_length(NEW.task_id) || '|' || NEW.task_id);
	END IF;
	RETURN NULL;
END;
$$ LANGUAGE plpgsql`
	rowNoteTrigger = `CREATE TRIGGER ledger_events_note AFTER INSERT ON ledger_events
	FOR EACH ROW
	WHEN (NEW.to_state IN ('completed', 'failed', 'dead', 'rejected', 'cancelled', 'awaiting_review')
		AND NEW.to_state IS DISTINCT FROM NEW.from_state)
	EXECUTE FUNCTION ledger_events_note()`
)

// TestOpen_Migrate12: a schema at version 11 (the state index, the
// events' foreign key, an "enqueued" event row per task, an attempt row
// per attempt started) with tasks in every state is upgraded
// by Open: every task, its events (one "enqueued" each, not two) and its
// attempts read as before, Prune finds the terminal ones by the new
// index, and a task created after the migration gets its derived event.
func TestOpen_Migrate12(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, schema := freshSchema(t)
	s, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	// Tasks in every state: one that really ran to completion, the others
	// moved by SQL, as a version-11 ledger could hold them.
	var ids []string
	for _, st := range migrate12States {
		tk, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch", IdempotencyKey: "key-" + string(st), Args: []byte(`{}`)})
		if err != nil {
			s.Close()
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
		switch st {
		case ledger.Queued:
		case ledger.Completed, ledger.Running:
			r, err := s.BeginRun(ctx, ledger.RunStart{ID: tk.ID, Attempt: 1, Worker: "w1", Lease: time.Minute})
			if err != nil {
				s.Close()
				t.Fatal(err)
			}
			if st == ledger.Completed {
				_, err = s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: tk.ID, Number: r.Attempt, Outcome: "ok", Duration: time.Millisecond},
					Transition: &ledger.TransitionRequest{ID: tk.ID, To: ledger.Completed, Result: []byte(`"done"`), Reason: "succeeded"}})
				if err != nil {
					s.Close()
					t.Fatal(err)
				}
			}
		default:
			if _, err := s.Pool().Exec(ctx, `UPDATE ledger_tasks SET state = $2, updated_at = updated_at + interval '1 second' WHERE id = $1`, tk.ID, string(st)); err != nil {
				s.Close()
				t.Fatal(err)
			}
		}
	}
	read := func(s *postgres.Store) map[string]ledgertest.TaskRecord {
		t.Helper()
		return ledgertest.Snapshot(ctx, t, s, ids)
	}
	before := read(s)
	for id, sn := range before {
		if len(sn.Events) == 0 || sn.Events[0].Seq != 1 || sn.Events[0].Reason != "enqueued" || (len(sn.Events) > 1 && sn.Events[1].Seq == 1) {
			t.Fatalf("events of %s: %+v", id, sn.Events)
		}
	}
	// Take the schema back to version 11, as that version wrote it: the
	// state index, the foreign key of the events, an "enqueued" row for
	// every task, and a row for every attempt started.
	for _, q := range []string{
		`INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
			SELECT id, end_ev_seq, end_ev_at, end_ev_from, end_ev_to, end_ev_reason, end_ev_detail, end_ev_actor
			FROM ledger_tasks WHERE end_ev_seq IS NOT NULL`, // 0015
		`ALTER TABLE ledger_tasks DROP COLUMN end_ev_seq, DROP COLUMN end_ev_at, DROP COLUMN end_ev_from, DROP COLUMN end_ev_to,
			DROP COLUMN end_ev_reason, DROP COLUMN end_ev_detail, DROP COLUMN end_ev_actor`,
		`INSERT INTO ledger_attempts (task_id, number, worker, start_at, duration_ns, outcome, class, error, stack)
			SELECT id, run_attempt, run_worker, run_start, COALESCE(run_duration, 0), COALESCE(run_outcome, ''), COALESCE(run_class, ''),
				COALESCE(run_error, ''), COALESCE(run_stack, '')
			FROM ledger_tasks WHERE run_attempt IS NOT NULL ON CONFLICT DO NOTHING`,
		`INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason, detail, actor)
			SELECT id, run_ev_seq, run_ev_at, run_ev_from, 'running', run_ev_reason, run_ev_detail, run_ev_actor
			FROM ledger_tasks WHERE run_ev_seq IS NOT NULL`,
		`ALTER TABLE ledger_tasks DROP COLUMN run_attempt, DROP COLUMN run_worker, DROP COLUMN run_start,
			DROP COLUMN run_duration, DROP COLUMN run_outcome, DROP COLUMN run_class, DROP COLUMN run_error, DROP COLUMN run_stack,
			DROP COLUMN run_ev_seq, DROP COLUMN run_ev_at, DROP COLUMN run_ev_from, DROP COLUMN run_ev_reason, DROP COLUMN run_ev_detail,
			DROP COLUMN run_ev_actor`, // 0012, 0014
		`DROP TRIGGER ledger_events_note ON ledger_events`, // 0014 made it a statement trigger
		rowNoteFunc,
		rowNoteTrigger,
		`ALTER TABLE ledger_events ADD CONSTRAINT ledger_events_task_id_fkey FOREIGN KEY (task_id) REFERENCES ledger_tasks (id) ON DELETE CASCADE`,
		`DROP INDEX ledger_tasks_created`,
		`CREATE INDEX ledger_tasks_state_updated ON ledger_tasks (state, updated_at)`,
		`ALTER TABLE ledger_tasks RESET (fillfactor)`,
		`INSERT INTO ledger_events (task_id, seq, at, from_state, to_state, reason) SELECT id, 1, created_at, '', 'queued', 'enqueued' FROM ledger_tasks`,
		`DROP TABLE switchyard_spend`, // 0013, applied again after 0012
		`DROP TABLE switchyard_pbatch_leases`,
		`DROP TABLE switchyard_pbatches`,
		`DROP TABLE switchyard_pbatch_items`,
		`ALTER TABLE ledger_tasks DROP COLUMN watched`,          // 0016
		`DELETE FROM ledger_schema_version WHERE version >= 12`, // 0012 to 0016 are applied again
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
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
		t.Fatalf("schema version after the migration %d %v, want 16", v, err)
	}
	var idx []string
	rows, err := s.Pool().Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'ledger_tasks' ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		idx = append(idx, n)
	}
	if want := []string{"ledger_tasks_created", "ledger_tasks_id_key", "ledger_tasks_idem", "ledger_tasks_pkey", "ledger_tasks_tenant_seq"}; !reflect.DeepEqual(idx, want) {
		t.Errorf("indexes of ledger_tasks after the migration: %v, want %v", idx, want)
	}
	after := read(s)
	var rows11 int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM ledger_events WHERE seq = 1`).Scan(&rows11); err != nil || rows11 != len(ids) {
		t.Errorf("version-11 enqueued rows after the migration: %d %v, want %d kept", rows11, err, len(ids))
	}
	if !reflect.DeepEqual(before, after) {
		for _, id := range ids {
			if !reflect.DeepEqual(before[id], after[id]) {
				t.Errorf("task %s before the migration:\n%+v\nafter:\n%+v", id, before[id], after[id])
			}
		}
	}
	for i, st := range migrate12States {
		ts, err := s.List(ctx, ledger.Filter{States: []ledger.State{st}})
		if err != nil || len(ts) != 1 || ts[0].ID != ids[i] {
			t.Errorf("List(%s) = %d tasks, %v; want %s", st, len(ts), err, ids[i])
		}
		got, err := s.GetByKey(ctx, "", "key-"+string(st))
		if err != nil || got.ID != ids[i] {
			t.Errorf("GetByKey(key-%s) = %v, %v", st, got, err)
		}
	}
	// The keys still hold: a repeat is a duplicate.
	if _, created, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch", IdempotencyKey: "key-completed"}); err != nil || created {
		t.Errorf("repeating a migrated key: created=%v %v", created, err)
	}
	// A task created now has one derived "enqueued" event.
	fresh, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	es, err := s.Events(ctx, fresh.ID)
	if err != nil || len(es) != 1 || es[0].Seq != 1 || es[0].Reason != "enqueued" || es[0].To != ledger.Queued || !es[0].At.Equal(fresh.CreatedAt) {
		t.Errorf("events of a new task: %+v %v", es, err)
	}
	// Prune finds the terminal tasks through the new index, and only them.
	n, err := s.Prune(ctx, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 { // completed, failed, dead, rejected, cancelled
		t.Errorf("Prune removed %d tasks, want the 5 terminal ones", n)
	}
	for i, st := range migrate12States {
		_, err := s.Get(ctx, ids[i])
		if terminal := st == ledger.Completed || st == ledger.Failed || st == ledger.Dead || st == ledger.Rejected || st == ledger.Cancelled; terminal == (err == nil) {
			t.Errorf("after Prune, Get(%s task) = %v", st, err)
		}
	}
	var orphans int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM ledger_events e WHERE NOT EXISTS (SELECT 1 FROM ledger_tasks t WHERE t.id = e.task_id)`).Scan(&orphans); err != nil || orphans != 0 {
		t.Errorf("events left of pruned tasks: %d %v", orphans, err)
	}
}

// TestClaim_OneClaim: an idempotent Enqueue claims its key once. The
// store that created the task answers the broker's claim without a query;
// another process's store (no memory of it) finds the task row holding
// the key; neither writes a ledger_dedup row.
func TestClaim_OneClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, schema := freshSchema(t)
	a, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i, s := range []*postgres.Store{a, b} {
		tk, _, err := a.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch", IdempotencyKey: "one-claim-" + string(rune('a'+i))})
		if err != nil {
			t.Fatal(err)
		}
		if _, dup, err := s.Claim(ctx, "batch", "", tk.IdempotencyKey, tk.ID); err != nil || dup {
			t.Fatalf("claim %d: dup=%v %v", i, dup, err)
		}
	}
	var n int
	if err := a.Pool().QueryRow(ctx, `SELECT count(*) FROM ledger_dedup`).Scan(&n); err != nil || n != 0 {
		t.Errorf("ledger_dedup rows: %d %v, want none", n, err)
	}
}
