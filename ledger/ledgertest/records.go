package ledgertest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// Attempts: StartAttempt and FinishAttempt record each attempt (Finish
// alone creates the record); Attempts lists them in order.
func Attempts(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	start := time.Now().Add(-time.Second).Round(time.Millisecond)
	if err := l.StartAttempt(ctx(t), ledger.Attempt{TaskID: task.ID, Number: 1, Worker: "w1", Start: start}); err != nil {
		t.Fatal(err)
	}
	as, err := l.Attempts(ctx(t), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].Number != 1 || as[0].Worker != "w1" || !sameTime(as[0].Start, start) || as[0].Outcome != "" {
		t.Fatalf("after StartAttempt: %+v", as)
	}
	if err := l.FinishAttempt(ctx(t), ledger.Attempt{TaskID: task.ID, Number: 1, Duration: 1500 * time.Millisecond,
		Outcome: "panic", Class: "panic", Error: "nil map", Stack: "goroutine 1 [running]:"}); err != nil {
		t.Fatal(err)
	}
	// Attempt 2 finishes without having been started (a worker that
	// recorded only the outcome).
	start2 := time.Now().Round(time.Millisecond)
	if err := l.FinishAttempt(ctx(t), ledger.Attempt{TaskID: task.ID, Number: 2, Worker: "w2", Start: start2, Duration: time.Second, Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	// A restarted attempt 3 (the same number delivered twice) keeps one record.
	for _, w := range []string{"w3", "w4"} {
		if err := l.StartAttempt(ctx(t), ledger.Attempt{TaskID: task.ID, Number: 3, Worker: w}); err != nil {
			t.Fatal(err)
		}
	}
	as, err = l.Attempts(ctx(t), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 3 {
		t.Fatalf("%d attempts, want 3: %+v", len(as), as)
	}
	a := as[0]
	if a.TaskID != task.ID || a.Number != 1 || a.Worker != "w1" || !sameTime(a.Start, start) || a.Duration != 1500*time.Millisecond ||
		a.Outcome != "panic" || a.Class != "panic" || a.Error != "nil map" || a.Stack != "goroutine 1 [running]:" {
		t.Errorf("attempt 1: %+v", a)
	}
	if a := as[1]; a.Number != 2 || a.Worker != "w2" || !sameTime(a.Start, start2) || a.Outcome != "ok" || a.Duration != time.Second {
		t.Errorf("attempt 2: %+v", a)
	}
	if a := as[2]; a.Number != 3 || a.Worker != "w4" || a.Start.IsZero() {
		t.Errorf("attempt 3: %+v (a zero Start means now)", a)
	}
	err = l.StartAttempt(ctx(t), ledger.Attempt{TaskID: "no-such-task", Number: 1})
	wantNotFound(t, "StartAttempt of an unknown task", err)
	err = l.FinishAttempt(ctx(t), ledger.Attempt{TaskID: "no-such-task", Number: 1})
	wantNotFound(t, "FinishAttempt of an unknown task", err)
	err = l.StartAttempt(ctx(t), ledger.Attempt{TaskID: task.ID, Number: 0})
	wantInvalid(t, "StartAttempt number 0", err)
	err = l.FinishAttempt(ctx(t), ledger.Attempt{TaskID: "", Number: 1})
	wantInvalid(t, "FinishAttempt without a task", err)
	none, err := l.Attempts(ctx(t), "no-such-task")
	if err != nil || len(none) != 0 {
		t.Errorf("Attempts of an unknown task: %v %v", none, err)
	}
}

// Events: AppendEvent adds notes with the next sequence number and keeps
// every field.
func Events(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	at := time.Now().Add(-time.Minute).Round(time.Millisecond)
	if err := l.AppendEvent(ctx(t), ledger.Event{TaskID: task.ID, At: at, Reason: "note", Detail: "looked at it", Actor: "operator:alice"}); err != nil {
		t.Fatal(err)
	}
	mustTransition(t, l, task.ID, ledger.Running, "start")
	if err := l.AppendEvent(ctx(t), ledger.Event{TaskID: task.ID, From: ledger.Running, To: ledger.Running, Reason: "lease_extended", Seq: 99}); err != nil {
		t.Fatal(err)
	}
	evs, err := l.Events(ctx(t), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 4 {
		t.Fatalf("%d events, want 4: %+v", len(evs), evs)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Errorf("event %d has Seq %d, want %d (Seq is assigned by the store)", i, e.Seq, i+1)
		}
	}
	if e := evs[1]; e.Reason != "note" || e.Detail != "looked at it" || e.Actor != "operator:alice" || !sameTime(e.At, at) || e.From != "" || e.To != "" {
		t.Errorf("note: %+v", e)
	}
	if e := evs[3]; e.Reason != "lease_extended" || e.From != ledger.Running || e.To != ledger.Running || e.At.IsZero() {
		t.Errorf("second note: %+v", e)
	}
	err = l.AppendEvent(ctx(t), ledger.Event{TaskID: "no-such-task", Reason: "note"})
	wantNotFound(t, "AppendEvent to an unknown task", err)
	err = l.AppendEvent(ctx(t), ledger.Event{TaskID: task.ID})
	wantInvalid(t, "AppendEvent without a reason", err)
	err = l.AppendEvent(ctx(t), ledger.Event{TaskID: task.ID, Reason: "note", To: "sleeping"})
	wantInvalid(t, "AppendEvent with an unknown state", err)
	none, err := l.Events(ctx(t), "no-such-task")
	if err != nil || len(none) != 0 {
		t.Errorf("Events of an unknown task: %v %v", none, err)
	}
}

// Steps: the first PutStep wins; later ones and GetStep return its output.
func Steps(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	if out, ok, err := l.GetStep(ctx(t), task.ID, "summarise"); err != nil || ok || out != nil {
		t.Fatalf("GetStep before PutStep: %q %v %v", out, ok, err)
	}
	stored, err := l.PutStep(ctx(t), task.ID, "summarise", []byte("first"))
	if err != nil || string(stored) != "first" {
		t.Fatalf("PutStep: %q %v", stored, err)
	}
	stored, err = l.PutStep(ctx(t), task.ID, "summarise", []byte("second"))
	if err != nil || string(stored) != "first" {
		t.Fatalf("second PutStep: %q %v, want the first output", stored, err)
	}
	out, ok, err := l.GetStep(ctx(t), task.ID, "summarise")
	if err != nil || !ok || string(out) != "first" {
		t.Fatalf("GetStep: %q %v %v", out, ok, err)
	}
	// An empty output is a completed step.
	if stored, err := l.PutStep(ctx(t), task.ID, "empty", nil); err != nil || len(stored) != 0 {
		t.Fatalf("PutStep nil: %q %v", stored, err)
	}
	if out, ok, err := l.GetStep(ctx(t), task.ID, "empty"); err != nil || !ok || len(out) != 0 {
		t.Fatalf("GetStep of an empty output: %q %v %v", out, ok, err)
	}
	big := bytes.Repeat([]byte{0, 1, 2, 255}, 64<<10)
	if stored, err := l.PutStep(ctx(t), task.ID, "binary", big); err != nil || !bytes.Equal(stored, big) {
		t.Fatalf("PutStep of 256 KiB of binary: %v", err)
	}
	if out, _, err := l.GetStep(ctx(t), task.ID, "binary"); err != nil || !bytes.Equal(out, big) {
		t.Fatalf("GetStep of binary: %v", err)
	}
	// Steps are per task.
	other := mustCreate(t, l, newTask(t))
	if _, ok, _ := l.GetStep(ctx(t), other.ID, "summarise"); ok {
		t.Error("a step of one task is visible on another")
	}
	_, err = l.PutStep(ctx(t), "no-such-task", "s", []byte("x"))
	wantNotFound(t, "PutStep of an unknown task", err)
	_, err = l.PutStep(ctx(t), task.ID, "", []byte("x"))
	wantInvalid(t, "PutStep without a name", err)
	_, _, err = l.GetStep(ctx(t), "", "s")
	wantInvalid(t, "GetStep without a task", err)
}

// Effects: BeginEffect records pending once; SetEffect records outcomes;
// a confirmed effect never changes.
func Effects(t *testing.T, mk Maker) {
	l := mk(t)
	task := mustCreate(t, l, newTask(t))
	e, begun, err := l.BeginEffect(ctx(t), task.ID, "email:welcome", 1)
	if err != nil || !begun {
		t.Fatalf("BeginEffect: %+v %v %v", e, begun, err)
	}
	if e.TaskID != task.ID || e.Key != "email:welcome" || e.State != ledger.EffectPending || e.Attempt != 1 || e.UpdatedAt.IsZero() {
		t.Errorf("begun effect: %+v", e)
	}
	e, begun, err = l.BeginEffect(ctx(t), task.ID, "email:welcome", 2)
	if err != nil || begun || e.State != ledger.EffectPending || e.Attempt != 1 {
		t.Fatalf("second BeginEffect: %+v begun=%v %v, want the pending record of attempt 1", e, begun, err)
	}
	if err := l.SetEffect(ctx(t), task.ID, "email:welcome", ledger.EffectConfirmed, []byte("msg-id-9")); err != nil {
		t.Fatal(err)
	}
	err = l.SetEffect(ctx(t), task.ID, "email:welcome", ledger.EffectUnknown, nil)
	wantIs(t, "SetEffect on a confirmed effect", err, ledger.ErrConflict)
	err = l.SetEffect(ctx(t), task.ID, "email:welcome", ledger.EffectConfirmed, []byte("other"))
	wantIs(t, "re-confirming a confirmed effect", err, ledger.ErrConflict)
	e, begun, err = l.BeginEffect(ctx(t), task.ID, "email:welcome", 3)
	if err != nil || begun || e.State != ledger.EffectConfirmed || string(e.Result) != "msg-id-9" {
		t.Fatalf("BeginEffect of a confirmed effect: %+v begun=%v %v", e, begun, err)
	}
	// pending → unknown → pending → confirmed (a reconciled effect).
	if _, _, err := l.BeginEffect(ctx(t), task.ID, "charge", 1); err != nil {
		t.Fatal(err)
	}
	for _, st := range []ledger.EffectState{ledger.EffectUnknown, ledger.EffectPending, ledger.EffectConfirmed} {
		if err := l.SetEffect(ctx(t), task.ID, "charge", st, nil); err != nil {
			t.Fatalf("SetEffect %s: %v", st, err)
		}
	}
	es, err := l.Effects(ctx(t), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 {
		t.Fatalf("%d effects, want 2: %+v", len(es), es)
	}
	byKey := map[string]ledger.Effect{}
	for _, e := range es {
		byKey[e.Key] = e
	}
	if e := byKey["email:welcome"]; e.State != ledger.EffectConfirmed || string(e.Result) != "msg-id-9" || e.Attempt != 1 {
		t.Errorf("email effect: %+v", e)
	}
	if e := byKey["charge"]; e.State != ledger.EffectConfirmed || e.Result != nil && len(e.Result) != 0 {
		t.Errorf("charge effect: %+v", e)
	}
	err = l.SetEffect(ctx(t), task.ID, "no-such-effect", ledger.EffectConfirmed, nil)
	wantNotFound(t, "SetEffect of an unknown effect", err)
	err = l.SetEffect(ctx(t), task.ID, "charge", "done", nil)
	wantInvalid(t, "SetEffect with an unknown state", err)
	_, _, err = l.BeginEffect(ctx(t), "no-such-task", "k", 1)
	wantNotFound(t, "BeginEffect of an unknown task", err)
	_, _, err = l.BeginEffect(ctx(t), task.ID, "", 1)
	wantInvalid(t, "BeginEffect without a key", err)
}

// Prune: deletes terminal tasks updated before the cutoff with all their
// records, and nothing else; their idempotency keys become free.
func Prune(t *testing.T, mk Maker) {
	l := mk(t)
	type rec struct {
		task *ledger.Task
		path []ledger.State
	}
	var recs []rec
	for _, st := range allStates() {
		task := mustCreate(t, l, newTask(t))
		path := pathTo(st)
		for _, s := range path {
			mustTransition(t, l, task.ID, s, "setup")
		}
		if err := l.StartAttempt(ctx(t), ledger.Attempt{TaskID: task.ID, Number: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.PutStep(ctx(t), task.ID, "s", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.BeginEffect(ctx(t), task.ID, "e", 1); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec{task, path})
	}
	n, err := l.Prune(ctx(t), time.Now().Add(-time.Hour))
	if err != nil || n != 0 {
		t.Fatalf("Prune before everything: %d %v, want 0", n, err)
	}
	n, err = l.Prune(ctx(t), time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	terminal := 0
	for _, r := range recs {
		st := r.task.State
		if len(r.path) > 0 {
			st = r.path[len(r.path)-1]
		}
		_, getErr := l.Get(ctx(t), r.task.ID)
		as, _ := l.Attempts(ctx(t), r.task.ID)
		evs, _ := l.Events(ctx(t), r.task.ID)
		es, _ := l.Effects(ctx(t), r.task.ID)
		_, stepOK, _ := l.GetStep(ctx(t), r.task.ID, "s")
		if st.Terminal() {
			terminal++
			if !errors.Is(getErr, ledger.ErrNotFound) || len(as)+len(evs)+len(es) != 0 || stepOK {
				t.Errorf("%s task survived Prune: get=%v attempts=%d events=%d effects=%d step=%v", st, getErr, len(as), len(evs), len(es), stepOK)
			}
			again := mustCreate(t, l, &ledger.Task{Tenant: r.task.Tenant, IdempotencyKey: r.task.IdempotencyKey, Kind: "k", Lane: "batch"})
			if again.ID == r.task.ID {
				t.Errorf("a pruned task's key still maps to it")
			}
		} else if getErr != nil || len(as) != 1 || len(es) != 1 || !stepOK || len(evs) == 0 {
			t.Errorf("%s task damaged by Prune: get=%v attempts=%d events=%d effects=%d step=%v", st, getErr, len(as), len(evs), len(es), stepOK)
		}
	}
	if n != terminal {
		t.Errorf("Prune reported %d, want %d", n, terminal)
	}
}

// Dedup: the broker.DedupStore side: a claim holds (lane, tenant, key);
// a second claim reports the first id; Release by the holder frees it.
func Dedup(t *testing.T, mk Maker) {
	l := mk(t)
	claim := func(lane, tenant, key, id string) (string, bool) {
		t.Helper()
		existing, dup, err := l.Claim(ctx(t), lane, tenant, key, id)
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		return existing, dup
	}
	if _, dup := claim("batch", "acme", "k1", "id-1"); dup {
		t.Fatal("first claim reported a duplicate")
	}
	if existing, dup := claim("batch", "acme", "k1", "id-2"); !dup || existing != "id-1" {
		t.Fatalf("second claim: %q dup=%v, want id-1 true", existing, dup)
	}
	if _, dup := claim("batch", "globex", "k1", "id-3"); dup {
		t.Fatal("another tenant's key was a duplicate")
	}
	if _, dup := claim("batch", "", "k1", "id-3b"); dup {
		t.Fatal("the default tenant's key was a duplicate")
	}
	if _, dup := claim("interactive", "acme", "k1", "id-4"); dup {
		t.Fatal("another lane's key was a duplicate")
	}
	if err := l.Release(ctx(t), "batch", "acme", "k1", "id-2"); err != nil {
		t.Fatal(err)
	}
	if existing, dup := claim("batch", "acme", "k1", "id-5"); !dup || existing != "id-1" {
		t.Fatalf("a release by a non-holder freed the key: %q %v", existing, dup)
	}
	if err := l.Release(ctx(t), "batch", "acme", "k1", "id-1"); err != nil {
		t.Fatal(err)
	}
	if _, dup := claim("batch", "acme", "k1", "id-6"); dup {
		t.Fatal("a released key was still claimed")
	}
	if existing, dup := claim("batch", "acme", "k1", "id-7"); !dup || existing != "id-6" {
		t.Fatalf("claim after re-claim: %q %v, want id-6", existing, dup)
	}
	if err := l.Release(ctx(t), "batch", "acme", "never-claimed", "id-1"); err != nil {
		t.Errorf("Release of an unclaimed key: %v", err)
	}
	_, _, err := l.Claim(ctx(t), "bad lane", "acme", "k", "id")
	wantInvalid(t, "Claim with a bad lane", err)
	_, _, err = l.Claim(ctx(t), "batch", "acme", "", "id")
	wantInvalid(t, "Claim without a key", err)
	_, _, err = l.Claim(ctx(t), "batch", "acme", "k", "")
	wantInvalid(t, "Claim without an id", err)
}

// DedupTaskHolds: a task recorded with an idempotency key holds it for
// the broker's dedup claims too (one claim per idempotent Enqueue): the
// task's own claim is not a duplicate, another message's claim of the key
// on the task's lane is a duplicate of the task, and another lane or
// tenant is free, as with a claim.
func DedupTaskHolds(t *testing.T, mk Maker) {
	l := mk(t)
	tk, created, err := l.Create(ctx(t), &ledger.Task{Kind: "k", Lane: "batch", Tenant: "acme", IdempotencyKey: "order-1"})
	if err != nil || !created {
		t.Fatalf("Create: %v %v", created, err)
	}
	for range 2 { // the second is a retried publish of the same task
		if existing, dup, err := l.Claim(ctx(t), "batch", "acme", "order-1", tk.ID); err != nil || dup {
			t.Fatalf("the task's own claim: %q dup=%v %v, want no duplicate", existing, dup, err)
		}
	}
	if existing, dup, err := l.Claim(ctx(t), "batch", "acme", "order-1", "other-id"); err != nil || !dup || existing != tk.ID {
		t.Fatalf("another message's claim: %q dup=%v %v, want the task %s", existing, dup, err, tk.ID)
	}
	if _, dup, err := l.Claim(ctx(t), "interactive", "acme", "order-1", "id-lane"); err != nil || dup {
		t.Fatalf("another lane's claim: dup=%v %v", dup, err)
	}
	if _, dup, err := l.Claim(ctx(t), "batch", "globex", "order-1", "id-tenant"); err != nil || dup {
		t.Fatalf("another tenant's claim: dup=%v %v", dup, err)
	}
	// CreateMany's tasks hold their keys too.
	rs, err := l.CreateMany(ctx(t), []*ledger.Task{{Kind: "k", Lane: "batch", IdempotencyKey: "bulk-1"}})
	if err != nil || rs[0].Err != nil || !rs[0].Created {
		t.Fatalf("CreateMany: %+v %v", rs, err)
	}
	if _, dup, err := l.Claim(ctx(t), "batch", "", "bulk-1", rs[0].Task.ID); err != nil || dup {
		t.Fatalf("a bulk task's own claim: dup=%v %v", dup, err)
	}
	if existing, dup, err := l.Claim(ctx(t), "batch", "", "bulk-1", "other-id"); err != nil || !dup || existing != rs[0].Task.ID {
		t.Fatalf("another message's claim of a bulk task's key: %q dup=%v %v", existing, dup, err)
	}
}
