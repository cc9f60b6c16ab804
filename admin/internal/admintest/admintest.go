// Package admintest is the admin API's test environment: a broker
// deduplicating through a SQLite ledger, a running Server with three test
// kinds, the admin Ops and its HTTP handler, with the tokens and the
// helpers the tests call it with. Admin's own HTTP tests (package
// admin_test) and the dashboard's browser tests (the admin/browsertest
// module) share it.
//
// Only test files import it: it imports testing and registers the embedded
// broker and the SQLite ledger, and nothing in the library imports it.
package admintest

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

// GreetArgs is the kind test.greet (lane interactive): it records an
// effect and completes with a greeting; the admin API refuses it without
// a name.
type GreetArgs struct {
	Name string `json:"name"`
}

func (GreetArgs) Kind() string { return "test.greet" }

// FlakyArgs is the kind test.flaky (lane batch): it fails with
// FlakyErrorText until Env.Fixed is set (two attempts, then dead), then
// records an effect, counted in Env.Reserved.
type FlakyArgs struct {
	Item string `json:"item"`
}

func (FlakyArgs) Kind() string { return "test.flaky" }

// RefundArgs is the kind test.refund (lane interactive): it waits for a
// review, and completes once approved.
type RefundArgs struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

func (RefundArgs) Kind() string { return "test.refund" }

// The tokens every test uses.
const (
	AdminSecret    = "admin-secret-000000000001"
	ReadSecret     = "read-secret-0000000000002"
	EnqueueSecret  = "enqueue-secret-0000000003"
	AcmeSecret     = "acme-admin-secret-0000004"
	GlobexSecret   = "globex-read-secret-000005"
	FlakyErrorText = "inventory service answered 503"
)

// Tokens are the handler's tokens: ops-admin, viewer and producer over
// every tenant, acme-admin and globex-reader scoped to their tenant.
func Tokens() []admin.Token {
	return []admin.Token{
		{Name: "ops-admin", Secret: AdminSecret, Role: admin.RoleAdmin},
		{Name: "viewer", Secret: ReadSecret, Role: admin.RoleRead},
		{Name: "producer", Secret: EnqueueSecret, Role: admin.RoleEnqueue},
		{Name: "acme-admin", Secret: AcmeSecret, Role: admin.RoleAdmin, Tenant: "acme"},
		{Name: "globex-reader", Secret: GlobexSecret, Role: admin.RoleRead, Tenant: "globex"},
	}
}

// SyncBuffer is a bytes.Buffer safe for the logger and the test at once.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Env is an in-process broker deduplicating through a SQLite ledger, a
// running Server with the test kinds, Ops and the admin handler served by
// httptest (under prefix, when set).
type Env struct {
	T      *testing.T
	Ctx    context.Context
	L      ledger.Ledger
	B      *broker.Broker
	Client *switchyard.Client
	Ops    *admin.Ops
	Server *httptest.Server
	API    string      // base URL of /api/v1/
	Logs   *SyncBuffer // the handler's log
	Fixed  atomic.Bool // the flaky kind succeeds once set
	// Reserved counts the flaky kind's effect executions.
	Reserved atomic.Int32
}

// Stack opens what every admin test stands on: a SQLite ledger in a
// temporary directory, an embedded in-memory broker deduplicating through
// it, and a Client over both; t.Cleanup closes them.
func Stack(t testing.TB, ctx context.Context) (ledger.Ledger, *broker.Broker, *switchyard.Client) {
	t.Helper()
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
	return L, b, client
}

// New starts an Env, its handler mounted under prefix ("" for the root).
// t.Cleanup stops it.
func New(t *testing.T, prefix string) *Env {
	t.Helper()
	return NewWithSpend(t, prefix, nil)
}

