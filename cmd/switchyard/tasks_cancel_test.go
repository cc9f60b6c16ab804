package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/ledger"
)

// TestCLI_TasksCancel: cancel by filter asks first (no → nothing changes),
// then cancels exactly the tasks it listed — not one enqueued while it
// asked; by --id; bad input is an error that changes nothing; result
// shows a task's state and result.
func TestCLI_TasksCancel(t *testing.T) {
	e := newOpsEnv(t)
	a := e.enqueue("batch", "acme", `{"doc":"a"}`)
	b := e.enqueue("batch", "acme", `{"doc":"b"}`)
	g := e.enqueue("batch", "globex", `{"doc":"g"}`)
	common := []string{"--broker", e.url, "--ledger", e.dsn}

	old := stdin
	t.Cleanup(func() { stdin = old })
	stdin = strings.NewReader("n\n")
	expectFail(t, 1, "not confirmed", append([]string{"tasks", "cancel", "--tenant", "acme"}, common...)...)
	if e.state(a) != ledger.Queued || e.state(b) != ledger.Queued {
		t.Fatal("an unconfirmed cancel changed the ledger")
	}
	var late string
	stdin = &onRead{r: strings.NewReader("y\n"), fn: func() { late = e.enqueue("batch", "acme", `{"doc":"late"}`) }}
	code, out, errs := runCLI(t, append([]string{"tasks", "cancel", "--tenant", "acme", "--reason", "wrong batch", "--actor", "operator:ann"}, common...)...)
	if code != 0 || !strings.Contains(out, "cancelled 2 task(s)") || !strings.Contains(errs, "cancel these 2 tasks?") {
		t.Fatalf("tasks cancel: %d\n%s%s", code, out, errs)
	}
	for id, want := range map[string]ledger.State{a: ledger.Cancelled, b: ledger.Cancelled, g: ledger.Queued, late: ledger.Queued} {
		if got := e.state(id); got != want {
			t.Errorf("task %s is %s, want %s", id, got, want)
		}
	}
	evs, _ := e.L.Events(e.ctx, a)
	if last := evs[len(evs)-1]; last.Actor != "operator:ann" || last.Detail != "wrong batch" {
		t.Errorf("event %+v", last)
	}
	var rep struct {
		Done   int
		Failed []any
	}
	code, out, _ = runCLI(t, append([]string{"tasks", "cancel", "--id", g, "--yes", "--json"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Done != 1 {
		t.Fatalf("tasks cancel --id --json: %d %s", code, out)
	}
	before := e.tasks()
	expectFail(t, 1, "no live task", append([]string{"tasks", "cancel", "--id", a, "--yes"}, common...)...) // already cancelled
	expectFail(t, 1, "no live task", append([]string{"tasks", "cancel", "--id", "nosuch", "--yes"}, common...)...)
	expectFail(t, 2, "refusing to cancel every live task", append([]string{"tasks", "cancel", "--yes"}, common...)...)
	expectFail(t, 1, "KEY=VALUE", append([]string{"tasks", "cancel", "--meta", "novalue", "--yes"}, common...)...)
	expectFail(t, 1, "kind", append([]string{"tasks", "cancel", "--kind", "bad kind!", "--yes"}, common...)...)
	if e.tasks() != before || e.state(late) != ledger.Queued {
		t.Error("bad input changed the ledger")
	}

	// result: a cancelled task, and a completed one with its result.
	code, out, _ = runCLI(t, append([]string{"tasks", "result", a}, common...)...)
	if code != 0 || !strings.Contains(out, "cancelled") || !strings.Contains(out, "wrong batch") {
		t.Fatalf("tasks result: %d %s", code, out)
	}
	if _, err := e.L.Transition(e.ctx, ledger.TransitionRequest{ID: late, To: ledger.Running, Reason: "attempt_started"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.L.Transition(e.ctx, ledger.TransitionRequest{ID: late, To: ledger.Completed, Reason: "completed", Result: []byte(`{"pages":3}`)}); err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	code, out, _ = runCLI(t, append([]string{"tasks", "result", late, "--wait", "--json"}, common...)...)
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res["state"] != "completed" || res["result"].(map[string]any)["pages"] != float64(3) {
		t.Fatalf("tasks result --json: %d %s", code, out)
	}
	expectFail(t, 1, "not found", append([]string{"tasks", "result", "nosuch"}, common...)...)
}
