package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
	"github.com/switchyard-dev/switchyard/ledger"
)

// heldGroups opens a store on a fresh schema whose group writer does not
// run: the test gathers the writes its calls submit and runs them as one
// group (runGroup), so that which writes share a group is decided, not
// left to timing.
func heldGroups(t *testing.T) *Store {
	t.Helper()
	dsn := testenv.Postgres.Endpoint(t)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "ledgertest_" + hex.EncodeToString(b)
	ctx := context.Background()
	s, err := Open(ctx, dsn, &Options{Schema: schema, NoGroupCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		s.Close()
	})
	s.g = newGrouper(-1)
	return s
}

// queued waits (up to timeout) for writes to be queued on s's held group
// writer, and takes them all; nil when none came in time.
func queued(s *Store, timeout time.Duration) []*groupReq {
	g := s.g
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		if len(g.q) > 0 {
			rs := g.q
			g.q = nil
			g.mu.Unlock()
			return rs
		}
		ch := g.changed
		g.idle++ // so that push wakes this wait
		g.mu.Unlock()
		expired := false
		select {
		case <-ch:
		case <-deadline.C:
			expired = true
		}
		g.mu.Lock()
		g.idle--
		g.mu.Unlock()
		if expired {
			return queuedNow(g)
		}
	}
}

// queuedNow takes the writes queued on g, if any.
func queuedNow(g *grouper) []*groupReq {
	g.mu.Lock()
	defer g.mu.Unlock()
	rs := g.q
	g.q = nil
	return rs
}

// group runs calls at once and, once all of them have submitted their
// write, runs those writes as one group; it returns when every call has
// returned.
func group(t *testing.T, s *Store, calls ...func()) {
	t.Helper()
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Add(1)
		go func() { defer wg.Done(); c() }()
	}
	var rs []*groupReq
	deadline := time.Now().Add(10 * time.Second)
	for len(rs) < len(calls) {
		got := queued(s, time.Until(deadline))
		if got == nil {
			t.Fatalf("%d of %d writes submitted", len(rs), len(calls))
		}
		rs = append(rs, got...)
	}
	s.runGroup(rs)
	// A refused write reads the task after its group (not a write); a
	// call that writes again submits once more: run those alone.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	deadline = time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("calls did not return")
		}
		for _, r := range queued(s, 10*time.Millisecond) {
			s.runGroup([]*groupReq{r})
		}
	}
}

// direct runs f with the store writing directly (no group writer).
func direct(s *Store, f func()) {
	g := s.g
	s.g = nil
	defer func() { s.g = g }()
	f()
}

