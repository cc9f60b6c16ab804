package browsertest

// The dashboard's test environment: a copy of the part of admin's
// http_test.go that the browser tests use (a package's _test.go files
// cannot be imported, and this module exists so that chromedp is no
// requirement of the library's). Keep the two in step.

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
	"github.com/switchyard-dev/switchyard/spend"
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
	return newTestEnvSpend(t, prefix, nil)
}

// newTestEnvSpend is newTestEnv with a spend reporter (nil: none).
func newTestEnvSpend(t *testing.T, prefix string, sp spend.Reporter) *testEnv {
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
	}, Spend: sp})
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

type historyBody struct {
	admin.HistoryInfo
	At time.Time `json:"at"`
}

func (e *testEnv) history(path string) (historyBody, resp) {
	e.t.Helper()
	r := e.call("GET", path, readSecret, nil, nil)
	var b historyBody
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &b); err != nil {
			e.t.Fatalf("GET %s: %s (%v)", path, r.body, err)
		}
	}
	return b, r
}

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
