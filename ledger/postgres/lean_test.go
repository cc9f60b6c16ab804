package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/ledger"
)

// leanStore is heldGroups with a fixed clock, so that two tasks taken
// through the same calls get the same rows.
func leanStore(t *testing.T, now time.Time) *Store {
	t.Helper()
	dsn := testenv.Postgres.Endpoint(t)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "ledgertest_" + hex.EncodeToString(b)
	ctx := context.Background()
	s, err := Open(ctx, dsn, &Options{Schema: schema, NoGroupCommit: true, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		s.Close()
	})
	s.g = newGrouper(-1)
	return s
}

// taskRow is the task's row as JSON, without what differs between two
// tasks taken through the same calls (id, seq, the lease by the
// database's clock).
func taskRow(t *testing.T, s *Store, id string) string {
	t.Helper()
	var row string
	if err := s.pool.QueryRow(context.Background(), `SELECT (to_jsonb(t) - 'id' - 'seq' - 'lease_until')::text FROM ledger_tasks t WHERE id = $1`, id).Scan(&row); err != nil {
		t.Fatal(err)
	}
	return row
}

// kinds runs call, runs every write it submits alone (as its group), and
// returns the kinds of those writes in order.
func kinds(t *testing.T, s *Store, call func()) []*batchKind {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); call() }()
	var ks []*batchKind
	for {
		select {
		case <-done:
			for _, r := range queuedNow(s.g) { // none: the call has returned
				t.Errorf("a write queued after its call returned: %s", r.sql)
			}
			return ks
		default:
		}
		for _, r := range queued(s, 10*time.Millisecond) {
			ks = append(ks, r.kind)
			s.runGroup([]*groupReq{r})
		}
	}
}

func kindNames(ks []*batchKind) []string {
	var out []string
	for _, k := range ks {
		if k == nil {
			out = append(out, "(single)")
			continue
		}
		out = append(out, k.name)
	}
	return out
}

