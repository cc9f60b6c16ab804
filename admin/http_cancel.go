package admin

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/ledger"
)

// The task handle over HTTP: cancel one task, cancel by filter (preview
// first), read a result. Roles: cancelling one task and reading a result
// take the enqueue or admin role (and read for results: the status
// route's rule), bulk cancel the admin role; a tenant-scoped token sees
// and cancels its tenant's tasks only (another tenant's read as 404).

// cancelRoutes registers the routes of this file under v1.
func (h *handler) cancelRoutes(v1 string) {
	h.handle("POST "+v1+"tasks/{id}/cancel", accessEnqueue, h.cancelOne)
	h.handle("GET "+v1+"tasks/{id}/result", accessStatus, h.result)
	h.handle("POST "+v1+"tasks/cancel", accessAdmin, h.cancelBulk)
}

// cancelJSON is the body of POST tasks/{id}/cancel (optional).
type cancelJSON struct {
	Reason string `json:"reason"`
}

func (h *handler) cancelOne(r *http.Request, c *call) (int, any, error) {
	id := r.PathValue("id")
	var body cancelJSON
	if err := decodeBody(r, &body, true); err != nil {
		return 0, nil, err
	}
	c.note(slog.String("op", "cancel"), slog.String("id", id))
	t, err := h.ops.CancelTask(r.Context(), c.scope, id, body.Reason, c.who)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"id": t.ID, "state": t.State, "reason": body.Reason}, nil
}

// resultJSON is a task's result (switchyard.Result).
type resultJSON struct {
	ID        string       `json:"id"`
	State     ledger.State `json:"state"`
	Done      bool         `json:"done"`
	Result    any          `json:"result"`
	Error     string       `json:"error,omitempty"`
	UpdatedAt *time.Time   `json:"updated_at,omitempty"`
}

func resultOut(res *switchyard.Result) resultJSON {
	out := resultJSON{ID: res.ID, State: res.State, Done: res.Done, Error: res.Error, UpdatedAt: tp(res.UpdatedAt)}
	if p := payload(res.Value); p != nil {
		out.Result = p
	}
	return out
}

func (h *handler) result(r *http.Request, c *call) (int, any, error) {
	res, err := h.ops.Result(r.Context(), c.scope, r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resultOut(res), nil
}

// cancelBulkJSON is the body of POST tasks/cancel: ids or a filter,
// dry_run to preview.
type cancelBulkJSON struct {
	IDs    []string `json:"ids"`
	Filter *struct {
		Kind     string            `json:"kind"`
		Lane     string            `json:"lane"`
		Tenant   string            `json:"tenant"`
		Metadata map[string]string `json:"metadata"`
	} `json:"filter"`
	Reason string `json:"reason"`
	Max    int    `json:"max"`
	DryRun bool   `json:"dry_run"`
}

func (h *handler) cancelBulk(r *http.Request, c *call) (int, any, error) {
	var b cancelBulkJSON
	if err := decodeBody(r, &b, false); err != nil {
		return 0, nil, err
	}
	for _, id := range b.IDs {
		if strings.TrimSpace(id) == "" {
			return 0, nil, badRequest("ids must not contain empty strings")
		}
	}
	if b.IDs == nil && b.Filter == nil {
		return 0, nil, badRequest("give ids ([...]) or a filter ({kind, lane, tenant, metadata}); dry_run previews")
	}
	if b.IDs != nil && len(b.IDs) == 0 && b.Filter == nil {
		return 0, nil, badRequest("ids is empty")
	}
	if len(b.IDs) == 0 && !b.DryRun && (b.Filter == nil || b.Filter.Kind == "" && b.Filter.Lane == "" && b.Filter.Tenant == "" && len(b.Filter.Metadata) == 0) && c.scope.Tenant == "" {
		return 0, nil, badRequest("refusing to cancel every live task: give ids or a non-empty filter")
	}
	if b.Max < 0 {
		return 0, nil, badRequest("max must not be negative")
	}
	f := CancelFilter{IDs: b.IDs, Max: b.Max}
	if b.Filter != nil {
		f.Kind, f.Lane, f.Tenant, f.Metadata = b.Filter.Kind, b.Filter.Lane, b.Filter.Tenant, b.Filter.Metadata
	}
	c.note(slog.String("op", "cancel"), slog.Bool("dry_run", b.DryRun), slog.Int("ids", len(b.IDs)), slog.String("filter_lane", f.Lane),
		slog.String("filter_kind", f.Kind), slog.String("filter_tenant", f.Tenant), slog.Int("filter_metadata", len(f.Metadata)))
	if b.DryRun {
		limit := 1000
		if b.Max > 0 {
			limit = min(b.Max, 1000)
		}
		ts, truncated, err := h.ops.CancelPreview(r.Context(), c.scope, f, limit)
		if err != nil {
			return 0, nil, err
		}
		out := make([]taskJSON, 0, len(ts))
		for _, t := range ts {
			out = append(out, taskOut(t, false))
		}
		return http.StatusOK, map[string]any{"dry_run": true, "tasks": out, "truncated": truncated}, nil
	}
	rep, err := h.ops.CancelTasks(r.Context(), c.scope, f, b.Reason, c.who, nil)
	if err != nil {
		return 0, nil, err
	}
	c.note(slog.Int("done", rep.Done), slog.Int("failed", len(rep.Failed)))
	return http.StatusOK, reportOut(rep), nil
}
