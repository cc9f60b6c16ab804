package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// eventRows counts the ledger_events rows of a task.
func eventRows(t *testing.T, s *Store, id string) int {
	t.Helper()
	var n int
	if err := s.r.QueryRow(`SELECT count(*) FROM ledger_events WHERE task_id = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// stateNotes is a task's state notes, in the order written.
func stateNotes(t *testing.T, s *Store, id string) []string {
	t.Helper()
	rows, err := s.r.Query(`SELECT state FROM ledger_notes WHERE topic = 'state' AND task_id = ? ORDER BY seq`, id)
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

// wantEvent is what an event must hold (its time is checked for order
// only).
type wantEvent struct {
	seq                   int64
	from, to              ledger.State
	reason, detail, actor string
}

// checkEvents checks a task's events, as Events and as ReadStream read
// them, against want: in order, with their states, reason, detail and
// actor, at times that never go back.
func checkEvents(t *testing.T, s *Store, id string, want []wantEvent) {
	t.Helper()
	ctx := context.Background()
	es, err := s.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []wantEvent
	for i, e := range es {
		got = append(got, wantEvent{e.Seq, e.From, e.To, e.Reason, e.Detail, e.Actor})
		if i > 0 && e.At.Before(es[i-1].At) {
			t.Errorf("event %d at %s, before event %d at %s", e.Seq, e.At, es[i-1].Seq, es[i-1].At)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events of %s:\n got %+v\nwant %+v", id, got, want)
	}
	st, err := s.ReadStream(ctx, id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != len(es) {
		t.Fatalf("ReadStream of %s: %d entries, Events %d", id, len(st), len(es))
	}
	for i, e := range st {
		if e.Kind != ledger.StreamState || e.Offset != es[i].Seq || e.From != es[i].From || e.State != es[i].To ||
			e.Reason != es[i].Reason || !e.At.Equal(es[i].At) {
			t.Errorf("ReadStream of %s, entry %d: %+v; event %+v", id, i, e, es[i])
		}
	}
	// From a later offset, the entries after it.
	if len(es) > 2 {
		st, err := s.ReadStream(ctx, id, es[1].Seq, 100)
		if err != nil || len(st) != len(es)-2 || st[0].Offset != es[2].Seq {
			t.Errorf("ReadStream of %s after %d: %+v %v", id, es[1].Seq, st, err)
		}
	}
}

func enqueued() wantEvent { return wantEvent{1, "", ledger.Queued, "enqueued", "", ""} }

// TestRun_EventsInTaskRow: BeginRun and EndRun, grouped and alone, keep
// their events in the task row (no ledger_events row, migration 0015), and
// Events and ReadStream read them back in order, with detail and actor. A
// retried task's earlier events become rows when its next run begins and
// ends; a lease takeover writes the start it replaces; a dead task
// replayed by an operator writes its "dead" event as a row when its next
// run ends, and each note is written once, when its move happens.
func TestRun_EventsInTaskRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := heldWriter(t)
	a := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	b := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	c := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	begin := func(id string, n int, worker string, lease time.Duration) func() {
		return func() {
			if _, err := s.BeginRun(ctx, ledger.RunStart{ID: id, Attempt: n, Worker: worker, Lease: lease}); err != nil {
				t.Error(err)
			}
		}
	}
	end := func(id string, n int, from []ledger.State, to ledger.State, reason, detail, actor string) func() {
		return func() {
			tr := &ledger.TransitionRequest{ID: id, From: from, To: to, Reason: reason, Detail: detail, Actor: actor}
			if to == ledger.RetryWait {
				e := "boom"
				tr.LastError = &e
			}
			if _, err := s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: n, Outcome: reason, Duration: time.Millisecond},
				Transition: tr}); err != nil {
				t.Error(err)
			}
		}
	}
	running := []ledger.State{ledger.Running}

	// Grouped: three starts in one statement, then three ends.
	batches0, _, _ := batchStats(s)
	group(t, s, begin(a.ID, 1, "wa", time.Minute), begin(b.ID, 1, "wb", time.Minute), begin(c.ID, 1, "wc", time.Minute))
	group(t, s, end(a.ID, 1, running, ledger.RetryWait, "failed", "attempt 1 failed: boom", "wa"),
		end(b.ID, 1, running, ledger.AwaitingReview, "needs_review", "score 0.4", "wb"),
		end(c.ID, 1, running, ledger.Dead, "exhausted", "no attempts left", "wc"))
	if batches, _, splits := batchStats(s); batches-batches0 != 2 || splits != 0 {
		t.Fatalf("%d grouped statements, %d splits; want 2, 0", batches-batches0, splits)
	}
	for _, id := range []string{a.ID, b.ID, c.ID} {
		if n := eventRows(t, s, id); n != 0 {
			t.Errorf("task %s has %d event rows after a run, want none (both in the task row)", id, n)
		}
	}
	checkEvents(t, s, a.ID, []wantEvent{enqueued(),
		{2, ledger.Queued, ledger.Running, "attempt_started", "", "wa"},
		{3, ledger.Running, ledger.RetryWait, "failed", "attempt 1 failed: boom", "wa"}})
	checkEvents(t, s, b.ID, []wantEvent{enqueued(),
		{2, ledger.Queued, ledger.Running, "attempt_started", "", "wb"},
		{3, ledger.Running, ledger.AwaitingReview, "needs_review", "score 0.4", "wb"}})

	// The retried task runs again, alone: its first start becomes a row
	// when the second begins, its first end when the second ends.
	alone(t, s, begin(a.ID, 2, "wa2", time.Minute))
	if n := eventRows(t, s, a.ID); n != 1 {
		t.Errorf("retried task: %d event rows after its second start, want 1 (the first start)", n)
	}
	alone(t, s, end(a.ID, 2, running, ledger.Completed, "succeeded", "", "wa2"))
	if n := eventRows(t, s, a.ID); n != 2 {
		t.Errorf("retried task: %d event rows after its second end, want 2", n)
	}
	checkEvents(t, s, a.ID, []wantEvent{enqueued(),
		{2, ledger.Queued, ledger.Running, "attempt_started", "", "wa"},
		{3, ledger.Running, ledger.RetryWait, "failed", "attempt 1 failed: boom", "wa"},
		{4, ledger.RetryWait, ledger.Running, "attempt_started", "", "wa2"},
		{5, ledger.Running, ledger.Completed, "succeeded", "", "wa2"}})
	if ns := stateNotes(t, s, a.ID); !reflect.DeepEqual(ns, []string{"completed"}) {
		t.Errorf("notes of the retried task: %v, want [completed]", ns)
	}
	as, err := s.Attempts(ctx, a.ID)
	if err != nil || len(as) != 2 || as[0].Worker != "wa" || as[1].Worker != "wa2" || as[1].Outcome != "succeeded" {
		t.Errorf("attempts of the retried task: %+v %v", as, err)
	}

	// Reviewed: an EndRun from awaiting_review, right after the one that
	// moved it there (its end event, which notifies, is the task's latest
	// when it is replaced and becomes a row).
	alone(t, s, end(b.ID, 1, []ledger.State{ledger.AwaitingReview}, ledger.Rejected, "rejected", "by ann", "operator:ann"))
	checkEvents(t, s, b.ID, []wantEvent{enqueued(),
		{2, ledger.Queued, ledger.Running, "attempt_started", "", "wb"},
		{3, ledger.Running, ledger.AwaitingReview, "needs_review", "score 0.4", "wb"},
		{4, ledger.AwaitingReview, ledger.Rejected, "rejected", "by ann", "operator:ann"}})
	if ns := stateNotes(t, s, b.ID); !reflect.DeepEqual(ns, []string{"awaiting_review", "rejected"}) {
		t.Errorf("notes of the reviewed task: %v, want [awaiting_review rejected]", ns)
	}

	// Replayed: the dead task goes back to queued (an operator's
	// Transition, an event row), runs again, first with a lease that
	// lapses at once and is taken over; its held events become rows as
	// they are replaced, and the "dead" note is not written again.
	alone(t, s, func() {
		if _, err := s.Transition(ctx, ledger.TransitionRequest{ID: c.ID, From: []ledger.State{ledger.Dead}, To: ledger.Queued,
			Reason: "replayed", Detail: "from the console", Actor: "operator:bob"}); err != nil {
			t.Error(err)
		}
	})
	alone(t, s, begin(c.ID, 2, "wc2", time.Nanosecond))
	lapsed, err := s.Get(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(lapsed.LeaseUntil) {
		time.Sleep(time.Millisecond)
	}
	group(t, s, begin(c.ID, 3, "wc3", time.Minute), func() {
		if _, err := s.BeginRun(ctx, ledger.RunStart{ID: b.ID, Attempt: 9, Worker: "wx", Lease: time.Minute}); !errors.Is(err, ledger.ErrConflict) {
			t.Errorf("BeginRun of a rejected task: %v, want a conflict", err)
		}
	})
	group(t, s, end(c.ID, 3, running, ledger.Completed, "succeeded", "", "wc3"), func() {
		_, err := s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: a.ID, Number: 2, Outcome: "late"},
			Transition: &ledger.TransitionRequest{ID: a.ID, From: running, To: ledger.Completed, Reason: "late", Actor: "wz"}})
		if !errors.Is(err, ledger.ErrConflict) {
			t.Errorf("EndRun of a completed task: %v, want a conflict", err)
		}
	})
	checkEvents(t, s, c.ID, []wantEvent{enqueued(),
		{2, ledger.Queued, ledger.Running, "attempt_started", "", "wc"},
		{3, ledger.Running, ledger.Dead, "exhausted", "no attempts left", "wc"},
		{4, ledger.Dead, ledger.Queued, "replayed", "from the console", "operator:bob"},
		{5, ledger.Queued, ledger.Running, "attempt_started", "", "wc2"},
		{6, ledger.Running, ledger.Running, "lease_expired", fmt.Sprintf("attempt 2's lease ended at %s without a renewal: its holder is gone",
			lapsed.LeaseUntil.UTC().Format(time.RFC3339Nano)), "wc3"},
		{7, ledger.Running, ledger.Completed, "succeeded", "", "wc3"}})
	if ns := stateNotes(t, s, c.ID); !reflect.DeepEqual(ns, []string{"dead", "completed"}) {
		t.Errorf("notes of the replayed task: %v, want [dead completed]", ns)
	}
	// The refused writes changed nothing.
	checkEvents(t, s, a.ID, []wantEvent{enqueued(),
		{2, ledger.Queued, ledger.Running, "attempt_started", "", "wa"},
		{3, ledger.Running, ledger.RetryWait, "failed", "attempt 1 failed: boom", "wa"},
		{4, ledger.RetryWait, ledger.Running, "attempt_started", "", "wa2"},
		{5, ledger.Running, ledger.Completed, "succeeded", "", "wa2"}})
}

// copyFile copies src to dst if src exists.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// crashImage copies the database file and its WAL as a crash would leave
// them (the writer still open, nothing checkpointed or closed) and opens
// the copy.
func crashImage(t *testing.T, s *Store) *Store {
	t.Helper()
	dir := t.TempDir()
	for _, suffix := range []string{"", "-wal"} {
		copyFile(t, s.path+suffix, filepath.Join(dir, "ledger.db"+suffix))
	}
	c, err := Open(context.Background(), filepath.Join(dir, "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRun_EventsInTaskRow_Crash: a crash after a group's commit keeps the
// events its task rows hold; a crash inside a group, its statements run
// and not committed (a run's second start turning the first into a row
// and replacing it), leaves the task and its events as the last commit
// did.
func TestRun_EventsInTaskRow_Crash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := heldWriter(t)
	a := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	group(t, s, func() {
		if _, err := s.BeginRun(ctx, ledger.RunStart{ID: a.ID, Attempt: 1, Worker: "w1", Lease: time.Minute}); err != nil {
			t.Error(err)
		}
	})
	group(t, s, func() {
		e := "boom"
		if _, err := s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: a.ID, Number: 1, Outcome: "error", Error: e},
			Transition: &ledger.TransitionRequest{ID: a.ID, From: []ledger.State{ledger.Running}, To: ledger.RetryWait,
				Reason: "failed", Detail: "attempt 1 failed", Actor: "w1", LastError: &e}}); err != nil {
			t.Error(err)
		}
	})
	want := []wantEvent{enqueued(),
		{2, ledger.Queued, ledger.Running, "attempt_started", "", "w1"},
		{3, ledger.Running, ledger.RetryWait, "failed", "attempt 1 failed", "w1"}}
	before, err := s.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}

	// After the commit.
	c := crashImage(t, s)
	checkEvents(t, c, a.ID, want)
	if n := eventRows(t, c, a.ID); n != 0 {
		t.Errorf("%d event rows after the crash, want none", n)
	}
	c.Close()

	// Inside a group: the second run's statements ran, no commit.
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &writeReq{item: &beginItem{op: "BeginRun", req: ledger.RunStart{ID: a.ID, Attempt: 2, Worker: "w2", Lease: time.Minute}}}
	if err := runBeginBatch(ctx, s, tx, []*writeReq{r}); err != nil || r.err != nil {
		t.Fatal(err, r.err)
	}
	var rowsInTx int
	if err := tx.QueryRow(`SELECT count(*) FROM ledger_events WHERE task_id = ?`, a.ID).Scan(&rowsInTx); err != nil || rowsInTx != 1 {
		t.Fatalf("in the transaction: %d event rows, %v; want the first start's", rowsInTx, err)
	}
	c = crashImage(t, s)
	checkEvents(t, c, a.ID, want)
	after, err := c.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.State != ledger.RetryWait || after.Attempt != 1 || !reflect.DeepEqual(after, before) {
		t.Errorf("task after a crash inside the group:\n%+v\nbefore it\n%+v", after, before)
	}
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		t.Fatal(err)
	}
	// The store goes on: the second run begins and ends.
	group(t, s, func() {
		if _, err := s.BeginRun(ctx, ledger.RunStart{ID: a.ID, Attempt: 2, Worker: "w2", Lease: time.Minute}); err != nil {
			t.Error(err)
		}
	})
	checkEvents(t, s, a.ID, append(want, wantEvent{4, ledger.RetryWait, ledger.Running, "attempt_started", "", "w2"}))
}
