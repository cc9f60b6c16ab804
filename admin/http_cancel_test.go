package admin_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestHandler_CancelOne: POST tasks/{id}/cancel cancels a live task (the
// enqueue role may), names the token in the event log, answers 409 with
// the state for a finished task and 404 for an unknown or out-of-scope
// one; the read role may not; cross-site requests are refused.
func TestHandler_CancelOne(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	later := e.enqueue(greetArgs{Name: "later"}, &switchyard.EnqueueOpts{Delay: time.Hour})
	if r := e.call("POST", "tasks/"+later+"/cancel", readSecret, map[string]string{"reason": "x"}, nil); r.status != http.StatusForbidden {
		t.Fatalf("cancel with the read role: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "tasks/"+later+"/cancel", enqueueSecret, map[string]string{"reason": "x"}, map[string]string{"Sec-Fetch-Site": "cross-site"}); r.status != http.StatusForbidden {
		t.Fatalf("cross-site cancel: %d %s", r.status, r.body)
	}
	// acme's admin token cannot see a task of tenant "".
	if r := e.call("POST", "tasks/"+later+"/cancel", acmeSecret, nil, nil); r.status != http.StatusNotFound {
		t.Fatalf("out-of-scope cancel: %d %s", r.status, r.body)
	}
	if tk, _ := e.L.Get(e.ctx, later); tk.State != ledger.Queued {
		t.Fatalf("a refused cancel changed the task: %s", tk.State)
	}
	r := e.call("POST", "tasks/"+later+"/cancel", enqueueSecret, map[string]string{"reason": "plans changed"}, nil)
	if r.status != http.StatusOK || r.json(t)["state"] != "cancelled" {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	evs, _ := e.L.Events(e.ctx, later)
	if last := evs[len(evs)-1]; last.To != ledger.Cancelled || last.Actor != "token:producer" || last.Detail != "plans changed" {
		t.Fatalf("event %+v", last)
	}
	r = e.call("POST", "tasks/"+later+"/cancel", enqueueSecret, nil, nil)
	if r.status != http.StatusConflict || !strings.Contains(r.errText(t), "cancelled") {
		t.Fatalf("second cancel: %d %s, want 409 naming the state", r.status, r.body)
	}
	if r := e.call("POST", "tasks/no-such-task/cancel", adminSecret, nil, nil); r.status != http.StatusNotFound {
		t.Fatalf("cancel of an unknown task: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "tasks/"+later+"/cancel", adminSecret, `{"reason": 5}`, nil); r.status != http.StatusBadRequest {
		t.Fatalf("bad body: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "tasks/"+later+"/cancel", adminSecret, map[string]string{"reason": strings.Repeat("r", switchyard.MaxCancelReason+1)}, nil); r.status != http.StatusBadRequest {
		t.Fatalf("oversized reason: %d %s", r.status, r.body)
	}
}

// TestHandler_Result: GET tasks/{id}/result gives the state and, once
// completed, the result; 404 for unknown or out-of-scope tasks.
func TestHandler_Result(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	id := e.enqueue(greetArgs{Name: "ann"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	e.waitState(id, ledger.Completed)
	r := e.call("GET", "tasks/"+id+"/result", readSecret, nil, nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"result":{"greeting":"hello ann"}`) || r.json(t)["done"] != true {
		t.Fatalf("result: %d %s", r.status, r.body)
	}
	later := e.enqueue(greetArgs{Name: "later"}, &switchyard.EnqueueOpts{Delay: time.Hour})
	r = e.call("GET", "tasks/"+later+"/result", enqueueSecret, nil, nil)
	if r.status != http.StatusOK || r.json(t)["done"] != false || r.json(t)["state"] != "queued" {
		t.Fatalf("result of a queued task: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "tasks/"+id+"/result", globexSecret, nil, nil); r.status != http.StatusNotFound {
		t.Fatalf("out-of-scope result: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "tasks/nope/result", adminSecret, nil, nil); r.status != http.StatusNotFound {
		t.Fatalf("unknown result: %d %s", r.status, r.body)
	}
}

// TestHandler_CancelBulk: a dry run lists what a filter (kind, lane,
// tenant, metadata) selects and changes nothing; the same body without
// dry_run cancels exactly those; an empty selection is refused.
func TestHandler_CancelBulk(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	var batch []string
	for i := 0; i < 3; i++ {
		batch = append(batch, e.enqueue(greetArgs{Name: "b"}, &switchyard.EnqueueOpts{Delay: time.Hour, Metadata: map[string]string{"campaign": "spring"}}))
	}
	other := e.enqueue(greetArgs{Name: "o"}, &switchyard.EnqueueOpts{Delay: time.Hour, Metadata: map[string]string{"campaign": "fall"}})
	acme := e.enqueue(greetArgs{Name: "a"}, &switchyard.EnqueueOpts{Delay: time.Hour, Tenant: "acme", Metadata: map[string]string{"campaign": "spring"}})
	body := map[string]any{"filter": map[string]any{"kind": "test.greet", "metadata": map[string]string{"campaign": "spring"}}, "dry_run": true, "reason": "campaign stopped"}
	if r := e.call("POST", "tasks/cancel", enqueueSecret, body, nil); r.status != http.StatusForbidden {
		t.Fatalf("bulk cancel with the enqueue role: %d", r.status)
	}
	r := e.call("POST", "tasks/cancel", adminSecret, body, nil)
	if r.status != http.StatusOK || strings.Count(string(r.body), `"id"`) != 4 {
		t.Fatalf("dry run: %d %s, want the 4 spring tasks", r.status, r.body)
	}
	// The acme-scoped token previews only acme's.
	r = e.call("POST", "tasks/cancel", acmeSecret, body, nil)
	if r.status != http.StatusOK || strings.Count(string(r.body), `"id"`) != 1 || !strings.Contains(string(r.body), acme) {
		t.Fatalf("scoped dry run: %d %s", r.status, r.body)
	}
	for _, id := range append(batch, other, acme) {
		if tk, _ := e.L.Get(e.ctx, id); tk.State != ledger.Queued {
			t.Fatalf("a dry run changed %s: %s", id, tk.State)
		}
	}
	if r := e.call("POST", "tasks/cancel", adminSecret, map[string]any{"filter": map[string]any{}}, nil); r.status != http.StatusBadRequest {
		t.Fatalf("cancel everything: %d %s, want 400", r.status, r.body)
	}
	if r := e.call("POST", "tasks/cancel", adminSecret, map[string]any{"ids": []string{""}}, nil); r.status != http.StatusBadRequest {
		t.Fatalf("empty id: %d %s, want 400", r.status, r.body)
	}
	if r := e.call("POST", "tasks/cancel", adminSecret, map[string]any{"filter": map[string]any{"kind": "bad kind!"}}, nil); r.status != http.StatusBadRequest {
		t.Fatalf("bad kind: %d %s, want 400", r.status, r.body)
	}
	r = e.call("POST", "tasks/cancel", adminSecret, map[string]any{"ids": batch, "reason": "campaign stopped"}, nil)
	if r.status != http.StatusOK || r.json(t)["done"] != float64(3) {
		t.Fatalf("cancel by ids: %d %s", r.status, r.body)
	}
	for _, id := range batch {
		tk, _ := e.L.Get(e.ctx, id)
		if tk.State != ledger.Cancelled || !strings.Contains(tk.LastError, "campaign stopped") {
			t.Fatalf("%s: %+v", id, tk)
		}
	}
	for _, id := range []string{other, acme} {
		if tk, _ := e.L.Get(e.ctx, id); tk.State != ledger.Queued {
			t.Fatalf("an unselected task was cancelled: %s %s", id, tk.State)
		}
	}
}