func sameKinds(got []*batchKind, want ...*batchKind) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestLean_SameRowsAsFull: a task's first run through BeginRun and
// EndRun takes the lean statements (lean.go), alone and in groups (their
// array statements), and leaves the task row the full statements leave
// for the same calls; its events and attempts read the same.
func TestLean_SameRowsAsFull(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	s := leanStore(t, now)
	ctx := context.Background()
	start := now.Add(-time.Second)
	beginArgs := func(id string) []any { return []any{id, 1, time.Minute.Microseconds(), now, "w1", start} }
	endArgs := func(id string) []any {
		return []any{id, "completed", now, 1, true, []byte("out"), nil, nil, []string{"running"}, "succeeded", "", "w1", 0,
			id, 1, "w1", nil, int64(time.Millisecond), "ok", "", "", ""}
	}
	scan := func(r pgx.Row) error { _, err := scanTask(r); return err }
	run := ledger.RunStart{Attempt: 1, Worker: "w1", Lease: time.Minute, Start: start}
	end := func(id string) ledger.RunEnd {
		return ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: 1, Worker: "w1", Outcome: "ok", Duration: time.Millisecond},
			Transition: &ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: ledger.Completed,
				Reason: "succeeded", Actor: "w1", Attempt: 1, Result: []byte("out")}}
	}
	compare := func(lean, full string) {
		t.Helper()
		if a, b := taskRow(t, s, lean), taskRow(t, s, full); a != b {
			t.Errorf("task rows differ:\nlean %s\nfull %s", a, b)
		}
		var evs [2][]ledger.Event
		var as [2][]ledger.Attempt
		for i, id := range []string{lean, full} {
			var err error
			direct(s, func() {
				if evs[i], err = s.Events(ctx, id); err == nil {
					as[i], err = s.Attempts(ctx, id)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			for j := range evs[i] {
				evs[i][j].TaskID = ""
			}
			for j := range as[i] {
				as[i][j].TaskID = ""
			}
		}
		if len(evs[0]) != 3 || len(as[0]) != 1 {
			t.Errorf("lean: %d events, %d attempts; want 3 and 1", len(evs[0]), len(as[0]))
		}
		if ev0, ev1 := jsonOf(t, evs[0]), jsonOf(t, evs[1]); ev0 != ev1 {
			t.Errorf("events differ:\nlean %s\nfull %s", ev0, ev1)
		}
		if a0, a1 := jsonOf(t, as[0]), jsonOf(t, as[1]); a0 != a1 {
			t.Errorf("attempts differ:\nlean %s\nfull %s", a0, a1)
		}
	}

	// Alone: one write a group, the single statements.
	a := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	b := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	r := run
	r.ID = a.ID
	if ks := kinds(t, s, func() {
		if _, err := s.BeginRun(ctx, r); err != nil {
			t.Error(err)
		}
	}); !sameKinds(ks, beginRunLeanKind) {
		t.Errorf("BeginRun of a first run ran %v, want the lean statement alone", kindNames(ks))
	}
	if ks := kinds(t, s, func() {
		if _, err := s.EndRun(ctx, end(a.ID)); err != nil {
			t.Error(err)
		}
	}); !sameKinds(ks, endRunLeanKind) {
		t.Errorf("EndRun of a first run ran %v, want the lean statement alone", kindNames(ks))
	}
	direct(s, func() {
		if err := s.queryRowKind(ctx, beginRunKind, scan, beginArgs(b.ID)...); err != nil {
			t.Fatal(err)
		}
		if err := s.queryRowKind(ctx, endRunKind, scan, endArgs(b.ID)...); err != nil {
			t.Fatal(err)
		}
	})
	compare(a.ID, b.ID)

	// In groups: two tasks a group, the array statements.
	var lean, full [2]*ledger.Task
	for i := range 2 {
		lean[i] = mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
		full[i] = mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	}
	arrays0, _ := s.ArrayStats()
	var calls []func()
	for _, tk := range lean {
		r := run
		r.ID = tk.ID
		calls = append(calls, func() {
			if _, err := s.BeginRun(ctx, r); err != nil {
				t.Error(err)
			}
		})
	}
	group(t, s, calls...)
	calls = nil
	for _, tk := range lean {
		calls = append(calls, func() {
			if _, err := s.EndRun(ctx, end(tk.ID)); err != nil {
				t.Error(err)
			}
		})
	}
	group(t, s, calls...)
	if arrays, _ := s.ArrayStats(); arrays-arrays0 != 2 {
		t.Errorf("%d array statements, want 2 (lean BeginRun, lean EndRun)", arrays-arrays0)
	}
	for _, args := range [][2]func(string) []any{{beginArgs, nil}, {nil, endArgs}} {
		calls = nil
		for _, tk := range full {
			calls = append(calls, func() {
				k, a := beginRunKind, args[0]
				if a == nil {
					k, a = endRunKind, args[1]
				}
				if err := s.queryRowKind(ctx, k, scan, a(tk.ID)...); err != nil {
					t.Error(err)
				}
			})
		}
		group(t, s, calls...)
	}
	for i := range 2 {
		compare(lean[i].ID, full[i].ID)
	}
}

// TestLean_FallsBack: where the lean statements do not apply they change
// nothing and the full statement runs: a retried task's second run and
// end (the row holds the first run and its end event), an attempt that
// has its ledger_attempts row already (StartAttempt), a refused move (the
// attempt is recorded, the caller gets the conflict).
func TestLean_FallsBack(t *testing.T) {
	t.Parallel()
	s := leanStore(t, time.Now())
	ctx := context.Background()
	begin := func(id string, n int) ([]*batchKind, error) {
		var err error
		ks := kinds(t, s, func() {
			_, err = s.BeginRun(ctx, ledger.RunStart{ID: id, Attempt: n, Worker: "w", Lease: time.Minute})
		})
		return ks, err
	}
	endTo := func(id string, n int, to ledger.State) ([]*batchKind, error) {
		var err error
		ks := kinds(t, s, func() {
			_, err = s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: n, Outcome: "x", Duration: time.Millisecond},
				Transition: &ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: to, Reason: "r", Attempt: n}})
		})
		return ks, err
	}

	// A retry: the second BeginRun and EndRun fall back.
	a := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch", MaxAttempts: 3})
	if ks, err := begin(a.ID, 1); err != nil || !sameKinds(ks, beginRunLeanKind) {
		t.Fatalf("first BeginRun: %v, ran %v", err, kindNames(ks))
	}
	if ks, err := endTo(a.ID, 1, ledger.RetryWait); err != nil || !sameKinds(ks, endRunLeanKind) {
		t.Fatalf("first EndRun: %v, ran %v", err, kindNames(ks))
	}
	if ks, err := begin(a.ID, 2); err != nil || !sameKinds(ks, beginRunLeanKind, beginRunKind) {
		t.Fatalf("second BeginRun: %v, ran %v; want lean then full", err, kindNames(ks))
	}
	if ks, err := endTo(a.ID, 2, ledger.Completed); err != nil || !sameKinds(ks, endRunLeanKind, endRunKind) {
		t.Fatalf("second EndRun: %v, ran %v; want lean then full", err, kindNames(ks))
	}
	var evs []ledger.Event
	var as []ledger.Attempt
	var err error
	direct(s, func() {
		if evs, err = s.Events(ctx, a.ID); err == nil {
			as, err = s.Attempts(ctx, a.ID)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var tos []ledger.State
	for _, e := range evs {
		tos = append(tos, e.To)
	}
	if len(evs) != 5 || evs[4].To != ledger.Completed || evs[2].To != ledger.RetryWait {
		t.Errorf("retried task's events go to %v; want queued, running, retry_wait, running, completed", tos)
	}
	if len(as) != 2 || as[0].Number != 1 || as[1].Number != 2 || as[0].Outcome != "x" || as[1].Outcome != "x" {
		t.Errorf("retried task's attempts %+v; want 1 and 2, both ended", as)
	}

	// An attempt that has its row: BeginRun and EndRun fall back and
	// record the run there.
	b := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	direct(s, func() { err = s.StartAttempt(ctx, ledger.Attempt{TaskID: b.ID, Number: 1, Worker: "before"}) })
	if err != nil {
		t.Fatal(err)
	}
	if ks, err := begin(b.ID, 1); err != nil || !sameKinds(ks, beginRunLeanKind, beginRunKind) {
		t.Fatalf("BeginRun of an attempt with a row: %v, ran %v; want lean then full", err, kindNames(ks))
	}
	if ks, err := endTo(b.ID, 1, ledger.Completed); err != nil || !sameKinds(ks, endRunLeanKind, endRunKind) {
		t.Fatalf("EndRun of an attempt with a row: %v, ran %v; want lean then full", err, kindNames(ks))
	}
	direct(s, func() { as, err = s.Attempts(ctx, b.ID) })
	if err != nil || len(as) != 1 || as[0].Worker != "w" || as[0].Outcome != "x" {
		t.Errorf("attempts %+v (%v); want one, worker w, outcome x", as, err)
	}

	// A refused move: the lean statement changes nothing, the full one
	// records the attempt and refuses.
	c := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	ks, err := endTo(c.ID, 1, ledger.Completed)
	if !errors.Is(err, ledger.ErrConflict) || !sameKinds(ks, endRunLeanKind, endRunKind) {
		t.Fatalf("EndRun of a queued task: %v, ran %v; want a conflict after lean then full", err, kindNames(ks))
	}
	direct(s, func() { as, err = s.Attempts(ctx, c.ID) })
	if err != nil || len(as) != 1 || as[0].Outcome != "x" {
		t.Errorf("refused move's attempts %+v (%v); want its attempt recorded", as, err)
	}
	if row := taskRow(t, s, c.ID); !jsonHas(row, `"state": "queued"`) {
		t.Errorf("refused move changed the task: %s", row)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func jsonHas(s, part string) bool { return strings.Contains(s, part) }
