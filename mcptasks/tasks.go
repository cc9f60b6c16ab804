package mcptasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// MCP task statuses.
const (
	StatusWorking       = "working"
	StatusInputRequired = "input_required"
	StatusCompleted     = "completed"
	StatusFailed        = "failed"
	StatusCancelled     = "cancelled"
)

// Status maps a ledger state to the MCP task status.
func Status(s ledger.State) string {
	switch s {
	case ledger.AwaitingReview, ledger.AwaitingEvent:
		return StatusInputRequired
	case ledger.Completed:
		return StatusCompleted
	case ledger.Failed, ledger.Dead, ledger.Rejected:
		return StatusFailed
	case ledger.Cancelled:
		return StatusCancelled
	}
	return StatusWorking
}

const relatedTask = "io.modelcontextprotocol/related-task"

func (h *handler) toolsList() any {
	names := make([]string, 0, len(h.tools))
	for n := range h.tools {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]map[string]any, 0, len(names))
	for _, n := range names {
		t := h.tools[n]
		m := map[string]any{"name": t.Name, "inputSchema": t.InputSchema, "execution": map[string]any{"taskSupport": t.TaskSupport}}
		if t.Description != "" {
			m["description"] = t.Description
		}
		out = append(out, m)
	}
	return map[string]any{"tools": out}
}

// rawArgs carries a tool call's arguments as the task's.
type rawArgs struct {
	kind string
	args json.RawMessage
}

func (a rawArgs) Kind() string                 { return a.kind }
func (a rawArgs) MarshalJSON() ([]byte, error) { return a.args, nil }

func (h *handler) toolsCall(ctx context.Context, tenant string, params json.RawMessage) (any, error) {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Task      *struct {
			TTL *int64 `json:"ttl"`
		} `json:"task"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, errorf(codeInvalidParams, "tools/call params: %v", err)
	}
	tool, ok := h.tools[p.Name]
	if !ok {
		return nil, errorf(codeInvalidParams, "unknown tool %q", p.Name)
	}
	if p.Task == nil && tool.TaskSupport == TaskRequired {
		return nil, errorf(codeMethodNotFound, "tool %q must be called as a task (execution.taskSupport is required): add params.task", p.Name)
	}
	args := p.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(args, &obj) != nil {
		return nil, errorf(codeInvalidParams, "tool %q: arguments must be a JSON object", p.Name)
	}
	res, err := h.cfg.Client.Enqueue(ctx, rawArgs{kind: tool.Kind, args: args}, &switchyard.EnqueueOpts{Lane: tool.Lane, Tenant: tenant})
	if err != nil {
		return nil, errorf(codeInvalidParams, "tool %q: the task was not enqueued: %v", p.Name, err)
	}
	t, err := h.cfg.Ledger.Get(ctx, res.ID)
	if err != nil {
		return nil, err
	}
	if p.Task == nil {
		// Optional task support, called plainly: answer when it is done
		// (or fail with the request).
		if t, err = h.waitTerminal(ctx, t.ID); err != nil {
			return nil, errorf(codeInternal, "waiting for task %s: %v", res.ID, err)
		}
		return h.callResult(t, false), nil
	}
	return map[string]any{
		"task": h.taskOut(ctx, t),
		"_meta": map[string]any{
			"io.modelcontextprotocol/model-immediate-response": fmt.Sprintf("Started task %s; its result comes with tasks/result.", t.ID),
		},
	}, nil
}

// task reads the task named by params.taskId, in scope.
func (h *handler) task(ctx context.Context, tenant string, params json.RawMessage) (*ledger.Task, error) {
	var p struct {
		TaskID string `json:"taskId"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.TaskID == "" {
		return nil, errorf(codeInvalidParams, "params.taskId is required")
	}
	t, err := h.cfg.Ledger.Get(ctx, p.TaskID)
	if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, broker.ErrInvalid) || err == nil && !h.visible(tenant, t) {
		return nil, errorf(codeInvalidParams, "Failed to retrieve task: Task not found")
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (h *handler) visible(tenant string, t *ledger.Task) bool {
	return h.kinds[t.Kind] && (h.cfg.Tenant == nil || t.Tenant == tenant)
}

// taskOut is the MCP Task object of t.
func (h *handler) taskOut(ctx context.Context, t *ledger.Task) map[string]any {
	out := map[string]any{
		"taskId":        t.ID,
		"status":        Status(t.State),
		"createdAt":     t.CreatedAt.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt": t.UpdatedAt.UTC().Format(time.RFC3339Nano),
		"ttl":           nil, // kept until the ledger prunes it (switchyard's retention)
		"pollInterval":  h.cfg.PollInterval.Milliseconds(),
	}
	if msg := h.statusMessage(ctx, t); msg != "" {
		out["statusMessage"] = msg
	}
	return out
}

func (h *handler) statusMessage(ctx context.Context, t *ledger.Task) string {
	switch t.State {
	case ledger.Running:
		if ps, err := h.cfg.Ledger.LatestProgress(ctx, []string{t.ID}); err == nil {
			if p, ok := ps[t.ID]; ok {
				return fmt.Sprintf("%.0f%% %s", p.Fraction*100, p.Message)
			}
		}
		return "running"
	case ledger.Queued:
		return "queued"
	case ledger.RetryWait:
		return "retrying after: " + t.LastError
	case ledger.AwaitingReview, ledger.AwaitingEvent:
		evs, err := h.cfg.Ledger.Events(ctx, t.ID)
		if err != nil {
			return string(t.State)
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].To != t.State {
				continue
			}
			var d struct{ Reason, Event string }
			_ = json.Unmarshal([]byte(evs[i].Detail), &d)
			if t.State == ledger.AwaitingReview {
				return "awaiting a reviewer's approval: " + d.Reason
			}
			return "awaiting event " + d.Event
		}
		return string(t.State)
	case ledger.Failed, ledger.Dead, ledger.Rejected, ledger.Cancelled:
		return t.LastError
	}
	return ""
}

