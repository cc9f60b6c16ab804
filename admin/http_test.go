package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/scheduler"
)

// Task kinds the test server runs.
type greetArgs struct {
	Name string `json:"name"`
}

func (greetArgs) Kind() string { return "test.greet" }

type flakyArgs struct {
	Item string `json:"item"`
}

func (flakyArgs) Kind() string { return "test.flaky" }

type refundArgs struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

func (refundArgs) Kind() string { return "test.refund" }

// The tokens every test uses.
const (
	adminSecret    = "admin-secret-000000000001"
	readSecret     = "read-secret-0000000000002"
	enqueueSecret  = "enqueue-secret-0000000003"
	acmeSecret     = "acme-admin-secret-0000004"
	globexSecret   = "globex-read-secret-000005"
	flakyErrorText = "inventory service answered 503"
)

func testTokens() []admin.Token {
	return []admin.Token{
		{Name: "ops-admin", Secret: adminSecret, Role: admin.RoleAdmin},
		{Name: "viewer", Secret: readSecret, Role: admin.RoleRead},
		{Name: "producer", Secret: enqueueSecret, Role: admin.RoleEnqueue},
		{Name: "acme-admin", Secret: acmeSecret, Role: admin.RoleAdmin, Tenant: "acme"},
		{Name: "globex-reader", Secret: globexSecret, Role: admin.RoleRead, Tenant: "globex"},
	}
}

// syncBuffer is a bytes.Buffer safe for the logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testEnv is an in-process broker deduplicating through a SQLite ledger, a
// running Server with the test kinds, Ops and the admin handler served by
// httptest (under prefix, when set).
type testEnv struct {
	t      *testing.T
	ctx    context.Context
	L      ledger.Ledger
	b      *broker.Broker
	client *switchyard.Client
	ops    *admin.Ops
	ts     *httptest.Server
	api    string // base URL of /api/v1/
	logs   *syncBuffer
	fixed  atomic.Bool // the flaky kind succeeds once set
	// reserved counts the flaky kind's effect executions.
	reserved atomic.Int32
}

