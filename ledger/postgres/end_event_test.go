package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// TestEndRun_EndEventInTaskRow (migration 0015): EndRun keeps the event of
// its move in the task row, in its array statement and its single one, so
// a completed task has no event row; Events and ReadStream read every
// event, in order, with its fields. The statement sends the move's note
// itself, once per task. The event's row is written when the next EndRun
// replaces it (a retry, a replay), and the trigger sends no note again for
// that row: a replayed dead task that completes sends "completed", not
// "dead" a second time.
func TestEndRun_EndEventInTaskRow(t *testing.T) {
	t.Parallel()
	s, ctx, notes, mk := runRowEnv(t)
	end := func(id string, attempt int, to ledger.State, reason string) func() {
		return func() {
			tr := &ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: to, Reason: reason,
				Detail: "d-" + reason, Actor: "w0"}
			if to == ledger.RetryWait {
				tr.RunAt = time.Now()
			}
			if _, err := s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: attempt, Outcome: reason}, Transition: tr}); err != nil {
				t.Error(err)
			}
		}
	}
	events := func(id string) string {
		t.Helper()
		return eventsOf(t, s, ctx, id, func(e ledger.Event) string {
			return fmt.Sprintf("%d:%s>%s:%s:%s:%s", e.Seq, e.From, e.To, e.Reason, e.Detail, e.Actor)
		})
	}
	// waitNotes reads notes until a marker sent now arrives (notes arrive
	// in commit order), and returns the state notes of ids before it.
	waitNotes := func(ids ...string) map[string][]ledger.State {
		t.Helper()
		if err := s.Notify(ctx, ledger.Note{Topic: "marker", TaskID: "m"}); err != nil {
			t.Fatal(err)
		}
		got := map[string][]ledger.State{}
		for {
			select {
			case n := <-notes:
				if n.Topic == "marker" {
					return got
				}
				for _, id := range ids {
					if n.Topic == ledger.TopicState && n.TaskID == id {
						got[id] = append(got[id], n.State)
					}
				}
			case <-ctx.Done():
				t.Fatalf("no marker note; notes so far %v", got)
			}
		}
	}

	// Completed in one array statement, and alone.
	a, b, c := mk(), mk(), mk()
	group(t, s, end(a, 1, ledger.Completed, "succeeded"), end(b, 1, ledger.Completed, "succeeded"))
	if arrays, writes := s.ArrayStats(); arrays != 1 || writes != 2 {
		t.Fatalf("array statements %d carrying %d writes, want 1 carrying 2", arrays, writes)
	}
	direct(s, end(c, 1, ledger.Completed, "succeeded"))
	for _, id := range []string{a, b, c} {
		if n := eventRows(t, s, id); n != 0 {
			t.Errorf("task %s: %d event rows after EndRun, want 0 (the events are in the task row)", id, n)
		}
		if got, want := events(id), "[1:>queued:enqueued:: 2:queued>running:attempt_started::w0 3:running>completed:succeeded:d-succeeded:w0]"; got != want {
			t.Errorf("completed task %s: events %s, want %s", id, got, want)
		}
	}
	if got, want := fmt.Sprint(waitNotes(a, b, c)), fmt.Sprint(map[string][]ledger.State{a: {ledger.Completed}, b: {ledger.Completed}, c: {ledger.Completed}}); got != want {
		t.Errorf("notes %s, want %s", got, want)
	}

	// A retry: the retry event is the task row's until the next EndRun
	// writes it as its row (in an array statement here).
	d := mk()
	direct(s, end(d, 1, ledger.RetryWait, "retrying"))
	if n := eventRows(t, s, d); n != 0 {
		t.Errorf("task waiting to retry: %d event rows, want 0", n)
	}
	direct(s, func() {
		if _, err := s.BeginRun(ctx, ledger.RunStart{ID: d, Attempt: 2, Worker: "w2", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	})
	group(t, s, end(d, 2, ledger.Completed, "succeeded"), end(mk(), 1, ledger.Completed, "succeeded"))
	if n := eventRows(t, s, d); n != 2 {
		t.Errorf("retried task: %d event rows, want 2 (the first start, the retry)", n)
	}
	if got, want := events(d), "[1:>queued:enqueued:: 2:queued>running:attempt_started::w0 3:running>retry_wait:retrying:d-retrying:w0 "+
		"4:retry_wait>running:attempt_started::w2 5:running>completed:succeeded:d-succeeded:w0]"; got != want {
		t.Errorf("retried task: events %s, want %s", got, want)
	}

	// A dead task replayed and completed: the dead event becomes a row
	// when the completion replaces it, and its note is not sent again.
	e := mk()
	direct(s, end(e, 1, ledger.Dead, "exhausted"))
	if got := fmt.Sprint(waitNotes(e)[e]); got != "[dead]" {
		t.Errorf("dead task: notes %s, want [dead]", got)
	}
	direct(s, func() {
		if _, err := s.Transition(ctx, ledger.TransitionRequest{ID: e, From: []ledger.State{ledger.Dead}, To: ledger.Queued, Reason: "replayed", Actor: "op"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.BeginRun(ctx, ledger.RunStart{ID: e, Attempt: 2, Worker: "w3", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	})
	direct(s, end(e, 2, ledger.Completed, "succeeded"))
	if got := fmt.Sprint(waitNotes(e)[e]); got != "[completed]" {
		t.Errorf("replayed task: notes %s, want [completed] (the dead event's row sends none)", got)
	}
	if got, want := events(e), "[1:>queued:enqueued:: 2:queued>running:attempt_started::w0 3:running>dead:exhausted:d-exhausted:w0 "+
		"4:dead>queued:replayed::op 5:queued>running:attempt_started::w3 6:running>completed:succeeded:d-succeeded:w0]"; got != want {
		t.Errorf("replayed task: events %s, want %s", got, want)
	}
	// An operator's move (Transition) still writes its row and its note.
	f := mk()
	direct(s, func() {
		if _, err := s.Transition(ctx, ledger.TransitionRequest{ID: f, From: []ledger.State{ledger.Running}, To: ledger.Cancelled, Reason: "cancelled", Actor: "op"}); err != nil {
			t.Fatal(err)
		}
	})
	if got := fmt.Sprint(waitNotes(f)[f]); got != "[cancelled]" {
		t.Errorf("cancelled task: notes %s, want [cancelled]", got)
	}
	if n := eventRows(t, s, f); n != 1 {
		t.Errorf("cancelled task: %d event rows, want 1", n)
	}
}
