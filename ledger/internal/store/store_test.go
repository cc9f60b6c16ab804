package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

func TestTransition_From(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		from []ledger.State
		to   ledger.State
		want []ledger.State
	}{
		{nil, ledger.Running, []ledger.State{ledger.Queued, ledger.Running, ledger.RetryWait}},
		{[]ledger.State{ledger.RetryWait, ledger.Completed}, ledger.Running, []ledger.State{ledger.RetryWait}},
		{[]ledger.State{ledger.Completed}, ledger.Running, nil},
		{nil, ledger.Queued, []ledger.State{ledger.Running, ledger.RetryWait, ledger.Failed, ledger.Dead, ledger.AwaitingReview, ledger.AwaitingEvent}},
	} {
		req := ledger.TransitionRequest{ID: "t", From: c.from, To: c.to, Reason: "r"}
		got, err := Transition("op", &req)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Transition(from %v to %s) = %v %v, want %v", c.from, c.to, got, err, c.want)
		}
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	err := Conflict("op", "t1", ledger.Completed, ledger.Running)
	var ce *ledger.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ledger.ErrConflict) || !errors.Is(err, broker.ErrPermanent) || ce.Current != ledger.Completed {
		t.Errorf("Conflict: %v", err)
	}
	err = NotFound("op", "task %s", "t1")
	if !errors.Is(err, ledger.ErrNotFound) || !errors.Is(err, broker.ErrPermanent) || broker.ClassOf(err) != broker.Permanent {
		t.Errorf("NotFound: %v", err)
	}
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	ok := fstest.MapFS{"m/0002_b.sql": {Data: []byte("B")}, "m/0001_a.sql": {Data: []byte("A")}, "m/README": {}}
	ms, err := Migrations(ok, "m")
	if err != nil || len(ms) != 2 || ms[0].SQL != "A" || ms[1].Version != 2 {
		t.Fatalf("Migrations: %+v %v", ms, err)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"dup":     {"m/0001_a.sql": {}, "m/0001_b.sql": {}},
		"badname": {"m/first.sql": {}},
		"zero":    {"m/0000_a.sql": {}},
	} {
		if _, err := Migrations(fsys, "m"); err == nil {
			t.Errorf("Migrations %s: no error", name)
		}
	}
	// A gap is allowed; Pending applies what is not recorded, a gap filled
	// later included, and refuses a version it does not know.
	gap, err := Migrations(fstest.MapFS{"m/0001_a.sql": {}, "m/0003_c.sql": {}}, "m")
	if err != nil || len(gap) != 2 {
		t.Fatalf("Migrations with a gap: %+v %v", gap, err)
	}
	p, err := Pending(append(gap[:1:1], Migration{Version: 2, Name: "0002_b.sql"}, gap[1]), []int{1, 3})
	if err != nil || len(p) != 1 || p[0].Version != 2 {
		t.Fatalf("Pending with a filled gap: %+v %v", p, err)
	}
	if _, err := Pending(gap, []int{1, 4}); err == nil || !strings.Contains(err.Error(), "newer than this program") {
		t.Fatalf("Pending of a newer database: %v", err)
	}
}

// TestCreateTask_TimesNeverWrap: a run-at or deadline that int64 Unix
// nanoseconds cannot hold is refused, not stored wrapped (year 0001 came
// back as 1754, 9999 as 1816), and so is an attempt limit beyond
// broker.MaxAttemptsLimit.
func TestCreateTask_TimesNeverWrap(t *testing.T) {
	for name, tk := range map[string]*ledger.Task{
		"run-at 0001":   {Kind: "k", Lane: "batch", RunAt: time.Date(1, 6, 1, 0, 0, 0, 0, time.UTC)},
		"deadline 9999": {Kind: "k", Lane: "batch", Deadline: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)},
		"run-at 2263":   {Kind: "k", Lane: "batch", RunAt: time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)},
		"3e9 attempts":  {Kind: "k", Lane: "batch", MaxAttempts: 3000000000},
	} {
		if _, err := CreateTask("create", tk, time.Now()); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: CreateTask = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := CreateTask("create", &ledger.Task{Kind: "k", Lane: "batch", RunAt: time.Now().Add(time.Hour)}, time.Now()); err != nil {
		t.Errorf("a valid task: %v", err)
	}
}
