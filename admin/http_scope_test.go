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
	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// TestHandler_TasksCursorScope: a tenant-scoped token cannot tell another
// tenant's task IDs from missing ones through the paging cursor: both
// answer the same status and body.
func TestHandler_TasksCursorScope(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	acme := e.Enqueue(admintest.RefundArgs{Order: "o-1", Amount: 1}, &switchyard.EnqueueOpts{Lane: "batch", Tenant: "acme"})
	globex := e.Enqueue(admintest.RefundArgs{Order: "o-2", Amount: 2}, &switchyard.EnqueueOpts{Lane: "batch", Tenant: "globex"})

	// The token's own tenant pages as usual; the unscoped token sees all.
	if r := e.Call("GET", "tasks?after="+url.QueryEscape(globex), admintest.GlobexSecret, nil, nil); r.Status != http.StatusOK {
		t.Errorf("globex token, its own task as cursor: %d %s", r.Status, r.Body)
	}
	if r := e.Call("GET", "tasks?after="+url.QueryEscape(acme), admintest.ReadSecret, nil, nil); r.Status != http.StatusOK {
		t.Errorf("unscoped token, acme's task as cursor: %d %s", r.Status, r.Body)
	}

	missing := broker.NewID()
	other := e.Call("GET", "tasks?after="+url.QueryEscape(acme), admintest.GlobexSecret, nil, nil)
	none := e.Call("GET", "tasks?after="+url.QueryEscape(missing), admintest.GlobexSecret, nil, nil)
	if other.Status != http.StatusNotFound || none.Status != http.StatusNotFound ||
		!bytes.Equal(other.Body, none.Body) {
		t.Errorf("globex token, cursor in acme: %d %s; cursor naming no task: %d %s; want the same 404", other.Status, other.Body, none.Status, none.Body)
	}
	// The same through a tenant filter naming the token's own tenant.
	other = e.Call("GET", "tasks?tenant=globex&after="+url.QueryEscape(acme), admintest.GlobexSecret, nil, nil)
	none = e.Call("GET", "tasks?tenant=globex&after="+url.QueryEscape(missing), admintest.GlobexSecret, nil, nil)
	if other.Status != none.Status || !bytes.Equal(other.Body, none.Body) {
		t.Errorf("with tenant=globex: cursor in acme: %d %s; cursor naming no task: %d %s", other.Status, other.Body, none.Status, none.Body)
	}
	// And through Ops: the same error.
	_, errOther := e.Ops.Tasks(e.Ctx, admin.Scope{Tenant: "globex"}, admin.TaskFilter{After: acme})
	_, errNone := e.Ops.Tasks(e.Ctx, admin.Scope{Tenant: "globex"}, admin.TaskFilter{After: missing})
	if !errors.Is(errOther, ledger.ErrNotFound) || errOther.Error() != strings.ReplaceAll(errNone.Error(), missing, acme) {
		t.Errorf("Ops.Tasks: cursor in acme: %v; cursor naming no task: %v", errOther, errNone)
	}
}