func newTestEnv(t *testing.T, prefix string) *testEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	e := &testEnv{t: t, ctx: ctx, logs: &syncBuffer{}}
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
	e.L, e.b = L, b
	e.client, err = switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	if err != nil {
		t.Fatal(err)
	}

	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{
		Ledger: L, Slots: 4, PollWait: 50 * time.Millisecond, Lease: 5 * time.Second,
		Retry: scheduler.RetryPolicy{Base: 10 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[greetArgs]) error {
		if _, err := switchyard.Effect(ctx, "greet/"+tk.Args.Name, func(ctx context.Context) (bool, error) { return true, nil }, nil); err != nil {
			return err
		}
		return tk.SetResult(map[string]string{"greeting": "hello " + tk.Args.Name})
	}, nil))
	must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[flakyArgs]) error {
		if !e.fixed.Load() {
			return errors.New(flakyErrorText)
		}
		_, err := switchyard.Effect(ctx, "reserve/"+tk.Args.Item, func(ctx context.Context) (string, error) {
			e.reserved.Add(1)
			return "reserved", nil
		}, nil)
		return err
	}, nil))
	must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[refundArgs]) error {
		if tk.Review == nil {
			return switchyard.AwaitApproval("refund above the automatic limit", fmt.Sprintf("refund %d on %s", tk.Args.Amount, tk.Args.Order))
		}
		return nil
	}, nil))
	must(t, srv.Start(ctx))
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = srv.Stop(sctx)
	})

	e.ops, err = admin.New(admin.Config{Broker: b, Ledger: L, Kinds: map[string]admin.KindSpec{
		"test.greet": {Lane: "interactive", Validate: func(a json.RawMessage) error {
			var v greetArgs
			if json.Unmarshal(a, &v) != nil || v.Name == "" {
				return errors.New("name is required")
			}
			return nil
		}},
		"test.flaky":  {Lane: "batch"},
		"test.refund": {Lane: "interactive"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.NewHandler(e.ops, admin.HandlerConfig{
		Tokens: testTokens(),
		Logger: slog.New(slog.NewTextHandler(e.logs, nil)),
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, "switchyard_test_metric 1")
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if prefix != "" {
		mux := http.NewServeMux()
		mux.Handle(prefix+"/", http.StripPrefix(prefix, h))
		h = mux
	}
	e.ts = httptest.NewServer(h)
	t.Cleanup(e.ts.Close)
	e.api = e.ts.URL + prefix + "/api/v1/"
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// resp is an HTTP answer.
type resp struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into a generic map.
func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

func (r resp) errText(t *testing.T) string {
	t.Helper()
	s, _ := r.json(t)["error"].(string)
	return s
}

// call sends method path (relative to /api/v1/ unless it starts with
// http) with the token, a JSON body (a string is sent as is; nil sends
// nothing) and extra headers. POSTs get Content-Type application/json
// unless hdr sets one ("" removes it).
func (e *testEnv) call(method, path, token string, body any, hdr map[string]string) resp {
	e.t.Helper()
	url := path
	if !strings.HasPrefix(path, "http") {
		url = e.api + path
	}
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(e.ctx, method, url, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	res, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{res.StatusCode, res.Header, data}
}

// ingest posts a task with an Idempotency-Key.
func (e *testEnv) ingest(token, key string, body any) resp {
	e.t.Helper()
	h := map[string]string{}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	return e.call("POST", "tasks", token, body, h)
}

// waitState waits (bounded) until the ledger shows task id in state st.
func (e *testEnv) waitState(id string, st ledger.State) *ledger.Task {
	e.t.Helper()
	var last *ledger.Task
	for i := 0; i < 1500; i++ {
		tk, err := e.L.Get(e.ctx, id)
		if err == nil && tk.State == st {
			return tk
		}
		last = tk
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("task %s never reached %s (last seen %+v)", id, st, last)
	return nil
}

// waitDead waits until the broker's dead-letter queue of lane holds n
// messages and the ledger shows id dead.
func (e *testEnv) waitDead(lane, id string, n int64) {
	e.t.Helper()
	e.waitState(id, ledger.Dead)
	for i := 0; i < 1500; i++ {
		if s, err := e.b.Stats(e.ctx, lane); err == nil && s.DeadLettered == n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("lane %s never had %d dead letters", lane, n)
}

// enqueue enqueues directly through the client.
func (e *testEnv) enqueue(args switchyard.TaskArgs, opts *switchyard.EnqueueOpts) string {
	e.t.Helper()
	r, err := e.client.Enqueue(e.ctx, args, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return r.ID
}

// totals is the number of tasks in the ledger and of messages the broker
// holds in every default lane (ready, in flight, delayed, dead).
func (e *testEnv) totals() (tasks int, msgs int64) {
	e.t.Helper()
	all, err := e.L.List(e.ctx, ledger.Filter{Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, lane := range []string{"interactive", "scheduled", "batch", "human-review"} {
		s, err := e.b.Stats(e.ctx, lane)
		if err != nil {
			e.t.Fatal(err)
		}
		msgs += s.Ready + s.InFlight + s.Delayed + s.DeadLettered
	}
	return len(all), msgs
}

// TestHandler_Ingestion is the acceptance for ingestion: one key,
// one task; bad requests get 400 and enqueue nothing; a tenant-scoped
// token cannot read another tenant's task.
func TestHandler_Ingestion(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	body := map[string]any{"kind": "test.greet", "args": map[string]string{"name": "ada"}, "metadata": map[string]string{"source": "test"}}

	r1 := e.ingest(enqueueSecret, "order-1", body)
	if r1.status != http.StatusAccepted {
		t.Fatalf("first ingest: %d %s", r1.status, r1.body)
	}
	j1 := r1.json(t)
	id, _ := j1["id"].(string)
	if id == "" || j1["duplicate"] != false || j1["status_url"] != "/api/v1/tasks/"+id+"/status" {
		t.Fatalf("first ingest answered %s", r1.body)
	}
	r2 := e.ingest(enqueueSecret, "order-1", body)
	j2 := r2.json(t)
	if r2.status != http.StatusAccepted || j2["id"] != id || j2["duplicate"] != true {
		t.Fatalf("second ingest with the same key: %d %s, want 202 with id %s and duplicate", r2.status, r2.body, id)
	}

	// The same key with another body: 422, nothing enqueued; the same body
	// spelt differently is the same request.
	for name, other := range map[string]any{
		"other args":     map[string]any{"kind": "test.greet", "args": map[string]string{"name": "bob"}, "metadata": map[string]string{"source": "test"}},
		"other metadata": map[string]any{"kind": "test.greet", "args": map[string]string{"name": "ada"}},
		"other lane":     map[string]any{"kind": "test.greet", "args": map[string]string{"name": "ada"}, "metadata": map[string]string{"source": "test"}, "lane": "batch"},
	} {
		r := e.ingest(enqueueSecret, "order-1", other)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.errText(t), "Idempotency-Key") {
			t.Errorf("%s with a used key: %d %s, want 422", name, r.status, r.body)
		}
	}
	r3 := e.ingest(enqueueSecret, "order-1", `{"metadata": {"source": "test"}, "args": { "name" : "ada" }, "kind": "test.greet"}`)
	if j3 := r3.json(t); r3.status != http.StatusAccepted || j3["id"] != id || j3["duplicate"] != true {
		t.Errorf("the same body spelt differently: %d %s, want 202 with id %s", r3.status, r3.body, id)
	}

	// Fetch later: the status endpoint, with the enqueue token.
	var st map[string]any
	for i := 0; i < 1500; i++ {
		r := e.call("GET", "tasks/"+id+"/status", enqueueSecret, nil, nil)
		if r.status != http.StatusOK {
			t.Fatalf("status: %d %s", r.status, r.body)
		}
		if st = r.json(t); st["state"] == "completed" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st["state"] != "completed" || st["done"] != true {
		t.Fatalf("status never completed: %v", st)
	}
	if res, _ := st["result"].(map[string]any); res["greeting"] != "hello ada" {
		t.Errorf("status result = %v, want the handler's greeting", st["result"])
	}
	if as, _ := st["attempts"].([]any); len(as) != 1 {
		t.Errorf("status attempts = %v, want 1", st["attempts"])
	}
	if n, _ := e.totals(); n != 1 {
		t.Fatalf("%d tasks in the ledger after two ingests with one key, want 1", n)
	}

	// Bad requests: 400 with a clear message, nothing enqueued.
	bad := []struct {
		name, key string
		body      any
		want      string
	}{
		{"missing key", "", body, "Idempotency-Key header is required"},
		{"malformed JSON", "bad-1", `{"kind": "test.greet" "args": {}}`, "not valid JSON"},
		{"truncated", "bad-2", `{"kind": "test.greet"`, "truncated"},
		{"not an object", "bad-3", `[1, 2]`, "must be a JSON object"},
		{"unknown field", "bad-4", `{"kind": "test.greet", "args": {"name": "x"}, "colour": "red"}`, `unknown field "colour"`},
		{"unknown kind", "bad-5", `{"kind": "test.nope", "args": {}}`, `unknown kind "test.nope"`},
		{"no kind", "bad-6", `{"args": {}}`, "kind is required"},
		{"args fail validation", "bad-7", `{"kind": "test.greet", "args": {}}`, "name is required"},
		{"args not an object", "bad-8", `{"kind": "test.greet", "args": [1]}`, "must be a JSON object"},
		{"bad run_at", "bad-9", `{"kind": "test.greet", "args": {"name": "x"}, "run_at": "tomorrow"}`, "RFC 3339"},
		{"bad delay", "bad-10", `{"kind": "test.greet", "args": {"name": "x"}, "delay": "soon"}`, "not a duration"},
		{"two delays", "bad-11", `{"kind": "test.greet", "args": {"name": "x"}, "delay": "1s", "delay_ms": 5}`, "not both"},
		{"wrong type", "bad-12", `{"kind": "test.greet", "args": {"name": "x"}, "max_attempts": "3"}`, `field "max_attempts"`},
		{"trailing data", "bad-13", `{"kind": "test.greet", "args": {"name": "x"}} {}`, "data after the JSON object"},
		{"empty body", "bad-14", ``, "body is empty"},
		{"bad lane", "bad-15", `{"kind": "test.greet", "args": {"name": "x"}, "lane": "no spaces allowed"}`, "lane"},
	}
	for _, c := range bad {
		r := e.ingest(enqueueSecret, c.key, c.body)
		if r.status != http.StatusBadRequest || !strings.Contains(r.errText(t), c.want) {
			t.Errorf("%s: %d %s, want 400 mentioning %q", c.name, r.status, r.body, c.want)
		}
	}
	// Too large: 413.
	huge := `{"kind": "test.greet", "args": {"name": "` + strings.Repeat("x", admin.DefaultMaxBodyBytes) + `"}}`
	if r := e.ingest(enqueueSecret, "bad-huge", huge); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("a body above 1 MiB: %d %s, want 413", r.status, r.body)
	}
	// Not JSON: 415.
	if r := e.call("POST", "tasks", enqueueSecret, "kind=test.greet", map[string]string{"Idempotency-Key": "bad-form", "Content-Type": "application/x-www-form-urlencoded"}); r.status != http.StatusUnsupportedMediaType {
		t.Errorf("a form post: %d %s, want 415", r.status, r.body)
	}
	if n, msgs := e.totals(); n != 1 || msgs != 0 {
		t.Fatalf("after the bad requests: %d tasks in the ledger and %d messages in the broker, want 1 and 0", n, msgs)
	}

	// Roles: a read token cannot enqueue; the enqueue token reads only status.
	if r := e.ingest(readSecret, "ro-1", body); r.status != http.StatusForbidden {
		t.Errorf("read token ingest: %d %s, want 403", r.status, r.body)
	}
	for _, p := range []string{"tasks/" + id, "lanes", "dead", "tasks"} {
		if r := e.call("GET", p, enqueueSecret, nil, nil); r.status != http.StatusForbidden {
			t.Errorf("enqueue token GET %s: %d, want 403", p, r.status)
		}
	}

	// Tenants: acme's token enqueues into acme, whatever it leaves out, and
	// may not name another tenant; globex's token never sees acme's task.
	ra := e.ingest(acmeSecret, "acme-1", map[string]any{"kind": "test.greet", "args": map[string]string{"name": "acme"}})
	if ra.status != http.StatusAccepted {
		t.Fatalf("acme ingest: %d %s", ra.status, ra.body)
	}
	acmeID := ra.json(t)["id"].(string)
	if tk := e.waitState(acmeID, ledger.Completed); tk.Tenant != "acme" {
		t.Errorf("acme's task has tenant %q", tk.Tenant)
	}
	if r := e.ingest(acmeSecret, "acme-2", `{"kind": "test.greet", "args": {"name": "x"}, "tenant": "globex"}`); r.status != http.StatusBadRequest {
		t.Errorf("acme naming globex: %d %s, want 400", r.status, r.body)
	}
	for _, p := range []string{"tasks/" + acmeID, "tasks/" + acmeID + "/status"} {
		if r := e.call("GET", p, globexSecret, nil, nil); r.status != http.StatusNotFound {
			t.Errorf("globex reading acme's %s: %d %s, want 404", p, r.status, r.body)
		}
		if r := e.call("GET", p, acmeSecret, nil, nil); r.status != http.StatusOK {
			t.Errorf("acme reading its own %s: %d %s", p, r.status, r.body)
		}
	}
	if r := e.call("GET", "tasks?tenant=acme", globexSecret, nil, nil); r.status != http.StatusOK || len(r.json(t)["tasks"].([]any)) != 0 {
		t.Errorf("globex listing acme's tasks: %d %s, want an empty list", r.status, r.body)
	}
	// A task that does not exist: 404 for everyone.
	if r := e.call("GET", "tasks/nope/status", enqueueSecret, nil, nil); r.status != http.StatusNotFound {
		t.Errorf("unknown task: %d %s", r.status, r.body)
	}
	// The audit log names the token of every ingest, never a secret.
	logs := e.logs.String()
	if !strings.Contains(logs, "token=producer") || !strings.Contains(logs, "token=acme-admin") {
		t.Errorf("audit log lacks the tokens' names:\n%s", logs)
	}
	for _, s := range []string{adminSecret, readSecret, enqueueSecret, acmeSecret, globexSecret} {
		if strings.Contains(logs, s) {
			t.Fatalf("a secret is in the log")
		}
	}
}

// TestHandler_Auth: 401 without or with a bad token, 403 for a role that
// may not, the unauthenticated probes, and no CORS.
func TestHandler_Auth(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	item := e.enqueue(flakyArgs{Item: "i-1"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.waitDead("batch", item, 1)

	for name, hdr := range map[string]map[string]string{
		"no header":    nil,
		"basic auth":   {"Authorization": "Basic dXNlcjpwYXNz"},
		"empty bearer": {"Authorization": "Bearer "},
		"wrong token":  {"Authorization": "Bearer not-a-token-at-all-000"},
	} {
		for _, p := range []string{"lanes", "dead", "tasks/" + item, "nope"} {
			r := e.call("GET", p, "", nil, hdr)
			if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") || r.errText(t) == "" {
				t.Errorf("%s, GET %s: %d %q %s, want 401 with WWW-Authenticate and a JSON error", name, p, r.status, r.header.Get("WWW-Authenticate"), r.body)
			}
		}
		r := e.call("POST", "dead/replay", "", map[string]any{"ids": []string{item}}, hdr)
		if r.status != http.StatusUnauthorized {
			t.Errorf("%s, replay: %d, want 401", name, r.status)
		}
	}
	// The read-only token is refused replay, and the dead letter stays.
	r := e.call("POST", "dead/replay", readSecret, map[string]any{"ids": []string{item}}, nil)
	if r.status != http.StatusForbidden || !strings.Contains(r.errText(t), "admin role") {
		t.Errorf("read token replay: %d %s, want 403", r.status, r.body)
	}
	for _, p := range []string{"dead/purge", "dead/move", "lanes/batch/pause", "reviews/" + item + "/approve"} {
		if r := e.call("POST", p, readSecret, map[string]any{"ids": []string{item}, "to_lane": "interactive"}, nil); r.status != http.StatusForbidden {
			t.Errorf("read token POST %s: %d, want 403", p, r.status)
		}
	}
	if s, _ := e.b.Stats(e.ctx, "batch"); s.DeadLettered != 1 || e.waitState(item, ledger.Dead) == nil {
		t.Fatalf("refused calls changed something: %+v", s)
	}
	// The read token reads, without task arguments; the admin sees them.
	rd := e.call("GET", "dead", readSecret, nil, nil)
	if rd.status != http.StatusOK || strings.Contains(string(rd.body), `"args"`) || !strings.Contains(string(rd.body), flakyErrorText) {
		t.Errorf("read token GET dead: %d %s", rd.status, rd.body)
	}
	ad := e.call("GET", "dead/batch/"+item, adminSecret, nil, nil)
	if ad.status != http.StatusOK || !strings.Contains(string(ad.body), `"args":{"item":"i-1"}`) {
		t.Errorf("admin GET dead/batch/%s: %d %s, want the args", item, ad.status, ad.body)
	}
	if r := e.call("GET", "tasks/"+item, readSecret, nil, nil); r.status != http.StatusOK || strings.Contains(string(r.body), `"args"`) {
		t.Errorf("read token GET task: %d %s, want no args", r.status, r.body)
	}
	if r := e.call("GET", "whoami", readSecret, nil, nil); r.status != http.StatusOK || r.json(t)["role"] != "read" {
		t.Errorf("whoami: %d %s", r.status, r.body)
	}
	// Unknown API routes are JSON 404s once authenticated.
	if r := e.call("GET", "nope", readSecret, nil, nil); r.status != http.StatusNotFound || r.errText(t) == "" {
		t.Errorf("unknown route: %d %s", r.status, r.body)
	}

	// Probes need no token.
	if r := e.call("GET", e.ts.URL+"/healthz", "", nil, nil); r.status != http.StatusOK {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
	if r := e.call("GET", e.ts.URL+"/readyz", "", nil, nil); r.status != http.StatusOK || r.json(t)["status"] != "ready" {
		t.Errorf("readyz: %d %s", r.status, r.body)
	}
	// /metrics needs a token.
	if r := e.call("GET", e.ts.URL+"/metrics", "", nil, nil); r.status != http.StatusUnauthorized {
		t.Errorf("metrics without a token: %d", r.status)
	}
	if r := e.call("GET", e.ts.URL+"/metrics", readSecret, nil, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), "switchyard_test_metric 1") {
		t.Errorf("metrics: %d %s", r.status, r.body)
	}
	// No CORS: a preflight gets no Access-Control-* answer.
	r = e.call("OPTIONS", "dead/replay", "", nil, map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST", "Content-Type": ""})
	if r.status != http.StatusUnauthorized || r.header.Get("Access-Control-Allow-Origin") != "" || r.header.Get("Access-Control-Allow-Headers") != "" {
		t.Errorf("preflight: %d %v, want an error and no CORS headers", r.status, r.header)
	}
	if !strings.Contains(e.logs.String(), "admin request refused") {
		t.Errorf("refused requests are not logged")
	}
}

// TestHandler_CSRF: state-changing calls need a JSON content type and, when
// the browser says where they come from, the same origin.
func TestHandler_CSRF(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	item := e.enqueue(flakyArgs{Item: "c-1"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.waitDead("batch", item, 1)
	body := map[string]any{"ids": []string{item}}
	refused := []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"same-site subdomain", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"foreign Origin", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"form post", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"multipart", map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, http.StatusUnsupportedMediaType},
		{"text/plain", map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		{"no content type", map[string]string{"Content-Type": ""}, http.StatusUnsupportedMediaType},
	}
	for _, c := range refused {
		r := e.call("POST", "dead/replay", adminSecret, body, c.hdr)
		if r.status != c.want || r.errText(t) == "" {
			t.Errorf("%s: %d %s, want %d", c.name, r.status, r.body, c.want)
		}
	}
	if s, _ := e.b.Stats(e.ctx, "batch"); s.DeadLettered != 1 {
		t.Fatalf("a refused request replayed the dead letter: %+v", s)
	}
	// The same call from the dashboard's own origin goes through.
	e.fixed.Store(true)
	r := e.call("POST", "dead/replay", adminSecret, body, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": e.ts.URL,
		"Content-Type": "application/json; charset=utf-8"})
	if r.status != http.StatusOK || r.json(t)["done"] != float64(1) {
		t.Fatalf("same-origin replay: %d %s", r.status, r.body)
	}
	e.waitState(item, ledger.Completed)
}

// TestHandler_DeadLetters: list, show, the bulk operations' validation,
// replay by id, and the event log naming the token.
func TestHandler_DeadLetters(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	a := e.enqueue(flakyArgs{Item: "a"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.waitDead("batch", a, 1)
	b := e.enqueue(flakyArgs{Item: "b"}, &switchyard.EnqueueOpts{Lane: "batch", Tenant: "acme"})
	e.waitDead("batch", b, 2)
	// globex's dead letter must survive everything acme's token does.
	g := e.enqueue(flakyArgs{Item: "g"}, &switchyard.EnqueueOpts{Lane: "batch", Tenant: "globex"})
	e.waitDead("batch", g, 3)

	r := e.call("GET", "dead?lane=batch&tenant=&limit=2", readSecret, nil, nil)
	var list struct {
		Dead []struct {
			ID, Lane, Kind, Tenant, Reason, Error string
			Attempts                              []struct{ Attempt int }
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Dead) != 2 {
		t.Fatalf("GET dead: %d %s", r.status, r.body)
	}
	for _, d := range list.Dead {
		if d.Reason != string(broker.ReasonMaxAttempts) || !strings.Contains(d.Error, flakyErrorText) || len(d.Attempts) != 2 || d.Kind != "test.flaky" {
			t.Errorf("dead letter %+v, want max_attempts with the error and 2 attempts", d)
		}
	}
	if r := e.call("GET", "dead?reason=bogus", readSecret, nil, nil); r.status != http.StatusBadRequest {
		t.Errorf("unknown reason: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "dead?limit=-1", readSecret, nil, nil); r.status != http.StatusBadRequest {
		t.Errorf("negative limit: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "tasks?state=sleeping", readSecret, nil, nil); r.status != http.StatusBadRequest || !strings.Contains(r.errText(t), "unknown state") {
		t.Errorf("unknown state: %d %s", r.status, r.body)
	}
	// The acme token sees only acme's dead letter, and a as not found.
	if r := e.call("GET", "dead", acmeSecret, nil, nil); !strings.Contains(string(r.body), b) || strings.Contains(string(r.body), a) || strings.Contains(string(r.body), g) {
		t.Errorf("acme GET dead: %s", r.body)
	}
	if r := e.call("GET", "dead/batch/"+a, acmeSecret, nil, nil); r.status != http.StatusNotFound {
		t.Errorf("acme GET another tenant's dead letter: %d", r.status)
	}

	for _, c := range []struct {
		path string
		body any
		want string
	}{
		{"dead/purge", `{}`, "give ids"},
		{"dead/purge", `{"filter": {}}`, "refusing to purge every dead letter"},
		{"dead/purge", `{"ids": []}`, "ids is empty"},
		{"dead/replay", `{"ids": [""]}`, "empty"},
		{"dead/move", `{"ids": ["` + a + `"]}`, "to_lane is required"},
		{"dead/replay", `{"ids": ["` + a + `"], "to_lane": "batch"}`, "only for move"},
		{"dead/replay", `{"filter": {"reason": "bogus"}}`, "unknown dead-letter reason"},
		{"dead/replay", `{"filter": {"colour": "red"}}`, `unknown field "colour"`},
	} {
		r := e.call("POST", c.path, adminSecret, c.body, nil)
		if r.status != http.StatusBadRequest || !strings.Contains(r.errText(t), c.want) {
			t.Errorf("POST %s %s: %d %s, want 400 mentioning %q", c.path, c.body, r.status, r.body, c.want)
		}
	}
	if s, _ := e.b.Stats(e.ctx, "batch"); s.DeadLettered != 3 {
		t.Fatalf("refused bulk calls changed the dead-letter queue: %+v", s)
	}

	// Replay a by id; it completes, and its events name the token.
	e.fixed.Store(true)
	r = e.call("POST", "dead/replay", adminSecret, map[string]any{"ids": []string{a}}, nil)
	if r.status != http.StatusOK || r.json(t)["done"] != float64(1) {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	e.waitState(a, ledger.Completed)
	evs, err := e.L.Events(e.ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		found = found || (ev.Actor == "token:ops-admin" && ev.From == ledger.Dead)
	}
	if !found {
		t.Errorf("no event from dead by token:ops-admin in %+v", evs)
	}
	// The task view shows the timeline.
	r = e.call("GET", "tasks/"+a, readSecret, nil, nil)
	var detail struct {
		Task     struct{ State string }
		Attempts []struct{ Number int }
		Events   []struct{ Reason, Actor string }
		Effects  []struct{ Key, State string }
	}
	if err := json.Unmarshal(r.body, &detail); err != nil || detail.Task.State != "completed" || len(detail.Attempts) != 3 ||
		len(detail.Events) < 5 || len(detail.Effects) != 1 || detail.Effects[0].Key != "reserve/a" {
		t.Errorf("task detail: %d %s", r.status, r.body)
	}
	// Purging b by filter works for acme's token (its own tenant only):
	// globex's dead letter, in the same lane, stays.
	r = e.call("POST", "dead/purge", acmeSecret, map[string]any{"filter": map[string]string{"lane": "batch"}}, nil)
	if r.status != http.StatusOK || r.json(t)["done"] != float64(1) || r.json(t)["truncated"] != false {
		t.Fatalf("acme purge: %d %s", r.status, r.body)
	}
	if s, _ := e.b.Stats(e.ctx, "batch"); s.DeadLettered != 1 {
		t.Errorf("after purge: %+v", s)
	}
	if r := e.call("GET", "dead?lane=batch", readSecret, nil, nil); !strings.Contains(string(r.body), g) || strings.Contains(string(r.body), b) {
		t.Errorf("after acme's purge: %s, want globex's %s only", r.body, g)
	}
	logs := e.logs.String()
	for _, want := range []string{`action="POST /api/v1/dead/replay"`, "token=ops-admin", `action="POST /api/v1/dead/purge"`, "token=acme-admin", "status=200"} {
		if !strings.Contains(logs, want) {
			t.Errorf("audit log lacks %q:\n%s", want, logs)
		}
	}
}

// TestHandler_Sandbox: a dead letter replayed in sandbox mode over HTTP
// completes with its effect recorded as "would do" and not executed; the
// dead letter stays.
func TestHandler_Sandbox(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	id := e.enqueue(flakyArgs{Item: "sb"}, &switchyard.EnqueueOpts{Lane: "batch"})
	e.waitDead("batch", id, 1)
	e.fixed.Store(true)

	if r := e.call("POST", "dead/batch/"+id+"/sandbox", readSecret, nil, nil); r.status != http.StatusForbidden {
		t.Errorf("read token sandbox: %d %s, want 403", r.status, r.body)
	}
	if r := e.call("POST", "dead/batch/"+id+"/sandbox", acmeSecret, nil, nil); r.status != http.StatusNotFound {
		t.Errorf("another tenant's token sandbox: %d %s, want 404", r.status, r.body)
	}
	if r := e.call("POST", "dead/batch/nope/sandbox", adminSecret, nil, nil); r.status != http.StatusNotFound {
		t.Errorf("sandbox of an unknown dead letter: %d %s, want 404", r.status, r.body)
	}
	r := e.call("POST", "dead/batch/"+id+"/sandbox", adminSecret, nil, nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("sandbox: %d %s", r.status, r.body)
	}
	j := r.json(t)
	sid, _ := j["id"].(string)
	if sid == "" || sid == id || j["status_url"] != "/api/v1/tasks/"+sid+"/status" {
		t.Fatalf("sandbox answered %s", r.body)
	}
	e.waitState(sid, ledger.Completed)
	r = e.call("GET", "tasks/"+sid, readSecret, nil, nil)
	var detail struct {
		Effects []struct{ Key, State string }
	}
	if err := json.Unmarshal(r.body, &detail); err != nil || len(detail.Effects) != 1 || detail.Effects[0].Key != "reserve/sb" || detail.Effects[0].State != string(ledger.EffectWouldDo) {
		t.Errorf("sandbox task's effects: %s, want reserve/sb would_do", r.body)
	}
	if n := e.reserved.Load(); n != 0 {
		t.Errorf("the sandbox executed the effect %d times", n)
	}
	if tk := e.waitState(id, ledger.Dead); tk.State != ledger.Dead {
		t.Errorf("the original is %s", tk.State)
	}
	if s, _ := e.b.Stats(e.ctx, "batch"); s.DeadLettered != 1 {
		t.Errorf("the dead letter left its queue: %+v", s)
	}
	if !strings.Contains(e.logs.String(), "sandbox_id="+sid) {
		t.Errorf("the audit log lacks the sandbox task")
	}
}

// TestHandler_ReviewsAndLanes: the review queue and lane pause over HTTP.
func TestHandler_ReviewsAndLanes(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	a := e.enqueue(refundArgs{Order: "A-1", Amount: 900}, &switchyard.EnqueueOpts{Lane: "interactive"})
	b := e.enqueue(refundArgs{Order: "B-2", Amount: 5000}, &switchyard.EnqueueOpts{Lane: "interactive"})
	e.waitState(a, ledger.AwaitingReview)
	e.waitState(b, ledger.AwaitingReview)

	r := e.call("GET", "reviews", readSecret, nil, nil)
	if r.status != http.StatusOK || len(r.json(t)["reviews"].([]any)) != 2 || !strings.Contains(string(r.body), "refund above the automatic limit") {
		t.Fatalf("GET reviews: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "reviews/"+a+"/reject", adminSecret, `{}`, nil); r.status != http.StatusBadRequest || !strings.Contains(r.errText(t), "reason") {
		t.Errorf("reject without a reason: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "reviews/"+a+"/claim", adminSecret, nil, nil); r.status != http.StatusOK {
		t.Errorf("claim: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "reviews/"+a+"/approve", adminSecret, `{"note": "ok by me"}`, nil); r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "reviews/"+b+"/reject", adminSecret, `{"reason": "above policy"}`, nil); r.status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	e.waitState(a, ledger.Completed)
	if tk := e.waitState(b, ledger.Rejected); !strings.Contains(tk.LastError, "token:ops-admin") {
		t.Errorf("rejected task's error %q does not name the token", tk.LastError)
	}
	if r := e.call("POST", "reviews/"+b+"/approve", adminSecret, nil, nil); r.status != http.StatusConflict {
		t.Errorf("approving a rejected task: %d %s, want 409", r.status, r.body)
	}
	if r := e.call("POST", "reviews/nope/approve", adminSecret, nil, nil); r.status != http.StatusNotFound {
		t.Errorf("approving an unknown task: %d %s, want 404", r.status, r.body)
	}

	// Lanes: pause and resume with the admin token; a tenant's token may not.
	if r := e.call("POST", "lanes/batch/pause", acmeSecret, nil, nil); r.status != http.StatusForbidden {
		t.Errorf("tenant-scoped pause: %d %s, want 403", r.status, r.body)
	}
	if r := e.call("POST", "lanes/batch/pause", adminSecret, nil, nil); r.status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	r = e.call("GET", "lanes", readSecret, nil, nil)
	var lanes struct {
		Lanes []struct {
			Lane        string
			PausedBy    string `json:"paused_by"`
			Paused      bool
			ObjectiveMS float64 `json:"objective_ms"`
		}
	}
	_ = json.Unmarshal(r.body, &lanes)
	paused := map[string]string{}
	for _, l := range lanes.Lanes {
		if l.Paused {
			paused[l.Lane] = l.PausedBy
		}
	}
	if r.status != http.StatusOK || len(lanes.Lanes) < 4 || len(paused) != 1 || paused[""] != "" {
		t.Errorf("lanes after pause: %d %s", r.status, r.body)
	}
	if !strings.Contains(string(r.body), `"lane":"batch"`) || !strings.Contains(string(r.body), `"paused_by":"token:ops-admin"`) {
		t.Errorf("lanes do not show batch paused by the token: %s", r.body)
	}
	if r := e.call("POST", "lanes/batch/resume", adminSecret, nil, nil); r.status != http.StatusOK {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "lanes/no%20such/pause", adminSecret, nil, nil); r.status != http.StatusBadRequest {
		t.Errorf("pausing a malformed lane: %d %s, want 400", r.status, r.body)
	}
}

// TestHandler_Mounted: under a prefix, the page, its assets and the status
// URL carry the prefix, and the bare prefix redirects to the page.
func TestHandler_Mounted(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "/ops")
	noRedirect := *e.ts.Client()
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := noRedirect.Get(e.ts.URL + "/ops")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if (res.StatusCode != http.StatusMovedPermanently && res.StatusCode != http.StatusTemporaryRedirect) || res.Header.Get("Location") != "/ops/" {
		t.Errorf("GET /ops: %d to %q, want a redirect to /ops/", res.StatusCode, res.Header.Get("Location"))
	}
	page := e.call("GET", e.ts.URL+"/ops/", "", nil, nil)
	if page.status != http.StatusOK || !strings.Contains(string(page.body), `src="ui/app.js"`) ||
		!strings.Contains(page.header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("page: %d %v", page.status, page.header)
	}
	// The page's filters offer every dead-letter reason and task state.
	for _, r := range admin.Reasons() {
		if !strings.Contains(string(page.body), "<option>"+string(r)+"</option>") {
			t.Errorf("the page's reason filter lacks %q", r)
		}
	}
	for _, st := range admin.States() {
		if !strings.Contains(string(page.body), "<option>"+string(st)+"</option>") {
			t.Errorf("the page's state filter lacks %q", st)
		}
	}
	for _, p := range []string{"ui/app.js", "ui/style.css"} {
		if r := e.call("GET", e.ts.URL+"/ops/"+p, "", nil, nil); r.status != http.StatusOK || len(r.body) < 1000 {
			t.Errorf("%s: %d", p, r.status)
		}
	}
	if r := e.call("GET", e.ts.URL+"/ops/ui/", "", nil, nil); r.status != http.StatusNotFound {
		t.Errorf("directory listing: %d", r.status)
	}
	// Behind a bare http.StripPrefix (no ServeMux to add the slash), the
	// handler redirects the bare prefix itself.
	h, err := admin.NewHandler(e.ops, admin.HandlerConfig{Tokens: testTokens(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	bare := httptest.NewServer(http.StripPrefix("/x", h))
	defer bare.Close()
	res, err = noRedirect.Get(bare.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/x/" {
		t.Errorf("bare StripPrefix, GET /x: %d to %q, want 301 to /x/", res.StatusCode, res.Header.Get("Location"))
	}

	r := e.ingest(enqueueSecret, "m-1", map[string]any{"kind": "test.greet", "args": map[string]string{"name": "m"}})
	if r.status != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", r.status, r.body)
	}
	j := r.json(t)
	want := "/ops/api/v1/tasks/" + j["id"].(string) + "/status"
	if j["status_url"] != want {
		t.Fatalf("status_url %v, want %s", j["status_url"], want)
	}
	if r := e.call("GET", e.ts.URL+want, enqueueSecret, nil, nil); r.status != http.StatusOK {
		t.Errorf("status_url: %d %s", r.status, r.body)
	}
}

func TestNewHandler_BadConfig(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	ok := admin.Token{Name: "a", Secret: strings.Repeat("s", 16), Role: admin.RoleAdmin}
	for name, cfg := range map[string]admin.HandlerConfig{
		"no tokens":      {},
		"short secret":   {Tokens: []admin.Token{{Name: "a", Secret: "short", Role: admin.RoleAdmin}}},
		"unknown role":   {Tokens: []admin.Token{{Name: "a", Secret: ok.Secret, Role: "root"}}},
		"no name":        {Tokens: []admin.Token{{Secret: ok.Secret, Role: admin.RoleRead}}},
		"name twice":     {Tokens: []admin.Token{ok, {Name: "a", Secret: strings.Repeat("t", 16), Role: admin.RoleRead}}},
		"secret twice":   {Tokens: []admin.Token{ok, {Name: "b", Secret: ok.Secret, Role: admin.RoleRead}}},
		"bad origin":     {Tokens: []admin.Token{ok}, TrustedOrigins: []string{"not a url"}},
		"secret w/space": {Tokens: []admin.Token{{Name: "a", Secret: "abc def ghi jkl mno", Role: admin.RoleRead}}},
	} {
		if _, err := admin.NewHandler(e.ops, cfg); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		} else if strings.Contains(err.Error(), ok.Secret) {
			t.Errorf("%s: the error quotes a secret", name)
		}
	}
	if _, err := admin.NewHandler(nil, admin.HandlerConfig{Tokens: []admin.Token{ok}}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("nil ops: %v", err)
	}
}
