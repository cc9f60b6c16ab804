package ledgertest

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// CreateGet: Create assigns an ID, records the task queued with an
// "enqueued" event, and Get and GetByKey return every field.
func CreateGet(t *testing.T, mk Maker) {
	l := mk(t)
	in := newTask(t)
	in.OrderingKey = "customer-7"
	in.RunAt = time.Now().Add(time.Hour).Round(time.Millisecond)
	in.Deadline = time.Now().Add(2 * time.Hour).Round(time.Millisecond)
	in.Metadata = map[string]string{"trace": "abc", "user": "u1"}
	before := time.Now().Add(-time.Second)
	got := mustCreate(t, l, in)
	if got.ID == "" {
		t.Fatal("Create did not assign an ID")
	}
	if in.ID != "" {
		t.Error("Create modified its argument's ID")
	}
	if got.State != ledger.Queued {
		t.Errorf("state %s, want queued", got.State)
	}
	if got.CreatedAt.Before(before) || got.UpdatedAt.Before(before) {
		t.Errorf("CreatedAt %v / UpdatedAt %v not set to now", got.CreatedAt, got.UpdatedAt)
	}
	for _, read := range []func() (*ledger.Task, error){
		func() (*ledger.Task, error) { return l.Get(ctx(t), got.ID) },
		func() (*ledger.Task, error) { return l.GetByKey(ctx(t), in.Tenant, in.IdempotencyKey) },
	} {
		r, err := read()
		if err != nil {
			t.Fatalf("read back: %v", err)
		}
		checkTask(t, r, got)
		if r.Tenant != in.Tenant || r.IdempotencyKey != in.IdempotencyKey || r.Kind != in.Kind || r.Lane != in.Lane ||
			r.OrderingKey != in.OrderingKey || !bytes.Equal(r.Args, in.Args) || r.MaxAttempts != in.MaxAttempts ||
			!sameTime(r.RunAt, in.RunAt) || !sameTime(r.Deadline, in.Deadline) || !reflect.DeepEqual(r.Metadata, in.Metadata) {
			t.Errorf("read back %+v, created from %+v", r, in)
		}
	}
	evs, err := l.Events(ctx(t), got.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Seq != 1 || evs[0].From != "" || evs[0].To != ledger.Queued || evs[0].Reason != "enqueued" {
		t.Errorf("events after Create: %+v, want one enqueued event with Seq 1", evs)
	}
	// A task with a caller-chosen ID and no key.
	own := &ledger.Task{ID: "own-id-1", Kind: "k", Lane: "batch"}
	got2 := mustCreate(t, l, own)
	if got2.ID != "own-id-1" || got2.Tenant != "" {
		t.Errorf("Create with own ID returned %+v", got2)
	}
	r, err := l.Get(ctx(t), "own-id-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Args != nil && len(r.Args) != 0 || r.Metadata != nil && len(r.Metadata) != 0 || !r.RunAt.IsZero() || !r.Deadline.IsZero() || r.Result != nil {
		t.Errorf("empty fields came back non-empty: %+v", r)
	}
}

func checkTask(t *testing.T, got, want *ledger.Task) {
	t.Helper()
	if got.ID != want.ID || got.State != want.State || got.Attempt != want.Attempt || got.Tenant != want.Tenant ||
		got.IdempotencyKey != want.IdempotencyKey || got.Kind != want.Kind || got.Lane != want.Lane ||
		got.OrderingKey != want.OrderingKey || !bytes.Equal(got.Args, want.Args) || got.MaxAttempts != want.MaxAttempts ||
		!sameTime(got.RunAt, want.RunAt) || !sameTime(got.Deadline, want.Deadline) || !bytes.Equal(got.Result, want.Result) ||
		got.LastError != want.LastError || !sameTime(got.CreatedAt, want.CreatedAt) || !sameTime(got.UpdatedAt, want.UpdatedAt) ||
		len(got.Metadata) != len(want.Metadata) {
		t.Errorf("task\n got %+v\nwant %+v", got, want)
	}
}

// CreateIdempotent: a second Create with the same tenant and key returns
// the first task, created=false; keys are scoped by tenant; tasks without
// a key never collide.
func CreateIdempotent(t *testing.T, mk Maker) {
	l := mk(t)
	in := newTask(t)
	first := mustCreate(t, l, in)
	again := *in
	again.Kind = "other.kind"
	got, created, err := l.Create(ctx(t), &again)
	if err != nil {
		t.Fatal(err)
	}
	if created || got.ID != first.ID || got.Kind != first.Kind {
		t.Fatalf("duplicate key: created=%v task %+v, want the first task %s", created, got, first.ID)
	}
	other := *in
	other.Tenant = "globex"
	o := mustCreate(t, l, &other)
	if o.ID == first.ID {
		t.Fatal("another tenant's task with the same key got the same task")
	}
	def := *in
	def.Tenant = ""
	d := mustCreate(t, l, &def)
	if d.ID == first.ID || d.ID == o.ID {
		t.Fatal("the default tenant's task with the same key got another tenant's task")
	}
	if _, err := l.GetByKey(ctx(t), "", in.IdempotencyKey); err != nil {
		t.Errorf("GetByKey for the default tenant: %v", err)
	}
	_, err = l.GetByKey(ctx(t), "nobody", in.IdempotencyKey)
	wantNotFound(t, "GetByKey of another tenant", err)
	_, err = l.GetByKey(ctx(t), "acme", "no-such-key")
	wantNotFound(t, "GetByKey of an unknown key", err)
	for i := 0; i < 2; i++ {
		mustCreate(t, l, &ledger.Task{Tenant: "acme", Kind: "k", Lane: "batch"})
	}
	all, err := l.List(ctx(t), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 {
		t.Errorf("List after 3 keyed and 2 unkeyed creates has %d tasks, want 5", len(all))
	}
}

// CreateSameID: creating a task whose ID is already recorded returns the
// recorded task, created=false.
func CreateSameID(t *testing.T, mk Maker) {
	l := mk(t)
	first := mustCreate(t, l, &ledger.Task{ID: "task-same-id", Kind: "k", Lane: "batch"})
	got, created, err := l.Create(ctx(t), &ledger.Task{ID: "task-same-id", Kind: "other", Lane: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	if created || got.ID != first.ID || got.Kind != "k" {
		t.Fatalf("Create of a recorded ID: created=%v %+v", created, got)
	}
}

// CreateInvalid: malformed tasks are refused with broker.ErrInvalid and
// nothing is recorded.
func CreateInvalid(t *testing.T, mk Maker) {
	l := mk(t)
	long := strings.Repeat("x", broker.MaxKeyLen+1)
	cases := map[string]*ledger.Task{
		"nil":          nil,
		"no kind":      {Lane: "batch"},
		"no lane":      {Kind: "k"},
		"bad lane":     {Kind: "k", Lane: "has space"},
		"bad kind":     {Kind: "-k", Lane: "batch"},
		"long key":     {Kind: "k", Lane: "batch", IdempotencyKey: long},
		"control key":  {Kind: "k", Lane: "batch", IdempotencyKey: "a\nb"},
		"long tenant":  {Kind: "k", Lane: "batch", Tenant: long},
		"control id":   {Kind: "k", Lane: "batch", ID: "a\x00b"},
		"negative max": {Kind: "k", Lane: "batch", MaxAttempts: -1},
		"not queued":   {Kind: "k", Lane: "batch", State: ledger.Running},
	}
	for name, task := range cases {
		_, _, err := l.Create(ctx(t), task)
		wantInvalid(t, "Create "+name, err)
	}
	all, err := l.List(ctx(t), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 0 {
		t.Errorf("invalid creates recorded %d tasks", len(all))
	}
}

// GetNotFound: unknown IDs give ErrNotFound; empty ones ErrInvalid.
func GetNotFound(t *testing.T, mk Maker) {
	l := mk(t)
	_, err := l.Get(ctx(t), "no-such-task")
	wantNotFound(t, "Get unknown", err)
	_, err = l.Get(ctx(t), "")
	wantInvalid(t, "Get empty", err)
	_, err = l.GetByKey(ctx(t), "acme", "")
	wantInvalid(t, "GetByKey empty key", err)
}

// StateMachine: for every pair of states, a task in the first moves to the
// second exactly when ledger.Allowed says so; otherwise Transition returns
// a *ledger.ConflictError naming the current state and nothing changes.
func StateMachine(t *testing.T, mk Maker) {
	l := mk(t)
	for _, from := range allStates() {
		path := pathTo(from)
		if path == nil && from != ledger.Queued {
			t.Fatalf("state %s is unreachable from queued", from)
		}
		for _, to := range allStates() {
			for _, guarded := range []bool{true, false} {
				task := mustCreate(t, l, newTask(t))
				for _, s := range path {
					mustTransition(t, l, task.ID, s, "setup")
				}
				req := ledger.TransitionRequest{ID: task.ID, To: to, Reason: "test", Actor: "suite"}
				if guarded {
					req.From = []ledger.State{from}
				}
				got, err := l.Transition(ctx(t), req)
				if ledger.CanTransition(from, to) {
					if err != nil {
						t.Errorf("%s → %s (guarded %v): %v, want success", from, to, guarded, err)
						continue
					}
					if got.State != to {
						t.Errorf("%s → %s returned state %s", from, to, got.State)
					}
					continue
				}
				var ce *ledger.ConflictError
				if !errors.As(err, &ce) || !errors.Is(err, ledger.ErrConflict) {
					t.Errorf("%s → %s (guarded %v): error %v, want *ledger.ConflictError", from, to, guarded, err)
					continue
				}
				if ce.ID != task.ID || ce.Current != from || ce.To != to {
					t.Errorf("%s → %s: conflict %+v", from, to, ce)
				}
				cur, err := l.Get(ctx(t), task.ID)
				if err != nil {
					t.Fatal(err)
				}
				if cur.State != from {
					t.Errorf("%s → %s refused but the task is now %s", from, to, cur.State)
				}
				evs, err := l.Events(ctx(t), task.ID)
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) != 1+len(path) {
					t.Errorf("%s → %s refused but the event log has %d entries, want %d", from, to, len(evs), 1+len(path))
				}
			}
		}
	}
}

// TransitionFrom: a guard that does not hold refuses the move even when
// the move itself is legal.
func TransitionFrom(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	_, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, From: []ledger.State{ledger.RetryWait}, To: ledger.Running, Reason: "retry"})
	var ce *ledger.ConflictError
	if !errors.As(err, &ce) || ce.Current != ledger.Queued || ce.To != ledger.Running {
		t.Fatalf("guarded transition from the wrong state: %v", err)
	}
	got, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, From: []ledger.State{ledger.RetryWait, ledger.Queued}, To: ledger.Running, Reason: "start"})
	if err != nil || got.State != ledger.Running {
		t.Fatalf("guarded transition with the right state in From: %v %v", got, err)
	}
	_, err = l.Transition(ctx(t), ledger.TransitionRequest{ID: "no-such-task", To: ledger.Running, Reason: "start"})
	wantNotFound(t, "Transition of an unknown task", err)
}

