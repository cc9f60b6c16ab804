package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/ledger"
)

type batchAnswer struct {
	Accepted int `json:"accepted"`
	Rejected int `json:"rejected"`
	Results  []struct {
		Index     int          `json:"index"`
		Status    int          `json:"status"`
		ID        string       `json:"id"`
		State     ledger.State `json:"state"`
		Duplicate bool         `json:"duplicate"`
		StatusURL string       `json:"status_url"`
		Error     string       `json:"error"`
	} `json:"results"`
}

func (e *testEnv) batch(token string, body any) (resp, batchAnswer) {
	e.t.Helper()
	r := e.call("POST", "tasks:batch", token, body, nil)
	var a batchAnswer
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &a); err != nil {
			e.t.Fatalf("batch answer %s: %v", r.body, err)
		}
	}
	return r, a
}

// TestHandler_IngestBatch: a batch is enqueued with a result per task —
// 202 with the task, or the task's own 4xx (invalid, no key, a key reused
// for another request, inside the batch too) while the others go in; the
// same batch again gives the same tasks; a batch over the limit, empty or
// not JSON is refused whole and enqueues nothing; roles and tenants are
// the single endpoint's.
func TestHandler_IngestBatch(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	greet := func(name, key string) map[string]any {
		return map[string]any{"kind": "test.greet", "args": map[string]string{"name": name}, "idempotency_key": key}
	}
	body := map[string]any{"tasks": []any{
		greet("ada", "b-1"),
		greet("bob", "b-2"),
		map[string]any{"kind": "test.greet", "args": map[string]string{}, "idempotency_key": "b-3"}, // fails validation
		map[string]any{"kind": "test.greet", "args": map[string]string{"name": "x"}},                // no key
		greet("ada", "b-1"),   // the first again: the same task
		greet("other", "b-2"), // b-2 for another request: 422
		map[string]any{"kind": "test.greet", "args": map[string]string{"name": "d"}, "idempotency_key": "b-4", "delay_ms": -1},
	}}
	r, a := e.batch(enqueueSecret, body)
	if r.status != http.StatusOK || len(a.Results) != 7 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	want := []int{202, 202, 400, 400, 202, 422, 400}
	for i, res := range a.Results {
		if res.Index != i || res.Status != want[i] {
			t.Errorf("task %d: %+v, want status %d", i, res, want[i])
		}
	}
	if a.Accepted != 3 || a.Rejected != 4 {
		t.Errorf("accepted %d rejected %d, want 3 and 4", a.Accepted, a.Rejected)
	}
	first := a.Results[0]
	if first.ID == "" || first.Duplicate || first.State != ledger.Queued || first.StatusURL != "/api/v1/tasks/"+first.ID+"/status" {
		t.Errorf("first result %+v", first)
	}
	if a.Results[4].ID != first.ID || !a.Results[4].Duplicate {
		t.Errorf("repeat in the batch: %+v, want task %s as a duplicate", a.Results[4], first.ID)
	}
	if !strings.Contains(a.Results[2].Error, "name is required") || !strings.Contains(a.Results[3].Error, "idempotency_key is required") ||
		!strings.Contains(a.Results[5].Error, "Idempotency-Key") || !strings.Contains(a.Results[6].Error, "delay_ms") {
		t.Errorf("errors: %q %q %q %q", a.Results[2].Error, a.Results[3].Error, a.Results[5].Error, a.Results[6].Error)
	}
	e.waitState(first.ID, ledger.Completed)
	e.waitState(a.Results[1].ID, ledger.Completed)
	if n, _ := e.totals(); n != 2 {
		t.Fatalf("%d tasks in the ledger, want 2", n)
	}
	// The status URL works.
	if st := e.call("GET", "tasks/"+first.ID+"/status", enqueueSecret, nil, nil); st.status != http.StatusOK {
		t.Errorf("status: %d %s", st.status, st.body)
	}
	// The same batch again: the same tasks, as duplicates.
	_, again := e.batch(enqueueSecret, body)
	if again.Results[0].ID != first.ID || !again.Results[0].Duplicate || again.Results[1].ID != a.Results[1].ID || !again.Results[1].Duplicate {
		t.Errorf("the batch again: %+v", again.Results[:2])
	}

	// Refused whole: over the limit (named), empty, not JSON, unknown field.
	over := make([]any, admin.MaxBatchTasks+1)
	for i := range over {
		over[i] = greet("n", fmt.Sprintf("over-%d", i))
	}
	for name, c := range map[string]struct {
		body any
		want string
	}{
		"over the limit": {map[string]any{"tasks": over}, fmt.Sprintf("limit of %d tasks per batch (admin.MaxBatchTasks)", admin.MaxBatchTasks)},
		"empty":          {`{"tasks": []}`, "no tasks"},
		"not JSON":       {`{"tasks": [`, "truncated"},
		"unknown field":  {`{"tasks": [{"kind": "test.greet", "idempotency_key": "u", "colour": "red"}]}`, `unknown field "colour"`},
	} {
		r, _ := e.batch(enqueueSecret, c.body)
		if r.status != http.StatusBadRequest || !strings.Contains(r.errText(t), c.want) {
			t.Errorf("%s: %d %s, want 400 mentioning %q", name, r.status, r.body, c.want)
		}
	}
	if n, _ := e.totals(); n != 2 {
		t.Fatalf("%d tasks in the ledger after the refused batches, want 2", n)
	}

	// Roles and tenants: a read token cannot; a tenant-scoped token's
	// tasks are its tenant's, and naming another tenant fails that task.
	if r, _ := e.batch(readSecret, body); r.status != http.StatusForbidden {
		t.Errorf("read token: %d %s, want 403", r.status, r.body)
	}
	_, ta := e.batch(acmeSecret, map[string]any{"tasks": []any{
		greet("acme", "t-1"),
		map[string]any{"kind": "test.greet", "args": map[string]string{"name": "g"}, "idempotency_key": "t-2", "tenant": "globex"},
	}})
	if len(ta.Results) != 2 || ta.Results[0].Status != 202 || ta.Results[1].Status != 400 {
		t.Fatalf("tenant batch: %+v", ta)
	}
	tk := e.waitState(ta.Results[0].ID, ledger.Completed)
	if tk.Tenant != "acme" {
		t.Errorf("tenant %q, want acme", tk.Tenant)
	}
	evs, err := e.L.Events(e.ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	submitted := false
	for _, ev := range evs {
		if ev.Reason == "submitted" && strings.Contains(ev.Actor, "acme-admin") {
			submitted = true
		}
	}
	if !submitted {
		t.Errorf("no submitted event naming the token: %+v", evs)
	}
}