// waitTerminal waits for task id to be terminal (Client.Wait: it wakes
// on the ledger's notes, not a polling loop) or for ctx to end.
func (h *handler) waitTerminal(ctx context.Context, id string) (*ledger.Task, error) {
	if _, err := h.cfg.Client.Wait(ctx, id); err != nil {
		return nil, err
	}
	return h.cfg.Ledger.Get(ctx, id)
}

// callResult is the CallToolResult of a terminal task.
func (h *handler) callResult(t *ledger.Task, related bool) map[string]any {
	out := map[string]any{}
	switch Status(t.State) {
	case StatusCompleted:
		text := string(t.Result)
		if text == "" {
			text = "done"
		}
		out["content"] = []any{map[string]any{"type": "text", "text": text}}
		var obj map[string]any
		if json.Unmarshal(t.Result, &obj) == nil {
			out["structuredContent"] = obj
		}
		out["isError"] = false
	default:
		msg := t.LastError
		if msg == "" {
			msg = "the task ended " + string(t.State)
		}
		out["content"] = []any{map[string]any{"type": "text", "text": string(t.State) + ": " + msg}}
		out["isError"] = true
	}
	if related {
		out["_meta"] = map[string]any{relatedTask: map[string]any{"taskId": t.ID}}
	}
	return out
}

func (h *handler) tasksResult(ctx context.Context, tenant string, params json.RawMessage) (any, error) {
	t, err := h.task(ctx, tenant, params)
	if err != nil {
		return nil, err
	}
	if t, err = h.waitTerminal(ctx, t.ID); err != nil {
		return nil, errorf(codeInternal, "waiting for the task: %v", err)
	}
	return h.callResult(t, true), nil
}

const listPage = 50

func (h *handler) tasksList(ctx context.Context, tenant string, params json.RawMessage) (any, error) {
	var p struct {
		Cursor string `json:"cursor"`
	}
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, errorf(codeInvalidParams, "tasks/list params: %v", err)
		}
	}
	if p.Cursor != "" {
		if t, err := h.cfg.Ledger.Get(ctx, p.Cursor); err != nil || !h.visible(tenant, t) {
			return nil, errorf(codeInvalidParams, "invalid cursor")
		}
	}
	ts, err := h.cfg.Ledger.List(ctx, ledger.Filter{Tenant: tenant, After: p.Cursor, Limit: listPage})
	if err != nil {
		return nil, err
	}
	out := []any{}
	for _, t := range ts {
		if h.visible(tenant, t) {
			out = append(out, h.taskOut(ctx, t))
		}
	}
	res := map[string]any{"tasks": out}
	if len(ts) == listPage {
		res["nextCursor"] = ts[len(ts)-1].ID
	}
	return res, nil
}

func (h *handler) tasksCancel(ctx context.Context, tenant string, params json.RawMessage) (any, error) {
	t, err := h.task(ctx, tenant, params)
	if err != nil {
		return nil, err
	}
	// The Client's cancel: the ledger move first (the spec wants the task
	// cancelled before the answer), then the control channel stops a
	// running handler on whichever worker runs it.
	t, err = h.cfg.Client.CancelBy(ctx, t.ID, "cancelled by request (MCP tasks/cancel)", "mcp")
	var fe *switchyard.FinishedError
	switch {
	case errors.As(err, &fe):
		return nil, errorf(codeInvalidParams, "task %s is already %s and cannot be cancelled", fe.ID, Status(fe.State))
	case errors.Is(err, ledger.ErrNotFound):
		return nil, errorf(codeInvalidParams, "Failed to retrieve task: Task not found")
	case err != nil:
		return nil, err
	}
	return h.taskOut(ctx, t), nil
}