func mustCreate(t *testing.T, s *Store, in *ledger.Task) *ledger.Task {
	t.Helper()
	var tk *ledger.Task
	var err error
	direct(s, func() { tk, _, err = s.Create(context.Background(), in) })
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func mustBegin(t *testing.T, s *Store, id string) {
	t.Helper()
	var err error
	direct(s, func() {
		_, err = s.BeginRun(context.Background(), ledger.RunStart{ID: id, Attempt: 1, Worker: "w0", Lease: time.Minute})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func complete(id string, attempt, below int) ledger.RunEnd {
	return ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: attempt, Outcome: "ok", Duration: time.Millisecond},
		Transition: &ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: ledger.Completed,
			Reason: "succeeded", Attempt: attempt, IfAttemptBelow: below}}
}

// TestArrayGroup_MixedOutcomes: one group holds Creates, BeginRuns and
// EndRuns, several of each kind (so each kind is one array statement),
// some of them refused by their task's state or attempt. Each refused
// write fails alone, with its single statement's error; every other
// write lands once; the group is not split.
func TestArrayGroup_MixedOutcomes(t *testing.T) {
	t.Parallel()
	s := heldGroups(t)
	ctx := context.Background()
	// Tasks: q1, q2 queued (BeginRun runs them); done completed
	// (BeginRun refused); r1, r2 running attempt 1 (EndRun completes
	// them); stale running attempt 1 (EndRun with IfAttemptBelow 1:
	// refused); dup holds key "k-dup" (a Create with it is a duplicate).
	q1 := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	q2 := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	done := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	mustBegin(t, s, done.ID)
	direct(s, func() {
		if _, err := s.EndRun(ctx, complete(done.ID, 1, 0)); err != nil {
			t.Fatal(err)
		}
	})
	var running []*ledger.Task
	for range 3 {
		tk := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
		mustBegin(t, s, tk.ID)
		running = append(running, tk)
	}
	r1, r2, stale := running[0], running[1], running[2]
	dup := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch", IdempotencyKey: "k-dup"})

	arrays0, writes0 := s.ArrayStats()
	var (
		mu   sync.Mutex
		errs = map[string]error{}
		got  = map[string]*ledger.Task{}
		made = map[string]bool{}
	)
	note := func(name string, tk *ledger.Task, err error) {
		mu.Lock()
		defer mu.Unlock()
		errs[name], got[name] = err, tk
	}
	create := func(name, key string) func() {
		return func() {
			tk, created, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "batch", IdempotencyKey: key})
			note(name, tk, err)
			mu.Lock()
			made[name] = created
			mu.Unlock()
		}
	}
	begin := func(name, id string) func() {
		return func() {
			tk, err := s.BeginRun(ctx, ledger.RunStart{ID: id, Attempt: 1, Worker: "w1", Lease: time.Minute})
			note(name, tk, err)
		}
	}
	end := func(name string, req ledger.RunEnd) func() {
		return func() { tk, err := s.EndRun(ctx, req); note(name, tk, err) }
	}
	group(t, s,
		create("c1", ""), create("c2", "k-new"), create("cdup", "k-dup"),
		begin("q1", q1.ID), begin("q2", q2.ID), begin("done", done.ID),
		end("r1", complete(r1.ID, 1, 0)), end("r2", complete(r2.ID, 1, 2)), end("stale", complete(stale.ID, 1, 1)),
	)
	for _, name := range []string{"c1", "c2", "cdup", "q1", "q2", "r1", "r2"} {
		if errs[name] != nil {
			t.Errorf("%s: %v", name, errs[name])
		}
	}
	if !made["c1"] || !made["c2"] || made["cdup"] {
		t.Errorf("created: c1 %v, c2 %v, cdup %v; want true, true, false", made["c1"], made["c2"], made["cdup"])
	}
	if got["cdup"] == nil || got["cdup"].ID != dup.ID {
		t.Errorf("Create with a taken key returned %+v, want task %s", got["cdup"], dup.ID)
	}
	for _, name := range []string{"done", "stale"} {
		if !errors.Is(errs[name], ledger.ErrConflict) {
			t.Errorf("%s: %v, want ErrConflict", name, errs[name])
		}
	}
	for _, name := range []string{"q1", "q2"} {
		if tk := got[name]; tk == nil || tk.State != ledger.Running || tk.Attempt != 1 {
			t.Errorf("%s: %+v, want running attempt 1", name, tk)
		}
	}
	for _, name := range []string{"r1", "r2"} {
		if tk := got[name]; tk == nil || tk.State != ledger.Completed {
			t.Errorf("%s: %+v, want completed", name, tk)
		}
	}
	if arrays, writes := s.ArrayStats(); arrays-arrays0 != 3 || writes-writes0 != 9 {
		t.Errorf("array statements: %d carrying %d writes, want 3 carrying 9", arrays-arrays0, writes-writes0)
	}
	if _, _, splits := s.GroupStats(); splits != 0 {
		t.Errorf("%d groups split, want none (no write failed on the server)", splits)
	}
	// What each task holds: events and attempts once each.
	check := func(id string, state ledger.State, events int, attempts []string) {
		t.Helper()
		var tk *ledger.Task
		var evs []ledger.Event
		var as []ledger.Attempt
		var err error
		direct(s, func() {
			if tk, err = s.Get(ctx, id); err == nil {
				if evs, err = s.Events(ctx, id); err == nil {
					as, err = s.Attempts(ctx, id)
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		var outs []string
		for _, a := range as {
			outs = append(outs, fmt.Sprintf("%d:%s:%s", a.Number, a.Worker, a.Outcome))
		}
		if tk.State != state || len(evs) != events || fmt.Sprint(outs) != fmt.Sprint(attempts) {
			t.Errorf("task %s: %s, %d events, attempts %v; want %s, %d, %v", id, tk.State, len(evs), outs, state, events, attempts)
		}
	}
	check(q1.ID, ledger.Running, 2, []string{"1:w1:"})
	check(q2.ID, ledger.Running, 2, []string{"1:w1:"})
	check(done.ID, ledger.Completed, 3, []string{"1:w0:ok"})
	check(r1.ID, ledger.Completed, 3, []string{"1:w0:ok"})
	check(r2.ID, ledger.Completed, 3, []string{"1:w0:ok"})
	// The refused transition still records its attempt, as EndRun's
	// single statement does.
	check(stale.ID, ledger.Running, 2, []string{"1:w0:ok"})
	check(got["c1"].ID, ledger.Queued, 1, nil)
	check(got["c2"].ID, ledger.Queued, 1, nil)
}

// TestArrayGroup_SameTaskTwice: a group with two writes of one task per
// kind (two BeginRuns of one delivery, two EndRuns, two Creates of one
// ID and two of one idempotency key) among other writes of the kind:
// the first of each pair is in the array statement, the second runs
// after it and sees it, as in any serial order of the two calls.
func TestArrayGroup_SameTaskTwice(t *testing.T) {
	t.Parallel()
	s := heldGroups(t)
	ctx := context.Background()
	a := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	b := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	c := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	d := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
	mustBegin(t, s, c.ID)
	mustBegin(t, s, d.ID)
	var (
		mu      sync.Mutex
		results []string
		tasks   = map[string][]*ledger.Task{}
	)
	rec := func(name string, tk *ledger.Task, created bool, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, ledger.ErrConflict):
			results = append(results, name+":conflict")
		case err != nil:
			results = append(results, name+":"+err.Error())
		case created:
			results = append(results, name+":created")
		default:
			results = append(results, name+":ok")
		}
		tasks[name] = append(tasks[name], tk)
	}
	begin := func(id string) func() {
		return func() {
			tk, err := s.BeginRun(ctx, ledger.RunStart{ID: id, Attempt: 1, Worker: "w1", Lease: time.Minute})
			rec("begin-"+id[len(id)-4:], tk, false, err)
		}
	}
	end := func(id string) func() {
		return func() { tk, err := s.EndRun(ctx, complete(id, 1, 2)); rec("end-"+id[len(id)-4:], tk, false, err) }
	}
	sameID := broker.NewID()
	create := func(name, id, key string) func() {
		return func() {
			tk, created, err := s.Create(ctx, &ledger.Task{ID: id, Kind: "k", Lane: "batch", IdempotencyKey: key})
			rec(name, tk, created, err)
		}
	}
	// One group per kind, so that no other write's failure could split
	// the group and hide what the array statement did.
	group(t, s, begin(a.ID), begin(a.ID), begin(b.ID))
	group(t, s, end(c.ID), end(c.ID), end(d.ID))
	group(t, s, create("id", sameID, ""), create("id", sameID, ""), create("key", "", "k-same"), create("key", "", "k-same"), create("other", "", ""))
	if _, _, splits := s.GroupStats(); splits != 0 {
		t.Errorf("%d groups split, want none", splits)
	}
	count := func(s string) int {
		n := 0
		for _, r := range results {
			if r == s {
				n++
			}
		}
		return n
	}
	suffix := func(id string) string { return id[len(id)-4:] }
	want := map[string]int{
		"begin-" + suffix(a.ID) + ":ok": 1, "begin-" + suffix(a.ID) + ":conflict": 1, "begin-" + suffix(b.ID) + ":ok": 1,
		"end-" + suffix(c.ID) + ":ok": 1, "end-" + suffix(c.ID) + ":conflict": 1, "end-" + suffix(d.ID) + ":ok": 1,
		"id:created": 1, "id:ok": 1, "key:created": 1, "key:ok": 1, "other:created": 1,
	}
	for k, n := range want {
		if count(k) != n {
			t.Errorf("%s: %d times, want %d (results %v)", k, count(k), n, results)
		}
	}
	if len(results) != 11 {
		t.Errorf("%d results, want 11: %v", len(results), results)
	}
	if ks := tasks["key"]; len(ks) != 2 || ks[0] == nil || ks[1] == nil || ks[0].ID != ks[1].ID {
		t.Errorf("the two Creates of one key got %+v, want one task", ks)
	}
	for _, id := range []string{a.ID, c.ID} {
		var evs []ledger.Event
		var as []ledger.Attempt
		var err error
		direct(s, func() {
			if evs, err = s.Events(ctx, id); err == nil {
				as, err = s.Attempts(ctx, id)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		wantEv := 2 // enqueued, attempt_started
		if id == c.ID {
			wantEv = 3 // and completed
		}
		if len(evs) != wantEv || len(as) != 1 {
			t.Errorf("task %s: %d events, %d attempts; want %d and 1", id, len(evs), len(as), wantEv)
		}
	}
	if arrays, _ := s.ArrayStats(); arrays != 3 {
		t.Errorf("%d array statements, want 3", arrays)
	}
}

// TestArrayGroup_ServerError: an array statement that fails on the
// server (EndRun's full statement for a task that does not exist: its
// attempt's foreign key) splits its group; every write of it is run
// alone and gets its own outcome. The writes are EndRun's full
// statement: the lean one (lean.go) that EndRun tries first returns no
// row for an unknown task and fails nothing; EndRun then runs the full
// one alone, which reports the task not found.
func TestArrayGroup_ServerError(t *testing.T) {
	t.Parallel()
	s := heldGroups(t)
	ctx := context.Background()
	var ids []string
	for range 3 {
		tk := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
		mustBegin(t, s, tk.ID)
		ids = append(ids, tk.ID)
	}
	errs := make([]error, 4)
	var calls []func()
	for i, id := range append(ids, broker.NewID()) {
		calls = append(calls, func() {
			errs[i] = s.queryRowKind(ctx, endRunKind, func(r pgx.Row) error { _, err := scanTask(r); return err },
				id, "completed", time.Now(), 1, false, []byte{}, nil, nil, []string{"running"}, "succeeded", "", "", 0,
				id, 1, "", nil, int64(time.Millisecond), "ok", "", "", "")
		})
	}
	group(t, s, calls...)
	for i := range ids {
		if errs[i] != nil {
			t.Errorf("EndRun %d: %v", i, errs[i])
		}
	}
	if !isFK(errs[3]) {
		t.Errorf("EndRun's full statement for an unknown task: %v, want a foreign-key error", errs[3])
	}
	if _, _, splits := s.GroupStats(); splits != 1 {
		t.Errorf("%d groups split, want 1", splits)
	}
	var err error
	direct(s, func() { _, err = s.EndRun(ctx, complete(broker.NewID(), 1, 0)) })
	if !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("EndRun of an unknown task: %v, want ErrNotFound", err)
	}
	for _, id := range ids {
		var as []ledger.Attempt
		var tk *ledger.Task
		var err error
		direct(s, func() {
			if tk, err = s.Get(ctx, id); err == nil {
				as, err = s.Attempts(ctx, id)
			}
		})
		if err != nil || tk.State != ledger.Completed || len(as) != 1 {
			t.Errorf("task %s: %v, %d attempts (%v); want completed, 1", id, tk.State, len(as), err)
		}
	}
}

// TestArrayGroup_StepsAndEffects: PutStep, BeginEffect and SetEffect of
// several tasks in one group (one array statement each), with writes
// their single statements refuse (a step already stored, an effect
// already begun, a confirmed effect) and a second write of one task: each
// caller gets what the single statement gives it.
func TestArrayGroup_StepsAndEffects(t *testing.T) {
	t.Parallel()
	s := heldGroups(t)
	ctx := context.Background()
	var ids []string
	for range 3 {
		tk := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "batch"})
		mustBegin(t, s, tk.ID)
		ids = append(ids, tk.ID)
	}
	a, b, c := ids[0], ids[1], ids[2]
	direct(s, func() {
		if _, err := s.PutStep(ctx, c, "plan", []byte("first")); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if _, _, err := s.BeginEffect(ctx, id, "mail", 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SetEffect(ctx, c, "mail", ledger.EffectConfirmed, []byte("sent")); err != nil {
			t.Fatal(err)
		}
	})
	var (
		mu   sync.Mutex
		out  = map[string]string{}
		errs = map[string]error{}
	)
	set := func(name, v string, err error) {
		mu.Lock()
		defer mu.Unlock()
		out[name] = v
		errs[name] = err
	}
	step := func(name, id, output string) func() {
		return func() { got, err := s.PutStep(ctx, id, "plan", []byte(output)); set(name, string(got), err) }
	}
	begin := func(name, id string) func() {
		return func() {
			e, created, err := s.BeginEffect(ctx, id, "sms", 1)
			set(name, fmt.Sprintf("%s/%v", e.State, created), err)
		}
	}
	confirm := func(name, id string) func() {
		return func() { set(name, "", s.SetEffect(ctx, id, "mail", ledger.EffectConfirmed, []byte("sent-"+name))) }
	}
	group(t, s, step("sa", a, "a1"), step("sa2", a, "a2"), step("sb", b, "b1"), step("sc", c, "c1"))
	group(t, s, begin("ea", a), begin("ea2", a), begin("eb", b), begin("ec", c))
	group(t, s, confirm("ca", a), confirm("cb", b), confirm("cc", c))
	for name, err := range errs {
		if name == "cc" {
			if !errors.Is(err, ledger.ErrConflict) {
				t.Errorf("SetEffect of a confirmed effect: %v, want ErrConflict", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The two PutSteps of one task: the first stores its output, both get it.
	if out["sa"] != out["sa2"] || (out["sa"] != "a1" && out["sa"] != "a2") {
		t.Errorf("two PutSteps of one step got %q and %q, want the same stored output", out["sa"], out["sa2"])
	}
	if out["sb"] != "b1" || out["sc"] != "first" {
		t.Errorf("PutStep outputs %q, %q; want b1, first (stored before)", out["sb"], out["sc"])
	}
	created := 0
	for _, name := range []string{"ea", "ea2"} {
		if out[name] == "pending/true" {
			created++
		} else if out[name] != "pending/false" {
			t.Errorf("%s: %s", name, out[name])
		}
	}
	if created != 1 || out["eb"] != "pending/true" || out["ec"] != "pending/true" {
		t.Errorf("BeginEffect: ea %s, ea2 %s, eb %s, ec %s; want one of ea/ea2 and eb, ec begun", out["ea"], out["ea2"], out["eb"], out["ec"])
	}
	for _, id := range []string{a, b, c} {
		var es []ledger.Effect
		var err error
		direct(s, func() { es, err = s.Effects(ctx, id) })
		if err != nil || len(es) != 2 {
			t.Fatalf("effects of %s: %+v (%v), want mail and sms", id, es, err)
		}
		mail := es[0]
		if mail.Key != "mail" || mail.State != ledger.EffectConfirmed {
			t.Errorf("task %s mail effect %+v, want confirmed", id, mail)
		}
		if want := map[string]string{a: "sent-ca", b: "sent-cb", c: "sent"}[id]; string(mail.Result) != want {
			t.Errorf("task %s mail result %q, want %q", id, mail.Result, want)
		}
	}
	if arrays, _ := s.ArrayStats(); arrays != 3 {
		t.Errorf("%d array statements, want 3", arrays)
	}
	if _, _, splits := s.GroupStats(); splits != 0 {
		t.Errorf("%d groups split, want none", splits)
	}
}
