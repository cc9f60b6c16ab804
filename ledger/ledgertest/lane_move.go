package ledgertest

import (
	"testing"

	"github.com/switchyard-dev/switchyard/ledger"
)

// TransitionLane: TransitionRequest.Lane moves the task to another lane
// with the transition (a dead letter moved to another lane's queue); a
// transition without it keeps the lane; a bad lane name is refused and
// changes nothing.
func TransitionLane(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	for _, to := range []ledger.State{ledger.Running, ledger.Dead} {
		got, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, To: to, Reason: "test", Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got.Lane != task.Lane {
			t.Fatalf("a transition without Lane moved the task from %s to %s", task.Lane, got.Lane)
		}
	}
	_, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, To: ledger.Queued, Reason: "moved", Lane: "bad lane"})
	wantInvalid(t, "a transition to a bad lane name", err)
	got, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, From: []ledger.State{ledger.Dead}, To: ledger.Queued, Reason: "moved",
		Detail: "from lane " + task.Lane + " to lane reprocess", Lane: "reprocess"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Lane != "reprocess" || got.State != ledger.Queued || got.Attempt != 1 {
		t.Fatalf("after the move: %+v", got)
	}
	r, err := l.Get(ctx(t), task.ID)
	if err != nil || r.Lane != "reprocess" {
		t.Fatalf("Get after the move: %+v %v", r, err)
	}
}
