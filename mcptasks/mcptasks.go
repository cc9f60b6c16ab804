// Package mcptasks binds Switchyard tasks to the Model Context Protocol's
// tasks (MCP 2025-11-25, basic/utilities/tasks; experimental there): a
// tool call answered with a durable task handle that a client polls with
// tasks/get, waits on with tasks/result, lists with tasks/list and stops
// with tasks/cancel, across client reconnects and server restarts — the
// task lives in Switchyard's ledger, not in the MCP server's memory.
//
// # Mounting
//
// New returns an http.Handler that speaks MCP's Streamable HTTP transport
// (JSON-RPC 2.0 over POST; every answer is a single JSON response). A
// body is one JSON-RPC request or notification: a batch (which MCP
// 2025-11-25 does not have), data after the message or an id that is not
// a string, a number or null is refused with JSON-RPC's error and a null
// id, a body above Config.MaxBody with 413. A team mounts it at its MCP
// endpoint, behind its own authentication:
//
//	h, _ := mcptasks.New(mcptasks.Config{Client: client, Ledger: L, Tools: []mcptasks.Tool{
//		{Name: "summarize", Kind: "doc.summarize", Lane: "interactive", Description: "Summarise a document"},
//	}})
//	mux.Handle("/mcp", h)
//
// Each Tool names the Switchyard task kind a call enqueues (a Server
// somewhere runs its handler); the call's arguments are the task's
// arguments. The server declares capabilities.tasks (list, cancel,
// requests.tools.call) and each tool's execution.taskSupport.
//
// # Status mapping
//
//	queued, running, retry_wait          → working (statusMessage: the latest progress)
//	awaiting_review, awaiting_event      → input_required (statusMessage: what it waits for)
//	completed                            → completed
//	failed, dead, rejected               → failed (statusMessage: the last error)
//	cancelled                            → cancelled
//
// tasks/result blocks until the task is terminal and returns the
// CallToolResult the tool call would have returned: the handler's result
// (switchyard.Task.SetResult) as structuredContent and as text, or
// isError with the error for a failed task.
//
// # Cancellation
//
// tasks/cancel is the Client's Cancel (switchyard.Client.CancelBy, actor
// "mcp"): the task moves to cancelled in the ledger before the answer, as
// the spec requires. A queued, delayed, retrying or waiting task then
// never runs (its delivery finds it cancelled; a signal to it is
// refused). A running one has its handler's context cancelled (cause
// scheduler.ErrCancelled) on whichever worker runs it, through the
// ledger's control channel (ledger.Notes), typically within tens of
// milliseconds and about a second at worst; it is not retried. A
// terminal task is refused with -32602, as is an unknown one.
//
// # Scope
//
// Config.Tenant (per request) confines every call to one tenant: tasks of
// others, and tasks of kinds no Tool names, read as not found.
package mcptasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// ProtocolVersion is the MCP revision this binding implements.
const ProtocolVersion = "2025-11-25"

// Task support values of a tool (execution.taskSupport).
const (
	TaskOptional = "optional"
	TaskRequired = "required"
)

// Tool is one MCP tool backed by a Switchyard task kind.
type Tool struct {
	// Name is the tool's MCP name (required).
	Name string
	// Description is shown to the model.
	Description string
	// InputSchema is the tool's JSON Schema for its arguments. Defaults to
	// {"type":"object"}.
	InputSchema json.RawMessage
	// Kind is the task kind a call enqueues (required).
	Kind string
	// Lane is the lane the task is enqueued in. Defaults to "interactive".
	Lane string
	// TaskSupport is TaskOptional (a call without a task waits for the
	// result, bounded by the HTTP request) or TaskRequired (a call without
	// a task is refused with -32601). Defaults to TaskRequired.
	TaskSupport string
}

// Config configures the handler.
type Config struct {
	// Client enqueues and cancels the tasks (required; it needs Ledger).
	Client *switchyard.Client
	// Ledger is the Client's ledger, where the tasks are read (required).
	Ledger ledger.Ledger
	// Tools are the tools (at least one).
	Tools []Tool
	// Tenant, when set, returns the tenant of a request (from the team's
	// own authentication); an error refuses the request with 401. Tasks
	// are created in it and only its tasks are visible. Defaults to nil:
	// tenant "".
	Tenant func(r *http.Request) (string, error)
	// PollInterval is the pollInterval suggested to clients (tasks/result
	// itself waits with Client.Wait, woken by the ledger's notes).
	// Defaults to 1s.
	PollInterval time.Duration
	// ServerName and ServerVersion are the serverInfo of initialize.
	// Default to "switchyard" and "1".
	ServerName, ServerVersion string
	// MaxBody is the largest request body. Defaults to 1 MiB.
	MaxBody int64
}

// handler serves MCP over Streamable HTTP.
type handler struct {
	cfg   Config
	tools map[string]Tool
	kinds map[string]bool
}

// New returns the MCP handler.
func New(cfg Config) (http.Handler, error) {
	if cfg.Client == nil || cfg.Ledger == nil {
		return nil, broker.Invalidf("mcptasks: Client and Ledger are required")
	}
	if len(cfg.Tools) == 0 {
		return nil, broker.Invalidf("mcptasks: no tools")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "switchyard"
	}
	if cfg.ServerVersion == "" {
		cfg.ServerVersion = "1"
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 1 << 20
	}
	h := &handler{cfg: cfg, tools: map[string]Tool{}, kinds: map[string]bool{}}
	for _, t := range cfg.Tools {
		if t.Name == "" || t.Kind == "" {
			return nil, broker.Invalidf("mcptasks: tool %q needs a name and a kind", t.Name)
		}
		if _, dup := h.tools[t.Name]; dup {
			return nil, broker.Invalidf("mcptasks: tool %q is listed twice", t.Name)
		}
		if t.Lane == "" {
			t.Lane = "interactive"
		}
		switch t.TaskSupport {
		case "":
			t.TaskSupport = TaskRequired
		case TaskOptional, TaskRequired:
		default:
			return nil, broker.Invalidf("mcptasks: tool %q: taskSupport %q is neither optional nor required", t.Name, t.TaskSupport)
		}
		if len(t.InputSchema) == 0 {
			t.InputSchema = json.RawMessage(`{"type":"object"}`)
		} else if !json.Valid(t.InputSchema) {
			return nil, broker.Invalidf("mcptasks: tool %q: input schema is not JSON", t.Name)
		}
		h.tools[t.Name] = t
		h.kinds[t.Kind] = true
	}
	return h, nil
}

