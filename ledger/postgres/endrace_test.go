package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// TestEndRun_RacesAnOperatorMove (migration 0015): on each of many
// running tasks, a worker's EndRun (to completed, its event kept in the
// task row and its note sent by the statement) races an operator's
// Transition (to cancelled, its event a row whose note the trigger sends
// when it is its task's latest), through the group writer. One move wins
// per task; its events have distinct, increasing seqs and end with the
// winner's move; and exactly one terminal note is sent per task, for the
// state the task is in (the loser sends none).
func TestEndRun_RacesAnOperatorMove(t *testing.T) {
	t.Parallel()
	s := openFresh(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	notes, err := s.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	ids := make([]string, n)
	for i := range ids {
		tk, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.BeginRun(ctx, ledger.RunStart{ID: tk.ID, Attempt: 1, Worker: "w0", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WatchTask(ctx, tk.ID); err != nil { // so that EndRun notes (0016)
			t.Fatal(err)
		}
		ids[i] = tk.ID
	}
	var wg sync.WaitGroup
	endErr := make([]error, n)
	opErr := make([]error, n)
	for i, id := range ids {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, endErr[i] = s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: 1, Outcome: "succeeded"},
				Transition: &ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: ledger.Completed,
					Reason: "succeeded", Actor: "w0"}})
		}()
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				// Shapes the schedule only (either move may still win):
				// without it the operator's move won nearly every race.
				time.Sleep(time.Duration(i%7) * time.Millisecond)
			}
			_, opErr[i] = s.Transition(ctx, ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: ledger.Cancelled,
				Reason: "cancelled", Actor: "operator"})
		}()
	}
	wg.Wait()
	final := map[string]ledger.State{}
	for i, id := range ids {
		tk, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		final[id] = tk.State
		switch {
		case endErr[i] == nil && opErr[i] == nil:
			t.Errorf("%s: both moves succeeded; the task is %s", id, tk.State)
		case endErr[i] != nil && opErr[i] != nil:
			t.Errorf("%s: both moves failed (%v; %v); the task is %s", id, endErr[i], opErr[i], tk.State)
		case endErr[i] == nil && tk.State != ledger.Completed, opErr[i] == nil && tk.State != ledger.Cancelled:
			t.Errorf("%s: the winning move does not show: the task is %s", id, tk.State)
		}
		evs, err := s.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for j := 1; j < len(evs); j++ {
			if evs[j].Seq <= evs[j-1].Seq {
				t.Errorf("%s: event seqs not increasing: %v", id, evs)
			}
		}
		if last := evs[len(evs)-1]; last.To != tk.State {
			t.Errorf("%s: last event %s→%s, the task is %s", id, last.From, last.To, tk.State)
		}
		var moves int
		for _, e := range evs {
			if e.From == ledger.Running && (e.To == ledger.Completed || e.To == ledger.Cancelled) {
				moves++
			}
		}
		if moves != 1 {
			t.Errorf("%s: %d terminal moves in its events, want 1: %v", id, moves, evs)
		}
	}
	if err := s.Notify(ctx, ledger.Note{Topic: "marker", TaskID: "m"}); err != nil {
		t.Fatal(err)
	}
	got := map[string][]ledger.State{}
	for done := false; !done; {
		select {
		case nt := <-notes:
			switch {
			case nt.Topic == "marker":
				done = true
			case nt.Topic == ledger.TopicState:
				got[nt.TaskID] = append(got[nt.TaskID], nt.State)
			}
		case <-ctx.Done():
			t.Fatalf("no marker note; notes so far %v", got)
		}
	}
	var completed int
	for _, id := range ids {
		if want := fmt.Sprint([]ledger.State{final[id]}); fmt.Sprint(got[id]) != want {
			t.Errorf("%s: notes %v, want %s", id, got[id], want)
		}
		if final[id] == ledger.Completed {
			completed++
		}
	}
	t.Logf("%d completed by EndRun, %d cancelled by the operator", completed, n-completed)
}
