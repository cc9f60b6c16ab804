package admin_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestHandler_IngestBatch: a batch is enqueued with a result per task —
// 202 with the task, or the task's own 4xx (invalid, no key, a key reused
// for another request, inside the batch too) while the others go in; the
// same batch again gives the same tasks; a batch over the limit, empty or
// not JSON is refused whole and enqueues nothing; roles and tenants are
// the single endpoint's.
func TestHandler_IngestBatch(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
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
	r, a := e.Batch(admintest.EnqueueSecret, body)
	if r.Status != http.StatusOK || len(a.Results) != 7 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
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
	e.WaitState(first.ID, ledger.Completed)
	e.WaitState(a.Results[1].ID, ledger.Completed)
	if n, _ := e.Totals(); n != 2 {
		t.Fatalf("%d tasks in the ledger, want 2", n)
	}
	// The status URL works.
	if st := e.Call("GET", "tasks/"+first.ID+"/status", admintest.EnqueueSecret, nil, nil); st.Status != http.StatusOK {
		t.Errorf("status: %d %s", st.Status, st.Body)
	}
	// The same batch again: the same tasks, as duplicates.
	_, again := e.Batch(admintest.EnqueueSecret, body)
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
		r, _ := e.Batch(admintest.EnqueueSecret, c.body)
		if r.Status != http.StatusBadRequest || !strings.Contains(r.ErrText(t), c.want) {
			t.Errorf("%s: %d %s, want 400 mentioning %q", name, r.Status, r.Body, c.want)
		}
	}
	if n, _ := e.Totals(); n != 2 {
		t.Fatalf("%d tasks in the ledger after the refused batches, want 2", n)
	}

	// Roles and tenants: a read token cannot; a tenant-scoped token's
	// tasks are its tenant's, and naming another tenant fails that task.
	if r, _ := e.Batch(admintest.ReadSecret, body); r.Status != http.StatusForbidden {
		t.Errorf("read token: %d %s, want 403", r.Status, r.Body)
	}
	_, ta := e.Batch(admintest.AcmeSecret, map[string]any{"tasks": []any{
		greet("acme", "t-1"),
		map[string]any{"kind": "test.greet", "args": map[string]string{"name": "g"}, "idempotency_key": "t-2", "tenant": "globex"},
	}})
	if len(ta.Results) != 2 || ta.Results[0].Status != 202 || ta.Results[1].Status != 400 {
		t.Fatalf("tenant batch: %+v", ta)
	}
	tk := e.WaitState(ta.Results[0].ID, ledger.Completed)
	if tk.Tenant != "acme" {
		t.Errorf("tenant %q, want acme", tk.Tenant)
	}
	evs, err := e.L.Events(e.Ctx, tk.ID)
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
