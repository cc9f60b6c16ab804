package ledgertest

import (
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// The bulk cases join Cases from here, so that they live beside the
// method they check.
func init() {
	Cases = append(Cases,
		Case{"CreateMany", CreateMany},
		Case{"CreateManyDuplicates", CreateManyDuplicates},
		Case{"CreateManyInvalid", CreateManyInvalid},
	)
}

// CreateMany: a batch is recorded as Create records each task — queued,
// with its fields and an "enqueued" event — and the results come back in
// order.
func CreateMany(t *testing.T, mk Maker) {
	l := mk(t)
	runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	in := []*ledger.Task{newTask(t), newTask(t), {Kind: "k", Lane: "batch", OrderingKey: "o1", RunAt: runAt,
		Metadata: map[string]string{"a": "b"}, Deadline: runAt.Add(time.Hour)}}
	rs, err := l.CreateMany(ctx(t), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(in) {
		t.Fatalf("%d results for %d tasks", len(rs), len(in))
	}
	seen := map[string]bool{}
	for i, r := range rs {
		if r.Err != nil || r.Task == nil || !r.Created {
			t.Fatalf("result %d: %+v", i, r)
		}
		if r.Task.ID == "" || seen[r.Task.ID] {
			t.Fatalf("result %d: ID %q empty or repeated", i, r.Task.ID)
		}
		seen[r.Task.ID] = true
		if r.Task.State != ledger.Queued || r.Task.Kind != in[i].Kind || r.Task.IdempotencyKey != in[i].IdempotencyKey ||
			r.Task.OrderingKey != in[i].OrderingKey || !sameTime(r.Task.RunAt, in[i].RunAt) {
			t.Errorf("result %d: %+v for %+v", i, r.Task, in[i])
		}
		got, err := l.Get(ctx(t), r.Task.ID)
		if err != nil {
			t.Fatalf("Get %d: %v", i, err)
		}
		checkTask(t, got, r.Task)
		evs, err := l.Events(ctx(t), r.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || evs[0].Reason != "enqueued" || evs[0].To != ledger.Queued || evs[0].Seq != 1 {
			t.Errorf("events of task %d: %+v", i, evs)
		}
	}
	if got, _ := l.Get(ctx(t), rs[2].Task.ID); got.Metadata["a"] != "b" || !sameTime(got.Deadline, in[2].Deadline) {
		t.Errorf("metadata or deadline lost: %+v", got)
	}
	if rs, err := l.CreateMany(ctx(t), nil); err != nil || len(rs) != 0 {
		t.Errorf("CreateMany(nil) = %v, %v", rs, err)
	}
}

// CreateManyDuplicates: a task whose idempotency key is already recorded,
// or repeats an earlier task's in the same batch, gets that task and
// Created=false; so does one repeating a recorded ID. Nothing is recorded
// twice.
func CreateManyDuplicates(t *testing.T, mk Maker) {
	l := mk(t)
	old := mustCreate(t, l, newTask(t))
	byOld := *old
	byOld.ID, byOld.Kind = "", "other.kind"
	fresh := newTask(t)
	again := *fresh
	again.Kind = "other.kind"
	sameID := &ledger.Task{ID: old.ID, Kind: "k", Lane: "batch"}
	in := []*ledger.Task{&byOld, fresh, &again, sameID, {Kind: "k", Lane: "batch"}}
	rs, err := l.CreateMany(ctx(t), in)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Err != nil || r.Task == nil {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if rs[0].Created || rs[0].Task.ID != old.ID || rs[0].Task.Kind != old.Kind {
		t.Errorf("a recorded key: %+v, want the recorded task %s", rs[0], old.ID)
	}
	if !rs[1].Created {
		t.Errorf("a new key: created=false")
	}
	if rs[2].Created || rs[2].Task.ID != rs[1].Task.ID || rs[2].Task.Kind != fresh.Kind {
		t.Errorf("a key repeated in the batch: %+v, want the batch's first task %s", rs[2], rs[1].Task.ID)
	}
	if rs[3].Created || rs[3].Task.ID != old.ID {
		t.Errorf("a recorded ID: %+v", rs[3])
	}
	if !rs[4].Created {
		t.Errorf("an unkeyed task: created=false")
	}
	all, err := l.List(ctx(t), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Errorf("%d tasks recorded, want 3 (the old one, one new keyed, one unkeyed)", len(all))
	}
}

// CreateManyInvalid: an invalid task gets its own ErrInvalid and is not
// recorded; the valid tasks around it are.
func CreateManyInvalid(t *testing.T, mk Maker) {
	l := mk(t)
	in := []*ledger.Task{newTask(t), nil, {Lane: "batch"}, newTask(t), {Kind: "k", Lane: "batch", State: ledger.Running}}
	rs, err := l.CreateMany(ctx(t), in)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2, 4} {
		if rs[i].Task != nil {
			t.Errorf("invalid task %d got a task: %+v", i, rs[i].Task)
		}
		wantInvalid(t, "CreateMany invalid task", rs[i].Err)
	}
	for _, i := range []int{0, 3} {
		if rs[i].Err != nil || !rs[i].Created {
			t.Errorf("valid task %d: %+v", i, rs[i])
		}
	}
	all, err := l.List(ctx(t), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Errorf("%d tasks recorded, want the 2 valid ones", len(all))
	}
	rs, err = l.CreateMany(ctx(t), []*ledger.Task{nil})
	if err != nil || len(rs) != 1 || rs[0].Err == nil {
		t.Errorf("a batch of only invalid tasks: %+v, %v", rs, err)
	}
}