// NewWithSpend is New with a spend reporter (nil: none).
func NewWithSpend(t *testing.T, prefix string, sp spend.Reporter) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	e := &Env{T: t, Ctx: ctx, Logs: &SyncBuffer{}}
	L, b, client := Stack(t, ctx)
	e.L, e.B, e.Client = L, b, client

	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{
		Ledger: L, Slots: 4, PollWait: 50 * time.Millisecond, Lease: 5 * time.Second,
		Retry: scheduler.RetryPolicy{Base: 10 * time.Millisecond, Jitter: scheduler.NoJitter, MaxAttempts: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	Must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[GreetArgs]) error {
		if _, err := switchyard.Effect(ctx, "greet/"+tk.Args.Name, func(ctx context.Context) (bool, error) { return true, nil }, nil); err != nil {
			return err
		}
		return tk.SetResult(map[string]string{"greeting": "hello " + tk.Args.Name})
	}, nil))
	Must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[FlakyArgs]) error {
		if !e.Fixed.Load() {
			return errors.New(FlakyErrorText)
		}
		_, err := switchyard.Effect(ctx, "reserve/"+tk.Args.Item, func(ctx context.Context) (string, error) {
			e.Reserved.Add(1)
			return "reserved", nil
		}, nil)
		return err
	}, nil))
	Must(t, switchyard.Register(srv, func(ctx context.Context, tk *switchyard.Task[RefundArgs]) error {
		if tk.Review == nil {
			return switchyard.AwaitApproval("refund above the automatic limit", fmt.Sprintf("refund %d on %s", tk.Args.Amount, tk.Args.Order))
		}
		return nil
	}, nil))
	Must(t, srv.Start(ctx))
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = srv.Stop(sctx)
	})

	e.Ops, err = admin.New(admin.Config{Broker: b, Ledger: L, Kinds: map[string]admin.KindSpec{
		"test.greet": {Lane: "interactive", Validate: func(a json.RawMessage) error {
			var v GreetArgs
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
	h, err := admin.NewHandler(e.Ops, admin.HandlerConfig{
		Tokens: Tokens(),
		Logger: slog.New(slog.NewTextHandler(e.Logs, nil)),
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
	e.Server = httptest.NewServer(h)
	t.Cleanup(e.Server.Close)
	e.API = e.Server.URL + prefix + "/api/v1/"
	return e
}

// Must fails the test on a non-nil err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Resp is an HTTP answer.
type Resp struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a generic map.
func (r Resp) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.Body, err)
	}
	return m
}

// ErrText is the body's "error".
func (r Resp) ErrText(t *testing.T) string {
	t.Helper()
	s, _ := r.JSON(t)["error"].(string)
	return s
}

// Call sends method path (relative to /api/v1/ unless it starts with
// http) with the token, a JSON body (a string is sent as is; nil sends
// nothing) and extra headers. POSTs get Content-Type application/json
// unless hdr sets one ("" removes it).
func (e *Env) Call(method, path, token string, body any, hdr map[string]string) Resp {
	e.T.Helper()
	url := path
	if !strings.HasPrefix(path, "http") {
		url = e.API + path
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
			e.T.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(e.Ctx, method, url, rd)
	if err != nil {
		e.T.Fatal(err)
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
	res, err := e.Server.Client().Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		e.T.Fatal(err)
	}
	return Resp{res.StatusCode, res.Header, data}
}

// Ingest posts a task with an Idempotency-Key.
func (e *Env) Ingest(token, key string, body any) Resp {
	e.T.Helper()
	h := map[string]string{}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	return e.Call("POST", "tasks", token, body, h)
}

// WaitState waits (bounded) until the ledger shows task id in state st.
func (e *Env) WaitState(id string, st ledger.State) *ledger.Task {
	e.T.Helper()
	var last *ledger.Task
	for i := 0; i < 1500; i++ {
		tk, err := e.L.Get(e.Ctx, id)
		if err == nil && tk.State == st {
			return tk
		}
		last = tk
		time.Sleep(20 * time.Millisecond)
	}
	e.T.Fatalf("task %s never reached %s (last seen %+v)", id, st, last)
	return nil
}

// WaitDead waits until the broker's dead-letter queue of lane holds n
// messages and the ledger shows id dead.
func (e *Env) WaitDead(lane, id string, n int64) {
	e.T.Helper()
	e.WaitState(id, ledger.Dead)
	for i := 0; i < 1500; i++ {
		if s, err := e.B.Stats(e.Ctx, lane); err == nil && s.DeadLettered == n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.T.Fatalf("lane %s never had %d dead letters", lane, n)
}

// Enqueue enqueues directly through the client.
func (e *Env) Enqueue(args switchyard.TaskArgs, opts *switchyard.EnqueueOpts) string {
	e.T.Helper()
	r, err := e.Client.Enqueue(e.Ctx, args, opts)
	if err != nil {
		e.T.Fatal(err)
	}
	return r.ID
}

// Totals is the number of tasks in the ledger and of messages the broker
// holds in every default lane (ready, in flight, delayed, dead).
func (e *Env) Totals() (tasks int, msgs int64) {
	e.T.Helper()
	all, err := e.L.List(e.Ctx, ledger.Filter{Limit: 1000})
	if err != nil {
		e.T.Fatal(err)
	}
	for _, lane := range []string{"interactive", "scheduled", "batch", "human-review"} {
		s, err := e.B.Stats(e.Ctx, lane)
		if err != nil {
			e.T.Fatal(err)
		}
		msgs += s.Ready + s.InFlight + s.Delayed + s.DeadLettered
	}
	return len(all), msgs
}

// HistoryBody is the answer of GET history.
type HistoryBody struct {
	admin.HistoryInfo
	At time.Time `json:"at"`
}

// History gets path with the read token and decodes a 200 answer.
func (e *Env) History(path string) (HistoryBody, Resp) {
	e.T.Helper()
	r := e.Call("GET", path, ReadSecret, nil, nil)
	var b HistoryBody
	if r.Status == http.StatusOK {
		if err := json.Unmarshal(r.Body, &b); err != nil {
			e.T.Fatalf("GET %s: %s (%v)", path, r.Body, err)
		}
	}
	return b, r
}

// BatchAnswer is the answer of POST tasks:batch.
type BatchAnswer struct {
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

// Batch posts body to tasks:batch with token and decodes a 200 answer.
func (e *Env) Batch(token string, body any) (Resp, BatchAnswer) {
	e.T.Helper()
	r := e.Call("POST", "tasks:batch", token, body, nil)
	var a BatchAnswer
	if r.Status == http.StatusOK {
		if err := json.Unmarshal(r.Body, &a); err != nil {
			e.T.Fatalf("batch answer %s: %v", r.Body, err)
		}
	}
	return r, a
}

// Spend gets path with token and decodes a 200 answer.
func (e *Env) Spend(path, token string) (admin.SpendInfo, Resp) {
	e.T.Helper()
	r := e.Call("GET", path, token, nil, nil)
	var info admin.SpendInfo
	if r.Status == http.StatusOK {
		if err := json.Unmarshal(r.Body, &info); err != nil {
			e.T.Fatalf("GET %s: %s (%v)", path, r.Body, err)
		}
	}
	return info, r
}