// TransitionUpdates: the optional updates apply with the move, the rest
// of the task is kept, and each move appends an event.
func TransitionUpdates(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	time.Sleep(2 * time.Millisecond)
	got, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, To: ledger.Running, Reason: "attempt_started", Detail: "first", Actor: "worker-1", Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempt != 1 || !got.UpdatedAt.After(task.UpdatedAt) || !sameTime(got.CreatedAt, task.CreatedAt) {
		t.Errorf("after start: %+v", got)
	}
	msg := "boom"
	runAt := time.Now().Add(time.Minute).Round(time.Millisecond)
	got, err = l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, To: ledger.RetryWait, Reason: "retry", LastError: &msg, RunAt: runAt})
	if err != nil {
		t.Fatal(err)
	}
	if got.LastError != "boom" || !sameTime(got.RunAt, runAt) || got.Attempt != 1 {
		t.Errorf("after retry: %+v", got)
	}
	got, err = l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, To: ledger.Running, Reason: "attempt_started", Attempt: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got.LastError != "boom" || got.Attempt != 2 {
		t.Errorf("a nil LastError must keep the last error: %+v", got)
	}
	empty := ""
	got, err = l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, To: ledger.Completed, Reason: "ok", Result: []byte("42"), LastError: &empty})
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Result) != "42" || got.LastError != "" || got.Attempt != 2 {
		t.Errorf("after complete: %+v", got)
	}
	r, err := l.Get(ctx(t), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkTask(t, r, got)
	evs, err := l.Events(ctx(t), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		from, to ledger.State
		reason   string
	}{{"", ledger.Queued, "enqueued"}, {ledger.Queued, ledger.Running, "attempt_started"}, {ledger.Running, ledger.RetryWait, "retry"},
		{ledger.RetryWait, ledger.Running, "attempt_started"}, {ledger.Running, ledger.Completed, "ok"}}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(evs), len(want), evs)
	}
	for i, w := range want {
		e := evs[i]
		if e.Seq != int64(i+1) || e.From != w.from || e.To != w.to || e.Reason != w.reason || e.TaskID != task.ID || e.At.IsZero() {
			t.Errorf("event %d: %+v, want %+v", i, e, w)
		}
	}
	if evs[1].Detail != "first" || evs[1].Actor != "worker-1" {
		t.Errorf("detail/actor not kept: %+v", evs[1])
	}
}

