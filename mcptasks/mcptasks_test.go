//go:build !switchyard_fuzzbuild

package mcptasks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	_ "github.com/switchyard-dev/switchyard/adapters/nats"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	"github.com/switchyard-dev/switchyard/internal/testclean"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/mcptasks"
)

type summarize struct {
	Doc string `json:"doc"`
}

func (summarize) Kind() string { return "mcp.summarize" }

type approve struct{}

func (approve) Kind() string { return "mcp.approve" }

type slow struct{}

func (slow) Kind() string { return "mcp.slow" }

type echo struct {
	Say string `json:"say"`
}

func (echo) Kind() string { return "mcp.echo" }

// rpc is a JSON-RPC 2.0 client of MCP's Streamable HTTP transport, written
// from the 2025-11-25 specification: one POST per message, Accept both
// JSON and SSE, the protocol version header after initialize.
type rpc struct {
	t      *testing.T
	url    string
	tenant string
	id     atomic.Int64
}

type rpcErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (c *rpc) call(method string, params any) (map[string]any, *rpcErr) {
	c.t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "id": c.id.Add(1), "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, _ := json.Marshal(msg)
	req, _ := http.NewRequest("POST", c.url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", mcptasks.ProtocolVersion)
	if c.tenant != "" {
		req.Header.Set("X-Tenant", c.tenant)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  map[string]any  `json:"result"`
		Error   *rpcErr         `json:"error"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		c.t.Fatalf("%s: answer does not decode: %v", method, err)
	}
	if out.JSONRPC != "2.0" || string(out.ID) != fmt.Sprint(msg["id"]) {
		c.t.Fatalf("%s: answer %+v does not match request id %v", method, out, msg["id"])
	}
	return out.Result, out.Error
}

func (c *rpc) must(method string, params any) map[string]any {
	c.t.Helper()
	res, err := c.call(method, params)
	if err != nil {
		c.t.Fatalf("%s: error %d %s", method, err.Code, err.Message)
	}
	return res
}

// poll calls tasks/get, respecting pollInterval, until status is one of want.
func (c *rpc) poll(taskID string, want ...string) map[string]any {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		task := c.must("tasks/get", map[string]any{"taskId": taskID})
		for _, w := range want {
			if task["status"] == w {
				return task
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("task %s is %v, want %v", taskID, task["status"], want)
		}
		time.Sleep(time.Duration(task["pollInterval"].(float64)) * time.Millisecond)
	}
}

func TestHandler_TasksOverMCP(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ ledger, broker string }{{"sqlite", "mem"}, {"postgres", "nats"}} {
		t.Run(c.ledger+"/"+c.broker, func(t *testing.T) {
			t.Parallel()
			run(t, c.ledger, c.broker)
		})
	}
}

func run(t *testing.T, ledgerKind, brokerKind string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	if ledgerKind == "postgres" {
		dsn = pgtest.LedgerDSN(t)
	}
	L, err := ledger.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	url := "mem://" + conformance.Namespace(t)
	if brokerKind != "mem" {
		url = testclean.URL(t, brokerKind, conformance.Namespace(t), nil)
	}
	b, err := broker.Open(ctx, url, &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	client, _ := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	// A long lease: its heartbeat (lease/3 = 20 s) is not what stops a
	// cancelled handler; the ledger's control channel is.
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, Slots: 4, Lease: time.Minute, PollWait: 50 * time.Millisecond})
	slowStopped := make(chan error, 1)
	var slowRuns atomic.Int32
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[summarize]) error {
		if err := switchyard.Progress(ctx, 0.5, "reading "+tk.Args.Doc); err != nil {
			return err
		}
		return tk.SetResult(map[string]string{"summary": "short " + tk.Args.Doc})
	}, nil)
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[approve]) error {
		v, err := switchyard.AwaitEvent[map[string]bool](ctx, "go", time.Hour, nil)
		if err != nil {
			return err
		}
		return tk.SetResult(v)
	}, nil)
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[slow]) error {
		slowRuns.Add(1)
		_ = switchyard.Progress(ctx, 0.1, "started")
		<-ctx.Done()
		if !switchyard.CancelCause(ctx) {
			slowStopped <- fmt.Errorf("context ended with cause %v, not the task's cancellation", context.Cause(ctx))
			return ctx.Err()
		}
		slowStopped <- ctx.Err()
		return ctx.Err()
	}, nil)
	_ = switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[echo]) error {
		return tk.SetResult(map[string]string{"said": tk.Args.Say})
	}, nil)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())

	h, err := mcptasks.New(mcptasks.Config{Client: client, Ledger: L, PollInterval: 50 * time.Millisecond,
		Tenant: func(r *http.Request) (string, error) {
			if r.Header.Get("X-Tenant") == "" {
				return "", errors.New("no tenant")
			}
			return r.Header.Get("X-Tenant"), nil
		},
		Tools: []mcptasks.Tool{
			{Name: "summarize", Kind: "mcp.summarize", Description: "Summarise a document"},
			{Name: "approve", Kind: "mcp.approve", TaskSupport: mcptasks.TaskOptional},
			{Name: "slow", Kind: "mcp.slow"},
			{Name: "echo", Kind: "mcp.echo", TaskSupport: mcptasks.TaskOptional},
		}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	c := &rpc{t: t, url: ts.URL, tenant: "acme"}

	init := c.must("initialize", map[string]any{"protocolVersion": mcptasks.ProtocolVersion, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "spec-client", "version": "0"}})
	caps, _ := init["capabilities"].(map[string]any)
	tasksCap, _ := caps["tasks"].(map[string]any)
	if init["protocolVersion"] != mcptasks.ProtocolVersion || tasksCap["cancel"] == nil || tasksCap["list"] == nil ||
		tasksCap["requests"].(map[string]any)["tools"].(map[string]any)["call"] == nil {
		t.Fatalf("initialize: %+v", init)
	}
	tools := c.must("tools/list", nil)["tools"].([]any)
	support := map[string]string{}
	for _, x := range tools {
		m := x.(map[string]any)
		support[m["name"].(string)] = m["execution"].(map[string]any)["taskSupport"].(string)
	}
	if support["summarize"] != "required" || support["approve"] != "optional" || len(support) != 4 {
		t.Fatalf("tools/list: %v", support)
	}

	// A required tool called without a task: -32601.
	if _, e := c.call("tools/call", map[string]any{"name": "summarize", "arguments": map[string]any{"doc": "q3"}}); e == nil || e.Code != -32601 {
		t.Fatalf("summarize without a task: %+v", e)
	}
	// With a task: a handle at once, then working → completed, then the result.
	created := c.must("tools/call", map[string]any{"name": "summarize", "arguments": map[string]any{"doc": "q3"}, "task": map[string]any{"ttl": 60000}})
	task := created["task"].(map[string]any)
	id := task["taskId"].(string)
	if task["status"] != "working" || task["createdAt"] == nil || task["lastUpdatedAt"] == nil {
		t.Fatalf("CreateTaskResult: %+v", created)
	}
	if _, ok := task["ttl"]; !ok {
		t.Errorf("the task has no ttl (null for unlimited): %+v", task)
	}
	c.poll(id, "completed")
	res := c.must("tasks/result", map[string]any{"taskId": id})
	if res["isError"] != false || res["structuredContent"].(map[string]any)["summary"] != "short q3" ||
		res["_meta"].(map[string]any)["io.modelcontextprotocol/related-task"].(map[string]any)["taskId"] != id {
		t.Fatalf("tasks/result: %+v", res)
	}

	// An optional tool called plainly: the CallToolResult itself.
	plain := c.must("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"say": "hi"}})
	if plain["structuredContent"].(map[string]any)["said"] != "hi" || plain["task"] != nil {
		t.Fatalf("plain call: %+v", plain)
	}

	// A task waiting for an event is input_required; a signal completes it.
	wait := c.must("tools/call", map[string]any{"name": "approve", "arguments": map[string]any{}, "task": map[string]any{}})["task"].(map[string]any)["taskId"].(string)
	got := c.poll(wait, "input_required")
	if got["statusMessage"] != "awaiting event go" {
		t.Errorf("input_required statusMessage %q", got["statusMessage"])
	}
	done := make(chan map[string]any, 1)
	go func() {
		r, _ := c.call("tasks/result", map[string]any{"taskId": wait}) // blocks until terminal
		done <- r
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := client.Signal(ctx, switchyard.SignalTarget{TaskID: wait, Name: "go"}, []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r["structuredContent"].(map[string]any)["ok"] != true {
			t.Errorf("result after the signal: %+v", r)
		}
	case <-ctx.Done():
		t.Fatal("tasks/result did not return after the signal")
	}

	// Cancel a waiting task (not running: it never runs again) and a
	// running one (its handler's context is cancelled; no retry).
	parked := c.must("tools/call", map[string]any{"name": "approve", "arguments": map[string]any{}, "task": map[string]any{}})["task"].(map[string]any)["taskId"].(string)
	c.poll(parked, "input_required")
	if st := c.must("tasks/cancel", map[string]any{"taskId": parked})["status"]; st != "cancelled" {
		t.Errorf("cancel a waiting task: %v", st)
	}
	if _, err := client.Signal(ctx, switchyard.SignalTarget{TaskID: parked, Name: "go"}, nil); !errors.Is(err, switchyard.ErrWaitClosed) {
		t.Errorf("a signal to a cancelled task: %v, want ErrWaitClosed", err)
	}
	running := c.must("tools/call", map[string]any{"name": "slow", "task": map[string]any{}})["task"].(map[string]any)["taskId"].(string)
	got = c.poll(running, "working")
	for got["statusMessage"] != "10% started" {
		got = c.poll(running, "working")
	}
	cancelled := c.must("tasks/cancel", map[string]any{"taskId": running})
	if cancelled["status"] != "cancelled" {
		t.Fatalf("tasks/cancel: %+v", cancelled)
	}
	// Within about a second through the control channel; the bound is
	// generous for a loaded machine, and still half the heartbeat.
	select {
	case err := <-slowStopped:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the handler stopped with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the running handler's context was not cancelled within 10s of tasks/cancel")
	}
	evs, err := L.Events(ctx, running)
	if err != nil {
		t.Fatal(err)
	}
	var moves []ledger.Event
	for _, ev := range evs {
		if ev.To == ledger.Cancelled {
			moves = append(moves, ev)
		}
	}
	if len(moves) != 1 || moves[0].Actor != "mcp" {
		t.Errorf("moves to cancelled: %+v, want one by mcp", moves)
	}
	time.Sleep(500 * time.Millisecond)
	if st := c.must("tasks/get", map[string]any{"taskId": running})["status"]; st != "cancelled" || slowRuns.Load() != 1 {
		t.Errorf("after cancel: %v, %d runs", st, slowRuns.Load())
	}
	if r := c.must("tasks/result", map[string]any{"taskId": running}); r["isError"] != true {
		t.Errorf("result of a cancelled task: %+v", r)
	}

	// Errors the spec names.
	for _, x := range []struct {
		method string
		params any
		code   int
	}{
		{"tasks/cancel", map[string]any{"taskId": id}, -32602},      // terminal
		{"tasks/cancel", map[string]any{"taskId": running}, -32602}, // cancelled already
		{"tasks/get", map[string]any{"taskId": "no-such-task"}, -32602},
		{"tasks/result", map[string]any{"taskId": ""}, -32602},
		{"tasks/list", map[string]any{"cursor": "bogus"}, -32602},
		{"tools/call", map[string]any{"name": "nope", "task": map[string]any{}}, -32602},
		{"tools/call", map[string]any{"name": "summarize", "arguments": []int{1}, "task": map[string]any{}}, -32602},
		{"resources/list", nil, -32601},
	} {
		if _, e := c.call(x.method, x.params); e == nil || e.Code != x.code {
			t.Errorf("%s %v: %+v, want code %d", x.method, x.params, e, x.code)
		}
	}

	// tasks/list shows this tenant's tasks; another tenant sees none of them
	// and cannot read one.
	list := c.must("tasks/list", nil)["tasks"].([]any)
	if len(list) != 5 {
		t.Errorf("tasks/list: %d tasks, want 5", len(list))
	}
	other := &rpc{t: t, url: ts.URL, tenant: "globex"}
	if l := other.must("tasks/list", nil)["tasks"].([]any); len(l) != 0 {
		t.Errorf("another tenant lists %d tasks", len(l))
	}
	if _, e := other.call("tasks/get", map[string]any{"taskId": id}); e == nil || e.Code != -32602 {
		t.Errorf("another tenant's tasks/get: %+v", e)
	}

	// Transport: POST only; a body that is not JSON is a parse error.
	if r, _ := http.Get(ts.URL); r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", r.StatusCode)
	}
	if r, _ := http.Post(ts.URL, "application/json", bytes.NewBufferString("{}")); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("no tenant: %d, want 401", r.StatusCode)
	}
	req, _ := http.NewRequest("POST", ts.URL, bytes.NewBufferString("{"))
	req.Header.Set("X-Tenant", "acme")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var pe struct{ Error rpcErr }
	_ = json.NewDecoder(r.Body).Decode(&pe)
	r.Body.Close()
	if pe.Error.Code != -32700 {
		t.Errorf("bad JSON: %d %+v", r.StatusCode, pe)
	}
}
