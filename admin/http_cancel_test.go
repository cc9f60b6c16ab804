package admin_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestHandler_CancelOne: POST tasks/{id}/cancel cancels a live task (the
// enqueue role may), names the token in the event log, answers 409 with
// the state for a finished task and 404 for an unknown or out-of-scope
// one; the read role may not; cross-site requests are refused.
func TestHandler_CancelOne(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	later := e.Enqueue(admintest.GreetArgs{Name: "later"}, &switchyard.EnqueueOpts{Delay: time.Hour})
	if r := e.Call("POST", "tasks/"+later+"/cancel", admintest.ReadSecret, map[string]string{"reason": "x"}, nil); r.Status != http.StatusForbidden {
		t.Fatalf("cancel with the read role: %d %s", r.Status, r.Body)
	}
	if r := e.Call("POST", "tasks/"+later+"/cancel", admintest.EnqueueSecret, map[string]string{"reason": "x"}, map[string]string{"Sec-Fetch-Site": "cross-site"}); r.Status != http.StatusForbidden {
		t.Fatalf("cross-site cancel: %d %s", r.Status, r.Body)
	}
	// acme's admin token cannot see a task of tenant "".
	if r := e.Call("POST", "tasks/"+later+"/cancel", admintest.AcmeSecret, nil, nil); r.Status != http.StatusNotFound {
		t.Fatalf("out-of-scope cancel: %d %s", r.Status, r.Body)
	}
	if tk, _ := e.L.Get(e.Ctx, later); tk.State != ledger.Queued {
		t.Fatalf("a refused cancel changed the task: %s", tk.State)
	}
	r := e.Call("POST", "tasks/"+later+"/cancel", admintest.EnqueueSecret, map[string]string{"reason": "plans changed"}, nil)
	if r.Status != http.StatusOK || r.JSON(t)["state"] != "cancelled" {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	evs, _ := e.L.Events(e.Ctx, later)
	if last := evs[len(evs)-1]; last.To != ledger.Cancelled || last.Actor != "token:producer" || last.Detail != "plans changed" {
		t.Fatalf("event %+v", last)
	}
	r = e.Call("POST", "tasks/"+later+"/cancel", admintest.EnqueueSecret, nil, nil)
	if r.Status != http.StatusConflict || !strings.Contains(r.ErrText(t), "cancelled") {
		t.Fatalf("second cancel: %d %s, want 409 naming the state", r.Status, r.Body)
	}
	if r := e.Call("POST", "tasks/no-such-task/cancel", admintest.AdminSecret, nil, nil); r.Status != http.StatusNotFound {
		t.Fatalf("cancel of an unknown task: %d %s", r.Status, r.Body)
	}
	if r := e.Call("POST", "tasks/"+later+"/cancel", admintest.AdminSecret, `{"reason": 5}`, nil); r.Status != http.StatusBadRequest {
		t.Fatalf("bad body: %d %s", r.Status, r.Body)
	}
	if r := e.Call("POST", "tasks/"+later+"/cancel", admintest.AdminSecret, map[string]string{"reason": strings.Repeat("r", switchyard.MaxCancelReason+1)}, nil); r.Status != http.StatusBadRequest {
		t.Fatalf("oversized reason: %d %s", r.Status, r.Body)
	}
}

// TestHandler_Result: GET tasks/{id}/result gives the state and, once
// completed, the result; 404 for unknown or out-of-scope tasks.
func TestHandler_Result(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	id := e.Enqueue(admintest.GreetArgs{Name: "ann"}, &switchyard.EnqueueOpts{Lane: "interactive"})
	e.WaitState(id, ledger.Completed)
	r := e.Call("GET", "tasks/"+id+"/result", admintest.ReadSecret, nil, nil)
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"result":{"greeting":"hello ann"}`) || r.JSON(t)["done"] != true {
		t.Fatalf("result: %d %s", r.Status, r.Body)
	}
	later := e.Enqueue(admintest.GreetArgs{Name: "later"}, &switchyard.EnqueueOpts{Delay: time.Hour})
	r = e.Call("GET", "tasks/"+later+"/result", admintest.EnqueueSecret, nil, nil)
	if r.Status != http.StatusOK || r.JSON(t)["done"] != false || r.JSON(t)["state"] != "queued" {
		t.Fatalf("result of a queued task: %d %s", r.Status, r.Body)
	}
	if r := e.Call("GET", "tasks/"+id+"/result", admintest.GlobexSecret, nil, nil); r.Status != http.StatusNotFound {
		t.Fatalf("out-of-scope result: %d %s", r.Status, r.Body)
	}
	if r := e.Call("GET", "tasks/nope/result", admintest.AdminSecret, nil, nil); r.Status != http.StatusNotFound {
		t.Fatalf("unknown result: %d %s", r.Status, r.Body)
	}
}

// TestHandler_CancelBulk: a dry run lists what a filter (kind, lane,
// tenant, metadata) selects and changes nothing; the same body without
// dry_run cancels exactly those; an empty selection is refused.
func TestHandler_CancelBulk(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	var batch []string
	for i := 0; i < 3; i++ {
		batch = append(batch, e.Enqueue(admintest.GreetArgs{Name: "b"}, &switchyard.EnqueueOpts{Delay: time.Hour, Metadata: map[string]string{"campaign": "spring"}}))
	}
	other := e.Enqueue(admintest.GreetArgs{Name: "o"}, &switchyard.EnqueueOpts{Delay: time.Hour, Metadata: map[string]string{"campaign": "fall"}})
	acme := e.Enqueue(admintest.GreetArgs{Name: "a"}, &switchyard.EnqueueOpts{Delay: time.Hour, Tenant: "acme", Metadata: map[string]string{"campaign": "spring"}})
	body := map[string]any{"filter": map[string]any{"kind": "test.greet", "metadata": map[string]string{"campaign": "spring"}}, "dry_run": true, "reason": "campaign stopped"}
	if r := e.Call("POST", "tasks/cancel", admintest.EnqueueSecret, body, nil); r.Status != http.StatusForbidden {
		t.Fatalf("bulk cancel with the enqueue role: %d", r.Status)
	}
	r := e.Call("POST", "tasks/cancel", admintest.AdminSecret, body, nil)
	if r.Status != http.StatusOK || strings.Count(string(r.Body), `"id"`) != 4 {
		t.Fatalf("dry run: %d %s, want the 4 spring tasks", r.Status, r.Body)
	}
	// The acme-scoped token previews only acme's.
	r = e.Call("POST", "tasks/cancel", admintest.AcmeSecret, body, nil)
	if r.Status != http.StatusOK || strings.Count(string(r.Body), `"id"`) != 1 || !strings.Contains(string(r.Body), acme) {
		t.Fatalf("scoped dry run: %d %s", r.Status, r.Body)
	}
	for _, id := range append(batch, other, acme) {
		if tk, _ := e.L.Get(e.Ctx, id); tk.State != ledger.Queued {
			t.Fatalf("a dry run changed %s: %s", id, tk.State)
		}
	}
	if r := e.Call("POST", "tasks/cancel", admintest.AdminSecret, map[string]any{"filter": map[string]any{}}, nil); r.Status != http.StatusBadRequest {
		t.Fatalf("cancel everything: %d %s, want 400", r.Status, r.Body)
	}
	if r := e.Call("POST", "tasks/cancel", admintest.AdminSecret, map[string]any{"ids": []string{""}}, nil); r.Status != http.StatusBadRequest {
		t.Fatalf("empty id: %d %s, want 400", r.Status, r.Body)
	}
	if r := e.Call("POST", "tasks/cancel", admintest.AdminSecret, map[string]any{"filter": map[string]any{"kind": "bad kind!"}}, nil); r.Status != http.StatusBadRequest {
		t.Fatalf("bad kind: %d %s, want 400", r.Status, r.Body)
	}
	r = e.Call("POST", "tasks/cancel", admintest.AdminSecret, map[string]any{"ids": batch, "reason": "campaign stopped"}, nil)
	if r.Status != http.StatusOK || r.JSON(t)["done"] != float64(3) {
		t.Fatalf("cancel by ids: %d %s", r.Status, r.Body)
	}
	for _, id := range batch {
		tk, _ := e.L.Get(e.Ctx, id)
		if tk.State != ledger.Cancelled || !strings.Contains(tk.LastError, "campaign stopped") {
			t.Fatalf("%s: %+v", id, tk)
		}
	}
	for _, id := range []string{other, acme} {
		if tk, _ := e.L.Get(e.Ctx, id); tk.State != ledger.Queued {
			t.Fatalf("an unselected task was cancelled: %s %s", id, tk.State)
		}
	}
}