// TransitionInvalid: malformed requests are refused with ErrInvalid.
func TransitionInvalid(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	for name, req := range map[string]ledger.TransitionRequest{
		"no id":        {To: ledger.Running, Reason: "r"},
		"no reason":    {ID: task.ID, To: ledger.Running},
		"bad reason":   {ID: task.ID, To: ledger.Running, Reason: "has space"},
		"unknown to":   {ID: task.ID, To: "sleeping", Reason: "r"},
		"empty to":     {ID: task.ID, Reason: "r"},
		"unknown from": {ID: task.ID, From: []ledger.State{"sleeping"}, To: ledger.Running, Reason: "r"},
		"neg attempt":  {ID: task.ID, To: ledger.Running, Reason: "r", Attempt: -1},
		"neg guard":    {ID: task.ID, To: ledger.Running, Reason: "r", IfAttemptBelow: -1},
	} {
		_, err := l.Transition(ctx(t), req)
		wantInvalid(t, "Transition "+name, err)
	}
	got, err := l.Get(ctx(t), task.ID)
	if err != nil || got.State != ledger.Queued {
		t.Fatalf("after invalid transitions: %v %v", got, err)
	}
}

// List: filters by tenant, state, kind and lane; oldest first; pages with
// Limit and After.
func List(t *testing.T, mk Maker) {
	l := mk(t)
	var ids []string
	for i := 0; i < 7; i++ {
		task := newTask(t)
		if i%2 == 1 {
			task.Tenant = "globex"
		}
		if i%3 == 0 {
			task.Kind = "report.build"
			task.Lane = "batch"
		}
		ids = append(ids, mustCreate(t, l, task).ID)
	}
	mustTransition(t, l, ids[0], ledger.Running, "start")
	mustTransition(t, l, ids[5], ledger.Running, "start")
	check := func(name string, f ledger.Filter, want ...int) {
		t.Helper()
		got, err := l.List(ctx(t), f)
		if err != nil {
			t.Fatalf("List %s: %v", name, err)
		}
		var gotIDs, wantIDs []string
		for _, g := range got {
			gotIDs = append(gotIDs, g.ID)
		}
		for _, w := range want {
			wantIDs = append(wantIDs, ids[w])
		}
		if !reflect.DeepEqual(gotIDs, wantIDs) {
			t.Errorf("List %s: %v, want %v", name, gotIDs, wantIDs)
		}
	}
	check("all", ledger.Filter{}, 0, 1, 2, 3, 4, 5, 6)
	check("tenant", ledger.Filter{Tenant: "globex"}, 1, 3, 5)
	check("kind", ledger.Filter{Kind: "report.build"}, 0, 3, 6)
	check("lane", ledger.Filter{Lane: "interactive"}, 1, 2, 4, 5)
	check("state", ledger.Filter{States: []ledger.State{ledger.Running}}, 0, 5)
	check("states", ledger.Filter{States: []ledger.State{ledger.Running, ledger.Queued}}, 0, 1, 2, 3, 4, 5, 6)
	check("combined", ledger.Filter{Tenant: "globex", States: []ledger.State{ledger.Queued}, Lane: "batch"}, 3)
	check("page 1", ledger.Filter{Limit: 3}, 0, 1, 2)
	check("page 2", ledger.Filter{Limit: 3, After: ids[2]}, 3, 4, 5)
	check("page 3", ledger.Filter{Limit: 3, After: ids[5]}, 6)
	check("page after last", ledger.Filter{Limit: 3, After: ids[6]})
	check("page filtered", ledger.Filter{Tenant: "globex", Limit: 1, After: ids[1]}, 3)
	check("over limit", ledger.Filter{Limit: 5000}, 0, 1, 2, 3, 4, 5, 6)
	_, err := l.List(ctx(t), ledger.Filter{States: []ledger.State{"sleeping"}})
	wantInvalid(t, "List with an unknown state", err)
	_, err = l.List(ctx(t), ledger.Filter{Limit: -1})
	wantInvalid(t, "List with a negative limit", err)
	_, err = l.List(ctx(t), ledger.Filter{After: "no-such-task"})
	wantNotFound(t, "List after an unknown task", err)
}

