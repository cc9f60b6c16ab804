package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// attemptRows counts the ledger_attempts rows of task id.
func attemptRows(t *testing.T, s *Store, id string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger_attempts WHERE task_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// attemptsOf is Attempts of task id as "number:worker:outcome:class:error:duration".
func attemptsOf(t *testing.T, s *Store, id string) string {
	t.Helper()
	var as []ledger.Attempt
	var err error
	direct(s, func() { as, err = s.Attempts(context.Background(), id) })
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("%d:%s:%s:%s:%s:%v", a.Number, a.Worker, a.Outcome, a.Class, a.Error, a.Duration))
	}
	return fmt.Sprint(out)
}

// TestEndRun_AttemptInTaskRow (migration 0014): EndRun records the end of
// the attempt the task row holds in the task row, not as a ledger_attempts
// row, in its array statement and its single one; Attempts reads it as
// before. The row is written when the next attempt begins (with the end),
// or at once when the move is refused, and once an attempt has its row,
// its later ends go to the row. A run of the same number (a snooze) keeps
// the recorded end, as the row did. Each completion in an array statement
// still sends its own note.
func TestEndRun_AttemptInTaskRow(t *testing.T) {
	t.Parallel()
	s, ctx, notes, mk := runRowEnv(t)
	end := func(id string, attempt int, to ledger.State, outcome string, below int) error {
		req := ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: attempt, Outcome: outcome, Class: "c-" + outcome,
			Error: "e-" + outcome, Duration: time.Duration(attempt) * time.Millisecond},
			Transition: &ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: to, Reason: outcome,
				IfAttemptBelow: below}}
		if to == ledger.RetryWait {
			req.Transition.RunAt = time.Now()
		}
		_, err := s.EndRun(ctx, req)
		return err
	}

	// Completed in one array statement, and alone.
	a, b, c := mk(), mk(), mk()
	group(t, s, func() { end(a, 1, ledger.Completed, "ok", 0) }, func() { end(b, 1, ledger.Completed, "ok", 0) })
	if arrays, writes := s.ArrayStats(); arrays != 1 || writes != 2 {
		t.Fatalf("array statements %d carrying %d writes, want 1 carrying 2", arrays, writes)
	}
	direct(s, func() {
		if err := end(c, 1, ledger.Completed, "ok", 0); err != nil {
			t.Fatal(err)
		}
	})
	for _, id := range []string{a, b, c} {
		if n := attemptRows(t, s, id); n != 0 {
			t.Errorf("task %s: %d attempt rows after EndRun, want 0 (the end is in the task row)", id, n)
		}
		if got, want := attemptsOf(t, s, id), "[1:w0:ok:c-ok:e-ok:1ms]"; got != want {
			t.Errorf("task %s: attempts %s, want %s", id, got, want)
		}
	}
	seen := map[string]bool{}
	for len(seen) < 3 {
		select {
		case n := <-notes:
			if n.Topic == ledger.TopicState && n.State == ledger.Completed {
				seen[n.TaskID] = true
			}
		case <-ctx.Done():
			t.Fatalf("notes of completion for %v, want a, b and c", seen)
		}
	}
	if !seen[a] || !seen[b] || !seen[c] {
		t.Errorf("notes for %v, want %s, %s, %s", seen, a, b, c)
	}

	// A retry: attempt 1's end goes to its row when attempt 2 begins.
	d := mk()
	direct(s, func() {
		if err := end(d, 1, ledger.RetryWait, "retry", 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.BeginRun(ctx, ledger.RunStart{ID: d, Attempt: 2, Worker: "w2", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	})
	if got, want := attemptsOf(t, s, d), "[1:w0:retry:c-retry:e-retry:1ms 2:w2::::0s]"; got != want {
		t.Errorf("retried task: attempts %s, want %s", got, want)
	}
	if n := attemptRows(t, s, d); n != 1 {
		t.Errorf("retried task: %d attempt rows, want 1 (attempt 1's)", n)
	}
	direct(s, func() {
		if err := end(d, 2, ledger.Completed, "ok", 0); err != nil {
			t.Fatal(err)
		}
	})
	if got, want := attemptsOf(t, s, d), "[1:w0:retry:c-retry:e-retry:1ms 2:w2:ok:c-ok:e-ok:2ms]"; got != want {
		t.Errorf("retried task after its second end: attempts %s, want %s", got, want)
	}

	// A refused move records the attempt as its row; the attempt's next
	// end (its move made) updates that row, which Attempts shows.
	e := mk()
	direct(s, func() {
		if err := end(e, 1, ledger.Completed, "first", 1); !errors.Is(err, ledger.ErrConflict) {
			t.Fatalf("EndRun refused by IfAttemptBelow: %v, want ErrConflict", err)
		}
	})
	if n := attemptRows(t, s, e); n != 1 {
		t.Errorf("refused EndRun: %d attempt rows, want 1", n)
	}
	other := mk()
	group(t, s, func() { end(e, 1, ledger.Completed, "second", 0) }, func() { end(other, 1, ledger.Completed, "ok", 0) })
	if got, want := attemptsOf(t, s, e), "[1:w0:second:c-second:e-second:1ms]"; got != want {
		t.Errorf("an attempt with its row, ended again: attempts %s, want %s", got, want)
	}

	// A snooze: the same number runs again and keeps its recorded end
	// until it ends again.
	f := mk()
	direct(s, func() {
		_, err := s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: f, Number: 1, Outcome: "snooze"},
			Transition: &ledger.TransitionRequest{ID: f, From: []ledger.State{ledger.Running}, To: ledger.Queued, Reason: "snoozed"}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.BeginRun(ctx, ledger.RunStart{ID: f, Attempt: 1, Worker: "w3", Lease: time.Minute})
		if err != nil || r.Attempt != 1 {
			t.Fatalf("BeginRun after a snooze: %+v, %v; want attempt 1", r, err)
		}
	})
	if got, want := attemptsOf(t, s, f), "[1:w3:snooze:::0s]"; got != want {
		t.Errorf("snoozed task running again: attempts %s, want %s", got, want)
	}
	if n := attemptRows(t, s, f); n != 0 {
		t.Errorf("snoozed task: %d attempt rows, want 0", n)
	}
}

// eventRows counts the ledger_events rows of task id.
func eventRows(t *testing.T, s *Store, id string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger_events WHERE task_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBeginRun_StartEventInTaskRow (migration 0014): BeginRun keeps its
// event (attempt started) in the task row, in its array statement and its
// single one, and writes that event's row when the next BeginRun replaces
// it (a retry, a takeover); Events and ReadStream read every event, in
// order, with the same fields either way.
func TestBeginRun_StartEventInTaskRow(t *testing.T) {
	t.Parallel()
	s := heldGroups(t)
	ctx := context.Background()
	a := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"}).ID
	b := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"}).ID
	begin := func(id string, attempt int, worker string, lease time.Duration) func() {
		return func() {
			if _, err := s.BeginRun(ctx, ledger.RunStart{ID: id, Attempt: attempt, Worker: worker, Lease: lease}); err != nil {
				t.Error(err)
			}
		}
	}
	group(t, s, begin(a, 1, "w1", time.Minute), begin(b, 1, "w1", time.Microsecond))
	if arrays, writes := s.ArrayStats(); arrays != 1 || writes != 2 {
		t.Fatalf("array statements %d carrying %d writes, want 1 carrying 2", arrays, writes)
	}
	for _, id := range []string{a, b} {
		if n := eventRows(t, s, id); n != 0 {
			t.Errorf("task %s: %d event rows after BeginRun, want 0 (the start event is in the task row)", id, n)
		}
	}
	events := func(id string) string {
		t.Helper()
		return eventsOf(t, s, ctx, id, func(e ledger.Event) string {
			return fmt.Sprintf("%d:%s>%s:%s:%s", e.Seq, e.From, e.To, e.Reason, e.Actor)
		})
	}
	if got, want := events(a), "[1:>queued:enqueued: 2:queued>running:attempt_started:w1]"; got != want {
		t.Errorf("begun task: events %s, want %s", got, want)
	}
	// b's lease has passed: a takeover (alone: the single statement)
	// writes attempt 1's start event as a row and keeps its own.
	time.Sleep(5 * time.Millisecond)
	direct(s, begin(b, 2, "w2", time.Minute))
	if n := eventRows(t, s, b); n != 1 {
		t.Errorf("taken-over task: %d event rows, want 1 (the first start)", n)
	}
	if got, want := events(b), "[1:>queued:enqueued: 2:queued>running:attempt_started:w1 3:running>running:lease_expired:w2]"; got != want {
		t.Errorf("taken-over task: events %s, want %s", got, want)
	}
	// a fails and retries: its events in order, the retry between the two starts.
	direct(s, func() {
		_, err := s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: a, Number: 1, Outcome: "retry"},
			Transition: &ledger.TransitionRequest{ID: a, From: []ledger.State{ledger.Running}, To: ledger.RetryWait, Reason: "retrying", RunAt: time.Now()}})
		if err != nil {
			t.Fatal(err)
		}
	})
	group(t, s, begin(a, 2, "w3", time.Minute), begin(mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"}).ID, 1, "w3", time.Minute))
	if got, want := events(a), "[1:>queued:enqueued: 2:queued>running:attempt_started:w1 3:running>retry_wait:retrying: 4:retry_wait>running:attempt_started:w3]"; got != want {
		t.Errorf("retried task: events %s, want %s", got, want)
	}
	// The retry (EndRun's move) is in the task row too (0015) until the
	// next EndRun.
	if n := eventRows(t, s, a); n != 1 {
		t.Errorf("retried task: %d event rows, want 1 (the first start)", n)
	}
}

// runRowEnv is the run-row tests' store (groups held, heldGroups), a
// context that ends with the test (30 s at most), the store's notes, and
// mk, which creates a task and begins its run.
func runRowEnv(t *testing.T) (*Store, context.Context, <-chan ledger.Note, func() string) {
	t.Helper()
	s := heldGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	notes, err := s.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s, ctx, notes, func() string {
		tk := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
		mustBegin(t, s, tk.ID)
		// Watched, so that EndRun sends its state note (0016).
		if _, err := s.WatchTask(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		return tk.ID
	}
}

// eventsOf returns the task's events (Events), each as format prints it,
// after checking that ReadStream after offset 1 gives the same state moves
// but the first.
func eventsOf(t *testing.T, s *Store, ctx context.Context, id string, format func(ledger.Event) string) string {
	t.Helper()
	var es []ledger.Event
	var st []ledger.StreamEntry
	var err error
	direct(s, func() {
		if es, err = s.Events(ctx, id); err == nil {
			st, err = s.ReadStream(ctx, id, 1, 100)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var out, want, fromStream []string
	for _, e := range es {
		out = append(out, format(e))
	}
	for _, e := range es[1:] {
		want = append(want, fmt.Sprintf("%d:%s>%s:%s", e.Seq, e.From, e.To, e.Reason))
	}
	for _, e := range st {
		fromStream = append(fromStream, fmt.Sprintf("%d:%s>%s:%s", e.Offset, e.From, e.State, e.Reason))
	}
	if fmt.Sprint(fromStream) != fmt.Sprint(want) {
		t.Errorf("task %s: ReadStream after 1 %v, want %v", id, fromStream, want)
	}
	return fmt.Sprint(out)
}