// JSON-RPC error codes.
const (
	codeParse          = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
	codeInternal       = -32603
)

type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return e.Message }

func errorf(code int, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if r.Method != http.MethodPost {
		// No server-initiated stream: status changes are polled.
		w.Header().Set("Allow", "POST")
		http.Error(w, "this MCP endpoint takes POST only", http.StatusMethodNotAllowed)
		return
	}
	tenant := ""
	if h.cfg.Tenant != nil {
		var err error
		if tenant, err = h.cfg.Tenant(r); err != nil {
			http.Error(w, "unauthorized: "+err.Error(), http.StatusUnauthorized)
			return
		}
	}
	req, rerr := h.readRequest(w, r)
	if rerr != nil {
		var mbe *http.MaxBytesError
		if errors.As(rerr, &mbe) {
			http.Error(w, fmt.Sprintf("request body larger than %d bytes", mbe.Limit), http.StatusRequestEntityTooLarge)
			return
		}
		var re *rpcError
		if !errors.As(rerr, &re) {
			re = errorf(codeParse, "reading the body: %v", rerr)
		}
		writeRPC(w, rpcResponse{JSONRPC: "2.0", ID: idOrNull(req.ID), Error: re})
		return
	}
	if len(req.ID) == 0 {
		// A notification (notifications/initialized, cancelled, …):
		// accepted, nothing to answer.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	res, err := h.call(r.Context(), tenant, req.Method, req.Params)
	out := rpcResponse{JSONRPC: "2.0", ID: req.ID}
	if err != nil {
		var re *rpcError
		if !errors.As(err, &re) {
			re = errorf(codeInternal, "internal error: %v", err)
		}
		out.Error = re
	} else {
		out.Result = res
	}
	writeRPC(w, out)
}

// readRequest reads the body: exactly one JSON-RPC request object.
// Refused, with the id the answer carries (none unless the request could
// be read and its id is valid): a body that is not JSON or has data after
// the message (-32700); a batch (MCP 2025-11-25 sends one message per
// POST), a value that is not a request object, an id that is neither a
// string, a number nor null, a jsonrpc other than "2.0" or no method
// (-32600); a body above Config.MaxBody (*http.MaxBytesError).
func (h *handler) readRequest(w http.ResponseWriter, r *http.Request) (rpcRequest, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return rpcRequest{}, err
		}
		return rpcRequest{}, errorf(codeParse, "the body is not one JSON-RPC message: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return rpcRequest{}, err
		}
		return rpcRequest{}, errorf(codeParse, "the body has data after the JSON-RPC message")
	}
	if raw[0] == '[' {
		return rpcRequest{}, errorf(codeInvalidRequest, "JSON-RPC batches are not supported: send one message per request")
	}
	var req rpcRequest
	if err := json.Unmarshal(raw, &req); err != nil || raw[0] != '{' {
		return rpcRequest{}, errorf(codeInvalidRequest, "not a JSON-RPC 2.0 request object")
	}
	if len(req.ID) > 0 && !validID(req.ID) {
		return rpcRequest{}, errorf(codeInvalidRequest, "the id must be a string, a number or null")
	}
	if req.JSONRPC != "2.0" || req.Method == "" {
		return req, errorf(codeInvalidRequest, "not a JSON-RPC 2.0 request")
	}
	return req, nil
}

// validID reports whether id (one JSON value) is a string, a number or
// null, the ids JSON-RPC 2.0 allows.
func validID(id json.RawMessage) bool {
	switch c := id[0]; {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return true
	}
	return string(id) == "null"
}

func idOrNull(id json.RawMessage) json.RawMessage {
	if len(id) == 0 {
		return json.RawMessage("null")
	}
	return id
}

func writeRPC(w http.ResponseWriter, v rpcResponse) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// call dispatches one request.
func (h *handler) call(ctx context.Context, tenant, method string, params json.RawMessage) (any, error) {
	switch method {
	case "initialize":
		return map[string]any{
			"protocolVersion": ProtocolVersion,
			"capabilities": map[string]any{
				"tools": map[string]any{},
				"tasks": map[string]any{"list": map[string]any{}, "cancel": map[string]any{},
					"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}},
			},
			"serverInfo": map[string]any{"name": h.cfg.ServerName, "version": h.cfg.ServerVersion},
		}, nil
	case "ping":
		return map[string]any{}, nil
	case "tools/list":
		return h.toolsList(), nil
	case "tools/call":
		return h.toolsCall(ctx, tenant, params)
	case "tasks/get":
		t, err := h.task(ctx, tenant, params)
		if err != nil {
			return nil, err
		}
		return h.taskOut(ctx, t), nil
	case "tasks/result":
		return h.tasksResult(ctx, tenant, params)
	case "tasks/list":
		return h.tasksList(ctx, tenant, params)
	case "tasks/cancel":
		return h.tasksCancel(ctx, tenant, params)
	}
	return nil, errorf(codeMethodNotFound, "method %q is not supported", method)
}