// TransitionIfAttemptBelow: the attempt guard refuses the move when the
// task's attempt is not below it, with a ConflictError, and allows it
// otherwise (a newer delivery taking over a running task).
func TransitionIfAttemptBelow(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	if _, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, To: ledger.Running, Reason: "attempt_started", Attempt: 2}); err != nil {
		t.Fatal(err)
	}
	for _, below := range []int{1, 2} {
		_, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, From: []ledger.State{ledger.Running}, To: ledger.Running,
			Reason: "attempt_started", Attempt: below, IfAttemptBelow: below})
		var ce *ledger.ConflictError
		if !errors.As(err, &ce) || ce.Current != ledger.Running {
			t.Fatalf("takeover with attempt %d of a task at attempt 2: %v, want a ConflictError", below, err)
		}
	}
	got, err := l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, From: []ledger.State{ledger.Running}, To: ledger.Running,
		Reason: "attempt_started", Attempt: 3, IfAttemptBelow: 3})
	if err != nil || got.Attempt != 3 {
		t.Fatalf("takeover with attempt 3: %+v %v", got, err)
	}
	evs, err := l.Events(ctx(t), task.ID)
	if err != nil || len(evs) != 3 {
		t.Fatalf("%d events after one start and one takeover, want 3 (%v)", len(evs), err)
	}
	// The guard applies with an empty From too.
	_, err = l.Transition(ctx(t), ledger.TransitionRequest{ID: task.ID, To: ledger.Completed, Reason: "ok", IfAttemptBelow: 3})
	wantIs(t, "completion guarded below the current attempt", err, ledger.ErrConflict)
}
