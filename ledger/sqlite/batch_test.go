package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ledger"
)

// heldWriter opens a store on a temp file whose writer goroutine is
// stopped: the test gathers the writes its calls submit and runs them as
// one group (runGroup), so which writes share a group is decided, not
// left to timing.
func heldWriter(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	close(s.stop)
	<-s.stopped
	s.stop = make(chan struct{})
	s.reqs = make(chan *writeReq)
	t.Cleanup(func() { s.Close() })
	return s
}

// group runs calls at once and, once all of them have submitted their
// write, runs those writes as one group; writes submitted after it (a
// call writing again) run alone. It returns when every call has.
func group(t *testing.T, s *Store, calls ...func()) {
	t.Helper()
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Add(1)
		go func() { defer wg.Done(); c() }()
	}
	var rs []*writeReq
	timeout := time.After(10 * time.Second)
	for len(rs) < len(calls) {
		select {
		case r := <-s.reqs:
			rs = append(rs, r)
		case <-timeout:
			t.Fatalf("%d of %d writes submitted", len(rs), len(calls))
		}
	}
	s.runGroup(rs)
	s.prepareUnready()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case r := <-s.reqs:
			s.runGroup([]*writeReq{r})
			s.prepareUnready()
		case <-done:
			return
		case <-time.After(10 * time.Second):
			t.Fatal("calls did not return")
		}
	}
}

// alone runs one call through the held writer.
func alone(t *testing.T, s *Store, f func()) {
	t.Helper()
	group(t, s, f)
}

