package admin_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestHandler_TasksCursorScope: a tenant-scoped token cannot tell another
// tenant's task IDs from missing ones through the paging cursor: both
// answer the same status and body.
func TestHandler_TasksCursorScope(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	acme := e.enqueue(refundArgs{Order: "o-1", Amount: 1}, &switchyard.EnqueueOpts{Lane: "batch", Tenant: "acme"})
	globex := e.enqueue(refundArgs{Order: "o-2", Amount: 2}, &switchyard.EnqueueOpts{Lane: "batch", Tenant: "globex"})

	// The token's own tenant pages as usual; the unscoped token sees all.
	if r := e.call("GET", "tasks?after="+url.QueryEscape(globex), globexSecret, nil, nil); r.status != http.StatusOK {
		t.Errorf("globex token, its own task as cursor: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "tasks?after="+url.QueryEscape(acme), readSecret, nil, nil); r.status != http.StatusOK {
		t.Errorf("unscoped token, acme's task as cursor: %d %s", r.status, r.body)
	}

	missing := broker.NewID()
	other := e.call("GET", "tasks?after="+url.QueryEscape(acme), globexSecret, nil, nil)
	none := e.call("GET", "tasks?after="+url.QueryEscape(missing), globexSecret, nil, nil)
	if other.status != http.StatusNotFound || none.status != http.StatusNotFound ||
		!bytes.Equal(other.body, none.body) {
		t.Errorf("globex token, cursor in acme: %d %s; cursor naming no task: %d %s; want the same 404", other.status, other.body, none.status, none.body)
	}
	// The same through a tenant filter naming the token's own tenant.
	other = e.call("GET", "tasks?tenant=globex&after="+url.QueryEscape(acme), globexSecret, nil, nil)
	none = e.call("GET", "tasks?tenant=globex&after="+url.QueryEscape(missing), globexSecret, nil, nil)
	if other.status != none.status || !bytes.Equal(other.body, none.body) {
		t.Errorf("with tenant=globex: cursor in acme: %d %s; cursor naming no task: %d %s", other.status, other.body, none.status, none.body)
	}
	// And through Ops: the same error.
	_, errOther := e.ops.Tasks(e.ctx, admin.Scope{Tenant: "globex"}, admin.TaskFilter{After: acme})
	_, errNone := e.ops.Tasks(e.ctx, admin.Scope{Tenant: "globex"}, admin.TaskFilter{After: missing})
	if !errors.Is(errOther, ledger.ErrNotFound) || errOther.Error() != strings.ReplaceAll(errNone.Error(), missing, acme) {
		t.Errorf("Ops.Tasks: cursor in acme: %v; cursor naming no task: %v", errOther, errNone)
	}
}
