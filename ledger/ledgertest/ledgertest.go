package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Maker returns a fresh, empty store for one test and arranges its Close
// with t.Cleanup.
type Maker func(t *testing.T) ledger.Ledger

// Case is one conformance case.
type Case struct {
	Name string
	Run  func(t *testing.T, mk Maker)
}

// Cases lists every case, in the order Run runs them.
var Cases = []Case{
	{"CreateGet", CreateGet},
	{"CreateIdempotent", CreateIdempotent},
	{"CreateSameID", CreateSameID},
	{"CreateInvalid", CreateInvalid},
	{"GetNotFound", GetNotFound},
	{"StateMachine", StateMachine},
	{"TransitionFrom", TransitionFrom},
	{"TransitionUpdates", TransitionUpdates},
	{"TransitionInvalid", TransitionInvalid},
	{"TransitionIfAttemptBelow", TransitionIfAttemptBelow},
	{"TransitionLane", TransitionLane},
	{"BeginRun", BeginRun},
	{"BeginRunLease", BeginRunLease},
	{"EndRunRelease", EndRunRelease},
	{"List", List},
	{"Attempts", Attempts},
	{"Events", Events},
	{"Steps", Steps},
	{"Effects", Effects},
	{"EffectStates", EffectStates},
	{"Prune", Prune},
	{"Dedup", Dedup},
	{"DedupTaskHolds", DedupTaskHolds},
	{"LaneControls", LaneControls},
	{"LaneEvents", LaneEvents},
	{"Servers", Servers},
	{"History", History},
	{"RaceCreate", RaceCreate},
	{"RaceTransition", RaceTransition},
	{"RaceTakeover", RaceTakeover},
	{"RaceBeginRun", RaceBeginRun},
	{"RacePutStep", RacePutStep},
	{"RaceBeginEffect", RaceBeginEffect},
	{"RaceClaim", RaceClaim},
	{"RaceAppendEvent", RaceAppendEvent},
	{"RaceLanePause", RaceLanePause},
	{"Streams", Streams},
	{"RaceAppendStream", RaceAppendStream},
	{"Waits", Waits},
	{"Cancelled", Cancelled},
	{"Closed", Closed},
	{"NotesState", NotesState},
	{"NotesNotify", NotesNotify},
	{"NotesStream", NotesStream},
	{"NotesClosed", NotesClosed},
	{"WatchTask", WatchTask},
	{"FollowTask", FollowTask},
	{"RaceWatchEnd", RaceWatchEnd},
}

// Run runs every case against stores made by mk, each in its own parallel
// subtest.
func Run(t *testing.T, mk Maker) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			c.Run(t, mk)
		})
	}
}

// ctx returns a context bounded for one case.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

var seq atomic.Int64

// newTask returns a valid task with a unique idempotency key.
func newTask(t *testing.T) *ledger.Task {
	n := seq.Add(1)
	return &ledger.Task{
		Tenant:         "acme",
		IdempotencyKey: fmt.Sprintf("key-%s-%d-%d", t.Name(), time.Now().UnixNano(), n),
		Kind:           "email.send",
		Lane:           "interactive",
		Args:           []byte(`{"to":"a@example.com"}`),
		MaxAttempts:    5,
	}
}

func mustCreate(t *testing.T, l ledger.Ledger, task *ledger.Task) *ledger.Task {
	t.Helper()
	got, created, err := l.Create(ctx(t), task)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !created {
		t.Fatalf("Create: created=false for a new task")
	}
	return got
}

func mustTransition(t *testing.T, l ledger.Ledger, id string, to ledger.State, reason string) *ledger.Task {
	t.Helper()
	got, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: id, To: to, Reason: reason})
	if err != nil {
		t.Fatalf("Transition %s → %s: %v", id, to, err)
	}
	if got.State != to {
		t.Fatalf("Transition returned state %s, want %s", got.State, to)
	}
	return got
}

func wantIs(t *testing.T, what string, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got nil error, want %v", what, targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("%s: error %q (%T) does not match %v", what, err, err, target)
		}
	}
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	wantIs(t, what, err, broker.ErrInvalid, broker.ErrPermanent)
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	wantIs(t, what, err, ledger.ErrNotFound, broker.ErrPermanent)
}

func sameTime(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() && b.IsZero()
	}
	d := a.Sub(b)
	return d > -time.Millisecond && d < time.Millisecond
}

// pathTo returns the shortest sequence of transitions from queued to s.
func pathTo(s ledger.State) []ledger.State {
	prev := map[ledger.State]ledger.State{ledger.Queued: ""}
	queue := []ledger.State{ledger.Queued}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == s {
			break
		}
		for _, n := range ledger.Allowed[cur] {
			if _, seen := prev[n]; !seen {
				prev[n] = cur
				queue = append(queue, n)
			}
		}
	}
	if _, ok := prev[s]; !ok {
		return nil
	}
	var path []ledger.State
	for cur := s; cur != ledger.Queued; cur = prev[cur] {
		path = append([]ledger.State{cur}, path...)
	}
	return path
}

// allStates lists every state of the machine.
func allStates() []ledger.State {
	return []ledger.State{
		ledger.Queued, ledger.Running, ledger.RetryWait, ledger.Completed, ledger.Failed,
		ledger.Dead, ledger.AwaitingReview, ledger.Rejected, ledger.Cancelled, ledger.AwaitingEvent,
	}
}
