package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/ledger"
)

// TestEndRun_NotesOnlyWatched (migration 0016): EndRun's statements —
// lean and full, alone and in an array statement — send a state note
// for a task that is watched, or for a move to cancelled, and none for
// an unwatched task's other ends; an operator's move (the trigger's
// note) still notes every task. Counted on a raw connection LISTENing
// on the schema's channel, up to a marker note.
func TestEndRun_NotesOnlyWatched(t *testing.T) {
	t.Parallel()
	s := heldGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	channel, err := s.noteChannel(ctx, s.pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	end := func(id string, attempt int, to ledger.State) func() {
		return func() {
			tr := &ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: to, Reason: string(to)}
			if to == ledger.RetryWait {
				tr.RunAt = time.Now()
			}
			if _, err := s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: attempt, Outcome: string(to)}, Transition: tr}); err != nil {
				t.Error(err)
			}
		}
	}
	mk := func(watched bool) string {
		tk := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
		mustBegin(t, s, tk.ID)
		if watched {
			if got, err := s.WatchTask(ctx, tk.ID); err != nil || got.State != ledger.Running {
				t.Fatalf("WatchTask: %+v %v", got, err)
			}
		}
		return tk.ID
	}
	// retried: a task whose row holds an earlier end (EndRun's full
	// statement ends it next).
	retried := func(watched bool) string {
		id := mk(false)
		direct(s, end(id, 1, ledger.RetryWait))
		var err error
		direct(s, func() {
			_, err = s.BeginRun(ctx, ledger.RunStart{ID: id, Attempt: 2, Worker: "w0", Lease: time.Minute})
		})
		if err != nil {
			t.Fatal(err)
		}
		if watched {
			if _, err := s.WatchTask(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	u1, u2, u3, u4, u5 := mk(false), mk(false), mk(false), retried(false), retried(false)
	w1, w2, w3, w4, w5 := mk(true), mk(true), mk(true), retried(true), retried(true)
	c1, c2, op := mk(false), mk(false), mk(false)

	group(t, s, end(u1, 1, ledger.Completed), end(u2, 1, ledger.Dead), end(w1, 1, ledger.Completed), end(w2, 1, ledger.Failed),
		end(c1, 1, ledger.Cancelled)) // lean, array
	group(t, s, end(u4, 2, ledger.Completed), end(w4, 2, ledger.Completed)) // full, array
	direct(s, end(u3, 1, ledger.Completed))                                 // lean, alone
	direct(s, end(w3, 1, ledger.AwaitingReview))
	direct(s, end(c2, 1, ledger.Cancelled))
	direct(s, end(u5, 2, ledger.Failed)) // full, alone
	direct(s, end(w5, 2, ledger.Dead))
	var terr error
	direct(s, func() {
		_, terr = s.Transition(ctx, ledger.TransitionRequest{ID: op, From: []ledger.State{ledger.Running}, To: ledger.Cancelled, Reason: "operator"})
	})
	if terr != nil {
		t.Fatal(terr)
	}
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, 'marker')`, channel); err != nil {
		t.Fatal(err)
	}
	got := map[string][]ledger.State{}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("no marker note: %v; notes so far %v", err, got)
		}
		if n.Payload == "marker" {
			break
		}
		if nt, ok := ledger.DecodeNote(n.Payload); ok && nt.Topic == ledger.TopicState {
			got[nt.TaskID] = append(got[nt.TaskID], nt.State)
		}
	}
	want := map[string][]ledger.State{
		w1: {ledger.Completed}, w2: {ledger.Failed}, w3: {ledger.AwaitingReview}, w4: {ledger.Completed}, w5: {ledger.Dead},
		c1: {ledger.Cancelled}, c2: {ledger.Cancelled}, op: {ledger.Cancelled},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("state notes %v\nwant %v (none for the unwatched %s %s %s %s %s)", got, want, u1, u2, u3, u4, u5)
	}
}
