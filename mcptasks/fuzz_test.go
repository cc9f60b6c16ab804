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
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/mcptasks"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// This file links only the embedded broker and the SQLite ledger, so that
// the fuzz build (.ci/fuzz, tag switchyard_fuzzbuild) need not instrument
// every adapter: mcptasks_test.go, which links NATS and PostgreSQL, is left
// out of it.

type fuzzSummarize struct {
	Doc string `json:"doc"`
}

func (fuzzSummarize) Kind() string { return "mcpfuzz.summarize" }

type fuzzFail struct{}

func (fuzzFail) Kind() string { return "mcpfuzz.fail" }

type fuzzHidden struct{}

func (fuzzHidden) Kind() string { return "mcpfuzz.hidden" }

// mcpFixture is the MCP handler over an embedded broker and a SQLite
// ledger holding acme's tasks completed, failed, queued and cancelled,
// globex's queued one and one of a kind no tool names, with no server
// running: nothing changes them but the requests.
type mcpFixture struct {
	ctx context.Context
	L   ledger.Ledger
	B   *broker.Broker
	h   http.Handler
	ids map[string]string
}

func newMCPFixture(t testing.TB) *mcpFixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { L.Close() })
	b, err := broker.Open(ctx, "mem://"+conformance.Namespace(t), &broker.Options{Dedup: L})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	client, err := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}
	fx := &mcpFixture{ctx: ctx, L: L, B: b, ids: map[string]string{}}
	enqueue := func(name string, args switchyard.TaskArgs, tenant string) {
		t.Helper()
		r, err := client.Enqueue(ctx, args, &switchyard.EnqueueOpts{Lane: "interactive", Tenant: tenant, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		fx.ids[name] = r.ID
	}
	wait := func(name string, done func(ledger.State) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			tk, err := L.Get(ctx, fx.ids[name])
			if err == nil && done(tk.State) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("fixture: task %s (%s) never finished: %+v %v", name, fx.ids[name], tk, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, Slots: 4, PollWait: 20 * time.Millisecond, Lease: 5 * time.Second,
		Retry: scheduler.RetryPolicy{Base: 5 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[fuzzSummarize]) error {
		_ = switchyard.Progress(ctx, 0.5, "reading")
		return tk.SetResult(map[string]string{"summary": "short " + tk.Args.Doc})
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[fuzzFail]) error {
		return errors.New("the model refused")
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue("completed", fuzzSummarize{Doc: "q3"}, "acme")
	enqueue("failed", fuzzFail{}, "acme")
	wait("completed", func(s ledger.State) bool { return s == ledger.Completed })
	wait("failed", func(s ledger.State) bool { return mcptasks.Status(s) == mcptasks.StatusFailed })
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	if err := srv.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	enqueue("queued", fuzzSummarize{Doc: "q4"}, "acme")
	enqueue("cancelled", fuzzSummarize{Doc: "q5"}, "acme")
	if _, err := client.Cancel(ctx, fx.ids["cancelled"], "fixture"); err != nil {
		t.Fatal(err)
	}
	enqueue("globex", fuzzSummarize{Doc: "g1"}, "globex")
	enqueue("hidden", fuzzHidden{}, "acme")

	fx.h, err = mcptasks.New(mcptasks.Config{Client: client, Ledger: L, PollInterval: 50 * time.Millisecond, MaxBody: 64 << 10,
		Tenant: func(r *http.Request) (string, error) {
			if r.Header.Get("X-Tenant") == "" {
				return "", errors.New("no tenant")
			}
			return r.Header.Get("X-Tenant"), nil
		},
		Tools: []mcptasks.Tool{
			{Name: "summarize", Kind: "mcpfuzz.summarize", Description: "Summarise a document"},
			{Name: "echo", Kind: "mcpfuzz.summarize", Lane: "batch", TaskSupport: mcptasks.TaskOptional},
			{Name: "fail", Kind: "mcpfuzz.fail"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

// digest is every task's state, attempt, update time and event count,
// and the interactive and batch lanes' messages as the broker browses
// them.
func (fx *mcpFixture) digest(t *testing.T) (string, int) {
	t.Helper()
	var b strings.Builder
	n := 0
	for after := ""; ; {
		ts, err := fx.L.List(fx.ctx, ledger.Filter{Limit: 1000, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			evs, err := fx.L.Events(fx.ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "task %s %s attempt=%d updated=%s events=%d\n", tk.ID, tk.State, tk.Attempt, tk.UpdatedAt.UTC().Format(time.RFC3339Nano), len(evs))
		}
		n += len(ts)
		if len(ts) < 1000 {
			break
		}
		after = ts[len(ts)-1].ID
	}
	for _, lane := range []string{"interactive", "batch"} {
		page, err := fx.B.Browse(fx.ctx, broker.BrowseRequest{Lane: lane, Max: broker.MaxBrowse})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.Messages {
			fmt.Fprintf(&b, "%s %s attempt=%d\n", lane, m.ID, m.Attempt)
		}
	}
	return b.String(), n
}

// looks are the methods that read: they change nothing.
var looks = map[string]bool{"initialize": true, "ping": true, "tools/list": true, "tasks/get": true, "tasks/result": true, "tasks/list": true}

// FuzzMCPHandler drives the real MCP handler (embedded broker, SQLite
// ledger, tasks in several states and tenants) with arbitrary request
// bodies, and checks: no panic; every answer is a 4xx, a 202 with no
// body for a notification, or a single JSON-RPC 2.0 response with a
// result or an error (a standard code, never "internal error" unless the
// call was cut short by its deadline while it waited for a task), echoing
// the request's id; no method but tools/call creates a task; the methods
// that read change nothing.
func FuzzMCPHandler(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"fuzz","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"p","method":"ping"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"summarize","arguments":{"doc":"x"},"task":{"ttl":60000}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"summarize","arguments":{"doc":"x"}}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"doc":"x"}}}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"nope","task":{}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"summarize","arguments":[1],"task":{}}}`,
		`{"jsonrpc":"2.0","id":8,"method":"tasks/get","params":{"taskId":"{completed}"}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tasks/get","params":{"taskId":"{globex}"}}`,
		`{"jsonrpc":"2.0","id":10,"method":"tasks/get","params":{"taskId":"{hidden}"}}`,
		`{"jsonrpc":"2.0","id":11,"method":"tasks/get","params":{"taskId":"no-such-task"}}`,
		`{"jsonrpc":"2.0","id":12,"method":"tasks/result","params":{"taskId":"{failed}"}}`,
		`{"jsonrpc":"2.0","id":13,"method":"tasks/result","params":{"taskId":"{queued}"}}`,
		`{"jsonrpc":"2.0","id":14,"method":"tasks/result","params":{"taskId":""}}`,
		`{"jsonrpc":"2.0","id":15,"method":"tasks/list"}`,
		`{"jsonrpc":"2.0","id":16,"method":"tasks/list","params":{"cursor":"{completed}"}}`,
		`{"jsonrpc":"2.0","id":17,"method":"tasks/list","params":{"cursor":"bogus"}}`,
		`{"jsonrpc":"2.0","id":18,"method":"tasks/cancel","params":{"taskId":"{queued}"}}`,
		`{"jsonrpc":"2.0","id":19,"method":"tasks/cancel","params":{"taskId":"{completed}"}}`,
		`{"jsonrpc":"2.0","id":20,"method":"tasks/cancel","params":{"taskId":"no-such-task"}}`,
		`{"jsonrpc":"2.0","id":21,"method":"tasks/cancel","params":{"taskId":"{globex}"}}`,
		`{"jsonrpc":"2.0","id":22,"method":"resources/list"}`,
		`{"jsonrpc":"2.0","id":23,"method":"tasks/get","params":"x"}`,
		`{"jsonrpc":"2.0","id":24,"method":"tasks/get","params":{"taskId":5}}`,
		`{"jsonrpc":"2.0","id":25,"method":"tasks/get"}`,
		`{"jsonrpc":"1.0","id":26,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":27,"method":5}`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":[1],"method":"ping"}`,
		`{"jsonrpc":"2.0","id":true,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":null,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":123456789012345678901234567890e300,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":"` + strings.Repeat("i", 10000) + `","method":"ping"}`,
		`{"jsonrpc":"2.0","id":"<\u2028>","method":"ping"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`,
		`[]`,
		`{"jsonrpc":"2.0","id":1,"method":"ping"} {"jsonrpc":"2.0","id":2,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping"} garbage`,
		`{`, ``, `null`, `"ping"`, `42`, `{}`,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"` + strings.Repeat("x", 70000) + `"}}`,
	} {
		for _, tenant := range []uint8{0, 2} {
			f.Add([]byte(s), tenant)
		}
	}
	fx := newMCPFixture(f)
	var pairs []string
	for name, id := range fx.ids {
		pairs = append(pairs, "{"+name+"}", id)
	}
	fill := strings.NewReplacer(pairs...)
	tenants := []string{"acme", "globex", ""}
	f.Fuzz(func(t *testing.T, body []byte, tenant uint8) {
		body = []byte(fill.Replace(string(body)))
		// What the request says, read as the handler should: one JSON value.
		var sent struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  string          `json:"method"`
		}
		parsed := json.Unmarshal(body, &sent) == nil
		before, nBefore := fx.digest(t)

		ctx, cancel := context.WithTimeout(fx.ctx, 200*time.Millisecond)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/mcp", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if tn := tenants[int(tenant)%len(tenants)]; tn != "" {
			req.Header.Set("X-Tenant", tn)
		}
		w := httptest.NewRecorder()
		fx.h.ServeHTTP(w, req)
		cutShort := ctx.Err() != nil

		res := w.Result()
		out := w.Body.Bytes()
		switch {
		case res.StatusCode == http.StatusRequestEntityTooLarge:
			if len(body) <= 64<<10 {
				t.Fatalf("413 for a body of %d bytes: %s", len(body), short(out))
			}
		case res.StatusCode >= 400 && res.StatusCode < 500:
			if tenants[int(tenant)%len(tenants)] != "" {
				t.Fatalf("%d for a request with a tenant: %s", res.StatusCode, short(out))
			}
		case res.StatusCode == http.StatusAccepted:
			if !parsed || len(sent.ID) != 0 || len(out) != 0 {
				t.Fatalf("202 (a notification's answer) to %s: %s", short(body), short(out))
			}
		case res.StatusCode == http.StatusOK:
			checkRPC(t, body, out, parsed, sent.ID, cutShort)
		default:
			t.Fatalf("status %d to %s: %s", res.StatusCode, short(body), short(out))
		}

		after, nAfter := fx.digest(t)
		if parsed && sent.Method == "tools/call" {
			return
		}
		if nAfter != nBefore {
			t.Fatalf("%s (method %s) changed the number of tasks from %d to %d: %s", short(body), sent.Method, nBefore, nAfter, short(out))
		}
		if !parsed || looks[sent.Method] || res.StatusCode != http.StatusOK {
			if after != before {
				t.Fatalf("%s changed the tasks or the queues:\nbefore:\n%s\nafter:\n%s", short(body), before, after)
			}
		}
	})
}

// checkRPC checks a 200 answer: one JSON-RPC 2.0 response, a result xor an
// error with a standard code, the request's id (null when the request was
// not one).
func checkRPC(t *testing.T, body, out []byte, parsed bool, id json.RawMessage, cutShort bool) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var resp map[string]json.RawMessage
	if err := dec.Decode(&resp); err != nil {
		t.Fatalf("answer to %s is not a JSON object: %v: %s", short(body), err, short(out))
	}
	if dec.More() {
		t.Fatalf("answer to %s has more than one JSON value: %s", short(body), short(out))
	}
	if string(resp["jsonrpc"]) != `"2.0"` {
		t.Fatalf("answer to %s is not JSON-RPC 2.0: %s", short(body), short(out))
	}
	gotID, ok := resp["id"]
	if !ok {
		t.Fatalf("answer to %s has no id: %s", short(body), short(out))
	}
	_, hasResult := resp["result"]
	rawErr, hasError := resp["error"]
	if hasResult == hasError {
		t.Fatalf("answer to %s has result %v and error %v: %s", short(body), hasResult, hasError, short(out))
	}
	for k := range resp {
		if k != "jsonrpc" && k != "id" && k != "result" && k != "error" {
			t.Fatalf("answer to %s has member %q: %s", short(body), k, short(out))
		}
	}
	if hasError {
		var e struct {
			Code    *int    `json:"code"`
			Message *string `json:"message"`
		}
		if json.Unmarshal(rawErr, &e) != nil || e.Code == nil || e.Message == nil || *e.Message == "" {
			t.Fatalf("answer to %s: malformed error %s", short(body), rawErr)
		}
		switch *e.Code {
		case -32700, -32600, -32601, -32602:
		case -32603:
			if !cutShort {
				t.Fatalf("answer to %s: internal error %s", short(body), rawErr)
			}
		default:
			t.Fatalf("answer to %s: error code %d is not JSON-RPC's", short(body), *e.Code)
		}
	}
	// The id: the request's (compared as JSON values), or null when the
	// request has none that could be read.
	want := "null"
	if parsed && validID(id) {
		want = string(id)
	}
	if !sameJSON(gotID, json.RawMessage(want)) {
		t.Fatalf("answer to %s has id %s, want %s", short(body), gotID, want)
	}
}

// validID reports whether id is a JSON-RPC id: a string, a number or null.
func validID(id json.RawMessage) bool {
	var v any
	d := json.NewDecoder(bytes.NewReader(id))
	d.UseNumber()
	if len(id) == 0 || d.Decode(&v) != nil {
		return false
	}
	switch v.(type) {
	case nil, string, json.Number:
		return true
	}
	return false
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// short quotes b, cut to 300 bytes, for a failure message.
func short(b []byte) string {
	if len(b) > 300 {
		return fmt.Sprintf("%q… (%d bytes)", b[:300], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// TestHandler_MalformedMessages: what is not one JSON-RPC 2.0 request
// object is refused with the code JSON-RPC gives it and a null id (the
// request's id is not read from what is not a request): a batch, a value
// that is not a request, an id that is neither a string, a number nor
// null, data after the message; a body above MaxBody is a 413. Before,
// the handler echoed an object, array or boolean id, answered only the
// first of several messages (a batch: a parse error) and a body too large
// as a parse error.
func TestHandler_MalformedMessages(t *testing.T) {
	t.Parallel()
	fx := newMCPFixture(t)
	for _, c := range []struct {
		body   string
		status int
		code   int
		id     string
	}{
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, 200, -32600, "null"},
		{`[]`, 200, -32600, "null"},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, 200, -32600, "null"},
		{`{"jsonrpc":"2.0","id":[1],"method":"ping"}`, 200, -32600, "null"},
		{`{"jsonrpc":"2.0","id":false,"method":"ping"}`, 200, -32600, "null"},
		{`{"jsonrpc":"2.0","id":1,"method":5}`, 200, -32600, "null"},
		{`"ping"`, 200, -32600, "null"},
		{`{"jsonrpc":"2.0","id":1,"method":"ping"} {"jsonrpc":"2.0","id":2,"method":"ping"}`, 200, -32700, "null"},
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}]`, 200, -32700, "null"},
		{`{"jsonrpc":"2.0","id":1,"method":"ping"`, 200, -32700, "null"},
		{`{"jsonrpc":"1.0","id":7,"method":"ping"}`, 200, -32600, "7"},
		{`{"jsonrpc":"2.0","id":"a","method":""}`, 200, -32600, `"a"`},
		{`{"jsonrpc":"2.0","id":-1.5e3,"method":"nope"}`, 200, -32601, "-1.5e3"},
		{`{"jsonrpc":"2.0","id":null,"method":"nope"}`, 200, -32601, "null"},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n", 200, 0, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("x", 64<<10) + `"}}`, 413, 0, ""},
	} {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(c.body))
		req.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		fx.h.ServeHTTP(w, req)
		if w.Code != c.status {
			t.Errorf("%s: status %d, want %d: %s", short([]byte(c.body)), w.Code, c.status, short(w.Body.Bytes()))
			continue
		}
		if c.status != 200 {
			continue
		}
		var out struct {
			ID    json.RawMessage
			Error *struct{ Code int }
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Errorf("%s: answer %s: %v", short([]byte(c.body)), w.Body.Bytes(), err)
			continue
		}
		code := 0
		if out.Error != nil {
			code = out.Error.Code
		}
		if code != c.code || string(out.ID) != c.id {
			t.Errorf("%s: code %d id %s, want code %d id %s", short([]byte(c.body)), code, out.ID, c.code, c.id)
		}
	}
}