func mustCreate(t *testing.T, s *Store, in *ledger.Task) *ledger.Task {
	t.Helper()
	var tk *ledger.Task
	var err error
	alone(t, s, func() { tk, _, err = s.Create(context.Background(), in) })
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func mustBegin(t *testing.T, s *Store, id string) {
	t.Helper()
	var err error
	alone(t, s, func() {
		_, err = s.BeginRun(context.Background(), ledger.RunStart{ID: id, Attempt: 1, Worker: "w0", Lease: time.Minute})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func complete(id string, attempt, below int) ledger.RunEnd {
	return ledger.RunEnd{Attempt: ledger.Attempt{TaskID: id, Number: attempt, Outcome: "ok", Duration: time.Millisecond},
		Transition: &ledger.TransitionRequest{ID: id, From: []ledger.State{ledger.Running}, To: ledger.Completed,
			Reason: "succeeded", Attempt: attempt, IfAttemptBelow: below, Result: []byte("r")}}
}

func batchStats(s *Store) (batches, writes, splits int64) {
	return s.batches.Load(), s.batchWrites.Load(), s.splits.Load()
}

// sameAsStored checks that a grouped write's returned task is the task
// as stored.
func sameAsStored(t *testing.T, s *Store, what string, got *ledger.Task) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: no task returned", what)
		return
	}
	want, err := s.Get(context.Background(), got.ID)
	if err != nil {
		t.Fatalf("%s: get: %v", what, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: returned\n%+v\nstored\n%+v", what, got, want)
	}
}

// TestGroupedWrites_MixedOutcomes: one group holds Creates, BeginRuns and
// EndRuns, several of each kind (each kind one grouped statement), some
// refused by their task's state or attempt or unknown. Each refused write
// gets its own error, as alone; every other write lands once, and what
// it returns is what is stored; the group is not split.
func TestGroupedWrites_MixedOutcomes(t *testing.T) {
	t.Parallel()
	s := heldWriter(t)
	ctx := context.Background()
	held := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "l", IdempotencyKey: "held"})
	queued := make([]*ledger.Task, 4)
	for i := range queued {
		queued[i] = mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "l", Metadata: map[string]string{"i": fmt.Sprint(i)}})
	}
	running := make([]*ledger.Task, 4)
	for i := range running {
		running[i] = mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "l"})
		mustBegin(t, s, running[i].ID)
	}
	b0, _, _ := batchStats(s)

	var (
		created                 [3]*ledger.Task
		createdNew              [3]bool
		createErr               [3]error
		keyTask, idTask         *ledger.Task
		keyNew, idNew           bool
		begun                   [4]*ledger.Task
		beginErr                [4]error
		busyTask, ghostTask     *ledger.Task
		busyErr, ghostErr       error
		ended                   [3]*ledger.Task
		endErr                  [3]error
		guardTask               *ledger.Task
		guardErr, ghostEndErr   error
		retryTask               *ledger.Task
		retryErr                error
		lastErr                 = "boom"
		runAt                   = time.Now().Add(time.Hour)
		calls                   []func()
		createCalls, beginCalls int
	)
	for i := range created {
		calls = append(calls, func() {
			created[i], createdNew[i], createErr[i] = s.Create(ctx, &ledger.Task{Kind: "k", Lane: "l", Args: []byte{byte(i)}})
		})
		createCalls++
	}
	calls = append(calls,
		func() { keyTask, keyNew, _ = s.Create(ctx, &ledger.Task{Kind: "k", Lane: "l", IdempotencyKey: "held"}) },
		func() { idTask, idNew, _ = s.Create(ctx, &ledger.Task{ID: queued[0].ID, Kind: "k", Lane: "l"}) })
	for i := range begun {
		calls = append(calls, func() {
			begun[i], beginErr[i] = s.BeginRun(ctx, ledger.RunStart{ID: queued[i].ID, Attempt: 1, Worker: "w1", Lease: time.Minute})
		})
		beginCalls++
	}
	calls = append(calls,
		// running[0]'s lease is live: refused.
		func() {
			busyTask, busyErr = s.BeginRun(ctx, ledger.RunStart{ID: running[0].ID, Attempt: 1, Worker: "w2", Lease: time.Minute})
		},
		func() {
			ghostTask, ghostErr = s.BeginRun(ctx, ledger.RunStart{ID: "no-such-task", Attempt: 1, Worker: "w2", Lease: time.Minute})
		},
		func() { ended[0], endErr[0] = s.EndRun(ctx, complete(running[1].ID, 1, 0)) },
		func() { ended[1], endErr[1] = s.EndRun(ctx, complete(running[2].ID, 1, 0)) },
		// The attempt guard refuses: the task's attempt is 1.
		func() { guardTask, guardErr = s.EndRun(ctx, complete(running[0].ID, 1, 1)) },
		func() { _, ghostEndErr = s.EndRun(ctx, complete("no-such-task-2", 1, 0)) },
		func() {
			retryTask, retryErr = s.EndRun(ctx, ledger.RunEnd{
				Attempt: ledger.Attempt{TaskID: running[3].ID, Number: 1, Outcome: "error", Error: "boom"},
				Transition: &ledger.TransitionRequest{ID: running[3].ID, From: []ledger.State{ledger.Running}, To: ledger.RetryWait,
					Reason: "retry", LastError: &lastErr, RunAt: runAt, Lane: "other"}})
		},
	)
	group(t, s, calls...)

	b1, w1, splits := batchStats(s)
	if splits != 0 {
		t.Errorf("%d splits, want 0", splits)
	}
	if b1-b0 != 3 {
		t.Errorf("%d grouped statements, want 3 (one per kind)", b1-b0)
	}
	t.Logf("%d grouped steps carried %d writes", b1, w1)
	for i := range created {
		if createErr[i] != nil || !createdNew[i] {
			t.Errorf("create %d: %v (new %v)", i, createErr[i], createdNew[i])
			continue
		}
		got, err := s.Get(ctx, created[i].ID)
		if err != nil || got.State != ledger.Queued || len(got.Args) != 1 || got.Args[0] != byte(i) {
			t.Errorf("create %d: stored %+v, %v", i, got, err)
		}
	}
	if keyNew || keyTask == nil || keyTask.ID != held.ID {
		t.Errorf("create with a held key: %+v new=%v, want the holder %s", keyTask, keyNew, held.ID)
	}
	if idNew || idTask == nil || idTask.ID != queued[0].ID || idTask.Metadata["i"] != "0" {
		t.Errorf("create with a taken ID: %+v new=%v, want the task there", idTask, idNew)
	}
	for i := range begun {
		if beginErr[i] != nil {
			t.Errorf("begin %d: %v", i, beginErr[i])
			continue
		}
		if begun[i].State != ledger.Running || begun[i].Attempt != 1 {
			t.Errorf("begin %d: %+v", i, begun[i])
		}
		sameAsStored(t, s, fmt.Sprint("begin ", i), begun[i])
	}
	if !errors.Is(busyErr, ledger.ErrConflict) || busyTask == nil || busyTask.State != ledger.Running {
		t.Errorf("begin on a live lease: %+v, %v; want the task and ErrConflict", busyTask, busyErr)
	}
	if !errors.Is(ghostErr, ledger.ErrNotFound) || ghostTask != nil {
		t.Errorf("begin on an unknown task: %v, want ErrNotFound", ghostErr)
	}
	for i := range 2 {
		if endErr[i] != nil || ended[i].State != ledger.Completed || string(ended[i].Result) != "r" {
			t.Errorf("end %d: %+v, %v", i, ended[i], endErr[i])
			continue
		}
		sameAsStored(t, s, fmt.Sprint("end ", i), ended[i])
	}
	if !errors.Is(guardErr, ledger.ErrConflict) || guardTask == nil || guardTask.State != ledger.Running {
		t.Errorf("end refused by its attempt guard: %+v, %v; want the task and ErrConflict", guardTask, guardErr)
	}
	if !errors.Is(ghostEndErr, ledger.ErrNotFound) {
		t.Errorf("end on an unknown task: %v, want ErrNotFound", ghostEndErr)
	}
	if retryErr != nil || retryTask.State != ledger.RetryWait || retryTask.LastError != "boom" || retryTask.Lane != "other" ||
		!retryTask.LeaseUntil.IsZero() {
		t.Errorf("end to retry_wait: %+v, %v", retryTask, retryErr)
	} else {
		sameAsStored(t, s, "end to retry_wait", retryTask)
	}
	// The refused EndRun's attempt is still recorded (as alone).
	as, err := s.Attempts(ctx, running[0].ID)
	if err != nil || len(as) != 1 || as[0].Outcome != "ok" {
		t.Errorf("refused end's attempt: %+v, %v", as, err)
	}
	// Events: every task's sequence is gapless (enqueued, running, end).
	for i, tk := range []*ledger.Task{queued[1], running[1], running[3]} {
		evs, err := s.Events(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := []ledger.State{ledger.Queued, ledger.Running}
		switch i {
		case 1:
			want = append(want, ledger.Completed)
		case 2:
			want = append(want, ledger.RetryWait)
		}
		var got []ledger.State
		for j, e := range evs {
			got = append(got, e.To)
			if e.Seq != int64(j+1) {
				t.Errorf("task %d: event %d has seq %d", i, j, e.Seq)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("task %d: events %v, want %v", i, got, want)
		}
	}
	for i := range begun {
		as, err := s.Attempts(ctx, queued[i].ID)
		if err != nil || len(as) != 1 || as[0].Worker != "w1" {
			t.Errorf("begin %d's attempt: %+v, %v", i, as, err)
		}
	}
	_ = createCalls
	_ = beginCalls
}

// TestGroupedWrites_SameTask: two BeginRuns of one task and two EndRuns
// of another in one group never share a statement: the second of each
// runs after the first and is refused by what the first did.
func TestGroupedWrites_SameTask(t *testing.T) {
	t.Parallel()
	s := heldWriter(t)
	ctx := context.Background()
	a := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "l"})
	b := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "l"})
	c := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "l"})
	mustBegin(t, s, b.ID)
	mustBegin(t, s, c.ID)
	var (
		begin [2]*ledger.Task
		bErr  [2]error
		end   [2]*ledger.Task
		eErr  [2]error
		other *ledger.Task
		oErr  error
		dup   [2]*ledger.Task
		dNew  [2]bool
	)
	run := func(i int) ledger.RunStart {
		return ledger.RunStart{ID: a.ID, Attempt: 1, Worker: fmt.Sprint("w", i), Lease: time.Minute}
	}
	group(t, s,
		func() { begin[0], bErr[0] = s.BeginRun(ctx, run(0)) },
		func() { begin[1], bErr[1] = s.BeginRun(ctx, run(1)) },
		func() { end[0], eErr[0] = s.EndRun(ctx, complete(b.ID, 1, 0)) },
		func() { end[1], eErr[1] = s.EndRun(ctx, complete(b.ID, 1, 0)) },
		func() { other, oErr = s.EndRun(ctx, complete(c.ID, 1, 0)) },
		func() { dup[0], dNew[0], _ = s.Create(ctx, &ledger.Task{Kind: "k", Lane: "l", IdempotencyKey: "same"}) },
		func() { dup[1], dNew[1], _ = s.Create(ctx, &ledger.Task{Kind: "k", Lane: "l", IdempotencyKey: "same"}) },
	)
	if (bErr[0] == nil) == (bErr[1] == nil) {
		t.Fatalf("two BeginRuns of one task: %v, %v; want one run, one conflict", bErr[0], bErr[1])
	}
	for i := range 2 {
		if bErr[i] != nil && !errors.Is(bErr[i], ledger.ErrConflict) {
			t.Errorf("begin %d: %v, want ErrConflict", i, bErr[i])
		}
	}
	if (eErr[0] == nil) == (eErr[1] == nil) {
		t.Fatalf("two EndRuns of one task: %v, %v; want one move, one conflict", eErr[0], eErr[1])
	}
	for i := range 2 {
		if eErr[i] != nil && (!errors.Is(eErr[i], ledger.ErrConflict) || end[i].State != ledger.Completed) {
			t.Errorf("end %d: %+v, %v, want ErrConflict and the completed task", i, end[i], eErr[i])
		}
	}
	if oErr != nil {
		t.Errorf("end of another task: %v", oErr)
	} else {
		sameAsStored(t, s, "end of another task", other)
	}
	if dNew[0] == dNew[1] || dup[0] == nil || dup[1] == nil || dup[0].ID != dup[1].ID {
		t.Errorf("two creates with one key: %+v %v, %+v %v; want one task, created once", dup[0], dNew[0], dup[1], dNew[1])
	}
	evs, err := s.Events(ctx, a.ID)
	if err != nil || len(evs) != 2 {
		t.Errorf("task run twice in one group: %d events, %v; want 2", len(evs), err)
	}
	evs, err = s.Events(ctx, b.ID)
	if err != nil || len(evs) != 3 {
		t.Errorf("task ended twice in one group: %d events, %v; want 3", len(evs), err)
	}
	if _, _, splits := batchStats(s); splits != 0 {
		t.Errorf("%d splits, want 0", splits)
	}
}

// TestGroupedWrites_ErrorSplits: an error of a grouped statement itself
// (here a trigger refusing one task's update) undoes that statement and
// runs each of its writes alone: the failing write gets the error, the
// others land; the writes of the group outside the statement are kept.
func TestGroupedWrites_ErrorSplits(t *testing.T) {
	t.Parallel()
	s := heldWriter(t)
	ctx := context.Background()
	ts := make([]*ledger.Task, 4)
	for i := range ts {
		ts[i] = mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "l"})
		mustBegin(t, s, ts[i].ID)
	}
	bad := ts[2].ID
	alone(t, s, func() {
		err := s.write(ctx, "test", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TRIGGER test_refuse BEFORE UPDATE OF state ON ledger_tasks
				WHEN NEW.id = '`+bad+`' AND NEW.state = 'completed' BEGIN SELECT RAISE(ABORT, 'refused by test'); END`)
			return err
		})
		if err != nil {
			t.Error(err)
		}
	})
	var (
		ended   [4]*ledger.Task
		errs    [4]error
		created *ledger.Task
		cErr    error
	)
	calls := []func(){func() { created, _, cErr = s.Create(ctx, &ledger.Task{Kind: "k", Lane: "l"}) }}
	for i := range ts {
		calls = append(calls, func() { ended[i], errs[i] = s.EndRun(ctx, complete(ts[i].ID, 1, 0)) })
	}
	group(t, s, calls...)
	if _, _, splits := batchStats(s); splits != 1 {
		t.Errorf("%d splits, want 1", splits)
	}
	for i := range ts {
		if i == 2 {
			if errs[i] == nil || !strings.Contains(errs[i].Error(), "refused by test") {
				t.Errorf("end of the refused task: %v, want the trigger's error", errs[i])
			}
			got, err := s.Get(ctx, ts[i].ID)
			if err != nil || got.State != ledger.Running {
				t.Errorf("refused task: %+v, %v; want it still running", got, err)
			}
			if as, _ := s.Attempts(ctx, ts[i].ID); len(as) != 1 || as[0].Outcome != "" {
				t.Errorf("refused task's attempt: %+v; want its start only (the end undone)", as)
			}
			continue
		}
		if errs[i] != nil || ended[i].State != ledger.Completed {
			t.Errorf("end %d: %+v, %v", i, ended[i], errs[i])
			continue
		}
		sameAsStored(t, s, fmt.Sprint("end ", i), ended[i])
		if evs, err := s.Events(ctx, ts[i].ID); err != nil || len(evs) != 3 {
			t.Errorf("end %d: %d events, %v; want 3 (no copy from the undone statement)", i, len(evs), err)
		}
	}
	if cErr != nil {
		t.Errorf("create in the split group: %v", cErr)
	} else if _, err := s.Get(ctx, created.ID); err != nil {
		t.Errorf("create in the split group lost: %v", err)
	}
}

// TestCreateMany_Grouped: CreateMany's tasks go in multi-row INSERTs of
// power-of-two pieces, and a task repeating an earlier one's key or ID
// finds it, as one after the other.
func TestCreateMany_Grouped(t *testing.T) {
	t.Parallel()
	s := heldWriter(t)
	ctx := context.Background()
	pre := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "l", IdempotencyKey: "pre"})
	const n = 300
	in := make([]*ledger.Task, n)
	for i := range in {
		in[i] = &ledger.Task{Kind: "k", Lane: "l", Args: []byte(fmt.Sprint(i))}
	}
	in[10].IdempotencyKey = "dup"
	in[200].IdempotencyKey = "dup"
	in[20].IdempotencyKey = "pre"
	in[30].ID = "fixed-id"
	in[31].ID = "fixed-id"
	var res []ledger.CreateResult
	var err error
	alone(t, s, func() { res, err = s.CreateMany(ctx, in) })
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("task %d: %v", i, r.Err)
		}
		switch i {
		case 200:
			if r.Created || r.Task.ID != res[10].Task.ID {
				t.Errorf("repeated key: %+v, want task 10's", r)
			}
		case 20:
			if r.Created || r.Task.ID != pre.ID {
				t.Errorf("key held before: %+v, want %s", r, pre.ID)
			}
		case 31:
			if r.Created || r.Task.ID != "fixed-id" || string(r.Task.Args) != "30" {
				t.Errorf("repeated ID: %+v, want task 30", r)
			}
		default:
			if !r.Created {
				t.Errorf("task %d not created: %+v", i, r)
			}
			ids[r.Task.ID] = true
		}
	}
	if len(ids) != n-3 {
		t.Errorf("%d tasks created, want %d", len(ids), n-3)
	}
	all, err := s.List(ctx, ledger.Filter{Limit: 1000})
	if err != nil || len(all) != n-3+1 {
		t.Errorf("%d tasks stored, want %d (%v)", len(all), n-3+1, err)
	}
	for _, tk := range all {
		if tk.ID == pre.ID {
			continue
		}
		if !ids[tk.ID] {
			t.Errorf("stored task %s was not reported created", tk.ID)
		}
	}
}

func TestPiece(t *testing.T) {
	for k, want := range map[int]int{1: 1, 2: 2, 3: 2, 7: 4, 8: 8, 127: 64, 128: 128, 129: 128, 1000: 128} {
		if got := piece(k); got != want {
			t.Errorf("piece(%d) = %d, want %d", k, got, want)
		}
	}
	m := newMulti("A ", "(?, ?)", " B")
	if got := m.sql(2); got != "A (?, ?), (?, ?) B" || m.width != 2 {
		t.Errorf("sql(2) = %q, width %d", got, m.width)
	}
}

// TestGroup_LateWritesJoin: writes queued while a group's statements run
// join that group's transaction before its COMMIT (without the group
// waiting for any), in as many rounds as they keep arriving; a late write
// refused by its own guard gets its own error, the others land, and every
// caller is answered after the one commit.
func TestGroup_LateWritesJoin(t *testing.T) {
	t.Parallel()
	s := heldWriter(t)
	ctx := context.Background()
	queued := mustCreate(t, s, &ledger.Task{Kind: "k", Lane: "l"})
	s.reqs = make(chan *writeReq, 8) // a queue the test can see
	// waitQueued waits until n writes are queued.
	waitQueued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); len(s.reqs) < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d writes queued", len(s.reqs), n)
			}
		}
	}
	type outcome struct {
		t   *ledger.Task
		err error
	}
	first := make(chan outcome, 1)
	go func() {
		tk, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "l", Args: []byte("first")})
		first <- outcome{tk, err}
	}()
	waitQueued(1)
	g := []*writeReq{<-s.reqs}
	// Queued after the group was formed: they join it before its commit.
	late := make(chan outcome, 3)
	go func() {
		tk, _, err := s.Create(ctx, &ledger.Task{Kind: "k", Lane: "l", Args: []byte("late")})
		late <- outcome{tk, err}
	}()
	go func() {
		tk, err := s.BeginRun(ctx, ledger.RunStart{ID: queued.ID, Attempt: 1, Worker: "w", Lease: time.Minute})
		late <- outcome{tk, err}
	}()
	go func() {
		_, err := s.BeginRun(ctx, ledger.RunStart{ID: "no-such-task", Attempt: 1, Worker: "w", Lease: time.Minute})
		late <- outcome{nil, err}
	}()
	waitQueued(3)
	txns0, writes0 := s.txns.Load(), s.writes.Load()
	joins0 := s.lateJoins.Load()
	s.runGroup(g)
	if txns, writes, joins := s.txns.Load()-txns0, s.writes.Load()-writes0, s.lateJoins.Load()-joins0; txns != 1 || writes != 4 || joins != 3 {
		t.Errorf("one group: %d transactions, %d writes, %d late; want 1, 4, 3", txns, writes, joins)
	}
	if n := len(s.reqs); n != 0 {
		t.Errorf("%d writes left queued", n)
		for range n {
			s.runGroup([]*writeReq{<-s.reqs})
		}
	}
	if o := <-first; o.err != nil || string(o.t.Args) != "first" {
		t.Errorf("the group's write: %+v, %v", o.t, o.err)
	}
	var created, begun, refused int
	for range 3 {
		o := <-late
		switch {
		case errors.Is(o.err, ledger.ErrNotFound):
			refused++
		case o.err != nil:
			t.Errorf("late write: %v", o.err)
		case o.t.State == ledger.Running:
			begun++
			sameAsStored(t, s, "late begin", o.t)
		case string(o.t.Args) == "late":
			created++
			if got, err := s.Get(ctx, o.t.ID); err != nil || string(got.Args) != "late" {
				t.Errorf("late create: stored %+v, %v", got, err)
			}
		}
	}
	if created != 1 || begun != 1 || refused != 1 {
		t.Errorf("late writes: %d created, %d begun, %d refused; want 1 each", created, begun, refused)
	}
}
